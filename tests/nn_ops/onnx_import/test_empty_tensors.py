"""Empty tensors through the whole stack: an empty result is a constant (nothing to compute), a
reduction over no elements is its identity, empty pieces drop out of a Concat, and anything
else that would read an empty tensor is refused at import with the op named."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import helper  # noqa: E402

from loopweave import from_onnx  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402

from .test_index_logic import _model, _run  # noqa: E402


def _ort(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


def test_an_empty_slice_is_an_empty_output_of_the_right_shape_and_dtype():
    x = np.arange(60, dtype=np.int64).reshape(3, 4, 5)
    starts, ends = np.array([10]), np.array([20])
    model = _model([helper.make_node("Slice", ["x", "s", "e", "a"], ["y"])], [("x", "int64", x.shape)],
                   [("y", "int64", None)], initializers=[("s", starts), ("e", ends), ("a", np.array([1]))], opset=13)
    g, exe, (got,) = _run(model, {"x": x})
    assert got.shape == (3, 0, 5) and got.dtype == np.int64
    assert exe.num_groups == 0          # no kernel: the result is a constant


@pytest.mark.parametrize("op, dtype, want", [("ReduceSum", "float32", 0.0), ("ReduceMax", "float32", -np.inf),
                                             ("ReduceMin", "float32", np.inf), ("ReduceMean", "float32", np.nan),
                                             ("ReduceProd", "float32", 1.0), ("ReduceMax", "int32", -2 ** 31),
                                             ("ReduceL2", "float32", 0.0), ("ReduceLogSumExp", "float32", -np.inf)])
def test_a_reduction_over_no_elements_is_its_identity(op, dtype, want):
    x = np.zeros((2, 0, 4), dtype)
    model = _model([helper.make_node(op, ["x", "axes"], ["y"], keepdims=1)], [("x", dtype, x.shape)],
                   [("y", dtype, None)], initializers=[("axes", np.array([1]))], opset=18)
    _, _, (got,) = _run(model, {"x": x})
    assert got.shape == (2, 1, 4) and got.dtype == np.dtype(dtype)
    np.testing.assert_array_equal(got, np.full((2, 1, 4), want, dtype))
    if op != "ReduceMean":                       # onnxruntime agrees (its mean of nothing is 0, not NaN)
        np.testing.assert_array_equal(got, _ort(model, {"x": x})[0])


def test_empty_pieces_drop_out_of_a_concat():
    a, b = np.ones((2, 3), np.float32), np.full((2, 2), 2, np.float32)
    nodes = [helper.make_node("Slice", ["b", "s", "e", "ax"], ["none"]),        # (2, 0)
             helper.make_node("Concat", ["a", "none", "b"], ["y"], axis=1),
             helper.make_node("Concat", ["none", "a"], ["z"], axis=1)]
    model = _model(nodes, [("a", "float32", a.shape), ("b", "float32", b.shape)],
                   [("y", "float32", None), ("z", "float32", None)],
                   initializers=[("s", np.array([5])), ("e", np.array([9])), ("ax", np.array([1]))], opset=13)
    _, _, (y, z) = _run(model, {"a": a, "b": b})
    np.testing.assert_array_equal(y, np.concatenate([a, b], axis=1))
    np.testing.assert_array_equal(z, a)


def test_other_reads_of_an_empty_tensor_are_refused_naming_the_op():
    model = _model([helper.make_node("MatMul", ["x", "w"], ["y"])], [("x", "float32", (2, 0))],
                   [("y", "float32", None)], initializers=[("w", np.zeros((0, 3), np.float32))])
    with pytest.raises(OnnxImportError, match=r"MatMul \(opset 17\): dense reads 'x', which has no elements.*only reductions"):
        from_onnx(model)
