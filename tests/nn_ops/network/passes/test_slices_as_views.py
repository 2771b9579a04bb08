"""Slices read as views (``passes/slices_as_views.py``): a lone slice taking one contiguous block of
a kernel's result runs no kernel, its readers get the block's address; any other slice keeps its
copy.  Checked against onnxruntime."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.testing.onnx_builder import OnnxBuilder  # noqa: E402


def _sliced(starts, ends, axes, source="relu", out_shape=None):
    """input [4, 6, 8] -> (relu) -> Slice -> MatMul by a constant [8, 5] (its own kernel) -> output."""
    b = OnnxBuilder(1)
    x = b.relu("input") if source == "relu" else "input"
    part = b.node("Slice", [x, b.const(np.array(starts), np.int64), b.const(np.array(ends), np.int64),
                            b.const(np.array(axes), np.int64)])
    out = b.node("MatMul", [part, b.init("w", b.weight((8, 5), 1.0))])
    return b.model((4, 6, 8), out, out_shape)


def _compiled_and_checked(model):
    exe = lw.compile(lw.from_onnx(model), progress=False)
    x = np.random.default_rng(0).standard_normal((4, 6, 8)).astype(np.float32)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-5, atol=1e-5)
    return exe


@pytest.mark.parametrize("starts, ends, axes, shape", [
    ([1], [3], [0], (2, 6, 5)),                 # whole rows of the leading axis
    ([2, 1], [3, 4], [0, 1], (1, 3, 5)),        # one leading row, a run of the next axis
], ids=["rows", "one row then a run"])
def test_a_contiguous_slice_of_a_kernels_result_is_a_view(starts, ends, axes, shape):
    exe = _compiled_and_checked(_sliced(starts, ends, axes, out_shape=shape))
    assert not any("slice" in c.ops for c in exe.calls)
    relu = next(c for c in exe.calls if "relu" in c.ops)
    matmul = next(c for c in exe.calls if c is not relu)
    (space, start), (read_space, read_at) = relu.args[-1], matmul.args[0]
    flat = 0
    for k, extent in enumerate((4, 6, 8)):
        flat = flat * extent + (starts[axes.index(k)] if k in axes else 0)
    assert (read_space, read_at) == (space, start + 4 * flat)


@pytest.mark.parametrize("starts, ends, axes, source, shape", [
    ([2], [5], [1], "relu", (4, 3, 5)),         # a run of the middle axis of every row: strided
    ([1], [3], [0], "input", (2, 6, 5)),        # a graph input's place takes no offset
], ids=["middle axis", "of a graph input"])
def test_other_slices_keep_their_copy(starts, ends, axes, source, shape):
    exe = _compiled_and_checked(_sliced(starts, ends, axes, source, shape))
    assert any("slice" in c.ops for c in exe.calls)


def test_a_slice_that_is_a_graph_output_is_written():
    b = OnnxBuilder(1)
    out = b.node("Slice", [b.relu("input"), b.const(np.array([1]), np.int64), b.const(np.array([3]), np.int64),
                           b.const(np.array([0]), np.int64)])
    exe = _compiled_and_checked(b.model((4, 6, 8), out, (2, 6, 8)))
    assert any("slice" in c.ops for c in exe.calls)
