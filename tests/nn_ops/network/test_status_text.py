"""Status text says what happened: a compile served from the disk cache says so rather than
'compiled', and a graph of symbolic sizes does not claim how it will be compiled."""
import os

import pytest

import loopweave as lw

pytest.importorskip("onnx")


def _compile_line(capsys, graph) -> str:
    lw.compile(graph, progress=True)
    lines = [line for line in capsys.readouterr().err.splitlines() if line.startswith("loopweave: ")]
    assert len(lines) == 1, lines
    return lines[0]


def test_a_compile_from_the_cache_says_so(tmp_path, monkeypatch, capsys):
    from loopweave.nn_ops.testing.model_zoo import small_cnn
    cache = tmp_path / "cache"
    cache.mkdir(mode=0o700)
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(cache))
    monkeypatch.setenv("LOOPWEAVE_BUILD_WORKERS", "0")
    graph = lw.from_onnx(small_cnn())
    first = _compile_line(capsys, graph)
    assert "9 kernel calls: 9 kernels compiled, 0 from the cache, 0 calls reuse one of them" in first, first
    second = _compile_line(capsys, graph)
    assert "9 kernel calls: 0 kernels compiled, 9 from the cache" in second, second


def test_a_graph_of_symbolic_sizes_names_them_and_claims_no_compile_mode():
    from loopweave.nn_ops.testing.model_zoo import small_cnn, symbolic_sizes
    text = repr(lw.from_onnx(symbolic_sizes(small_cnn())))
    assert "symbolic sizes H, N, W" in text and "compiled per" not in text
