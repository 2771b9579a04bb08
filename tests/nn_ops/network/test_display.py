"""Rich display of networks: the Graph and the Executable render as compact HTML tables."""
import re

import numpy as np
import pytest

pytest.importorskip("onnx")

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import small_cnn  # noqa: E402


def _text(markup: str) -> str:
    return re.sub(r"<[^>]+>", " ", markup)


@pytest.fixture(scope="module")
def compiled():
    return lw.compile(lw.from_onnx(small_cnn(batch=1, size=16)), progress=False)


def _feed(exe):
    rng = np.random.default_rng(0)
    return {name: rng.standard_normal(shape).astype(dtype) for name, shape, dtype in exe.inputs}


def test_graph_html_is_a_table_with_op_counts_and_shapes():
    g = lw.from_onnx(small_cnn(batch=1, size=16))
    markup = g._repr_html_()
    assert "<table>" in markup and "overflow:auto" in markup
    text = _text(markup)
    assert "conv2d" in text and "max_pool2d" in text and "[1, 8, 16, 16]" in text
    assert "ops:" in text and f"conv2d &times;{g.op_counts()['conv2d']}" in text


def test_executable_html_lists_fused_groups_and_output_shapes(compiled):
    exe = compiled
    exe.last_profile = None
    markup = exe._repr_html_()
    assert markup.count("<tr>") == len(exe.calls) + 1          # header + one row per kernel call
    text = _text(markup)
    # the first kernel is the stem conv (blocked layout: 8 channels in one block) with its
    # folded batch norm and relu fused in
    first = exe.calls[0]
    assert first.ops[0] == "conv2d_blocked" and len(first.ops) > 1
    assert " + ".join(first.ops) in text and "[1, 1, 16, 16, 8]" in text
    assert "[1, 10]" in text                                    # the final dense's output
    assert "time (ms)" not in text and "profile(feed)" in text


def test_executable_html_shows_time_per_kernel_after_profile(compiled):
    exe = compiled
    prof = exe.profile(_feed(exe), repeat=3)
    assert exe.last_profile == prof and len(prof) == len(exe.calls)
    markup = exe._repr_html_()
    text = _text(markup)
    assert "time (ms)" in text and "share" in text and "total" in text
    assert f"{sum(t for _, t in prof) * 1e3:.3f}" in text
    total = sum(t for _, t in prof)
    for _, t in prof:
        assert f"{t * 1e3:.3f}" in text and f"{t / total:.1%}" in text
    assert "width:100px" in markup                              # the slowest kernel's bar
    assert markup.count("<tr>") == len(exe.calls) + 2          # header, kernels, total


def test_kernel_groups_survive_save_and_load(compiled, tmp_path):
    exe = compiled
    path = tmp_path / "net.lwx"
    exe.save(path)
    loaded = lw.load(path)
    assert [(c.name, c.ops, c.shape) for c in loaded.calls] == [(c.name, c.ops, c.shape) for c in exe.calls]
    assert loaded.last_profile is None
    text = _text(loaded._repr_html_())
    assert " + ".join(exe.calls[0].ops) in text and "[1, 10]" in text
    np.testing.assert_array_equal(loaded.run(_feed(exe))[0], exe.run(_feed(exe))[0])
