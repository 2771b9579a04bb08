"""placeholder / compute / reduce_axis (loopweave.dsl.tensor, dsl.reduction): construction and validation."""
import pytest

import loopweave as lw
from loopweave.dsl.expr import Const, Reduce, TensorLoad


def test_placeholder_shape_dtype_and_repr():
    n = lw.var("n")
    A = lw.placeholder((n, 4), name="A", dtype="float16")
    assert A.ndim == 2 and A.dtype == "float16" and A.name == "A"
    assert isinstance(A.shape[1], Const) and A.shape[1].value == 4
    assert repr(A) == "Tensor(A, shape=(n, 4), float16)"
    assert "A" in A._repr_html_()


def test_placeholder_accepts_numpy_dtype_and_int_shape():
    import numpy as np
    A = lw.placeholder(8, name="A", dtype=np.int8)
    assert A.dtype == "int8" and A.ndim == 1


@pytest.mark.parametrize("dtype, pattern", [("float128", "unsupported dtype 'float128'"),
                                            ("complex64", "unsupported dtype 'complex64'"),
                                            ("foo", "unknown dtype 'foo'")])
def test_unknown_dtype(dtype, pattern):
    with pytest.raises(lw.DTypeError, match=pattern + ".*float32"):
        lw.placeholder((3,), name="A", dtype=dtype)


def test_bad_shapes():
    with pytest.raises(lw.ExprError, match=r"shape of placeholder 'A'\[0\] must not be negative, got -3"):
        lw.placeholder((-3,), name="A")
    with pytest.raises(lw.DTypeError, match=r"shape of placeholder 'A'\[1\] must be an integer"):
        lw.placeholder((3, 2.5), name="A")
    with pytest.raises(lw.DTypeError, match=r"shape of compute 'C'\[0\] must be an integer"):
        lw.compute((lw.var("x", "float32"),), lambda i: lw.const(0.0), name="C")


def test_indexing_builds_tensor_loads_with_int64_indices():
    A = lw.placeholder((4, 4), name="A")
    i8 = lw.var("i8", "int8")
    load = A[i8, 1]
    assert isinstance(load, TensorLoad)
    assert all(ix.dtype == "int64" for ix in load.indices)


def test_indexing_with_wrong_number_of_indices():
    A = lw.placeholder((4, 4), name="A")
    with pytest.raises(lw.ExprError, match="tensor 'A' has 2 dimensions but was indexed with 1 indices"):
        A[0]
    with pytest.raises(lw.ExprError, match="tensor 'A' has 2 dimensions but was indexed with 3 indices"):
        A[0, 1, 2]


def test_indexing_with_float():
    A = lw.placeholder((4, 4), name="A")
    with pytest.raises(lw.DTypeError, match="index 1 of 'A' is the float 1.5; indices must be integers"):
        A[0, 1.5]
    with pytest.raises(lw.DTypeError, match=r"index 0 of 'A' is A\[0, 0\] of dtype float32"):
        A[A[0, 0], 0]


def test_compute_names_axes_after_lambda_parameters():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    B = lw.compute((n, n), lambda row, col: A[col, row], name="B")
    assert [iv.name for iv in B.op.axis] == ["row", "col"]
    assert all(iv.kind == "spatial" for iv in B.op.axis)
    assert B.op.input_tensors == [A]
    assert B.dtype == "float32"


def test_compute_with_wrong_arity():
    with pytest.raises(lw.ExprError, match="compute 'C' has 2 dimensions; its function must take 2 index arguments"):
        lw.compute((3, 3), lambda i: lw.const(0.0), name="C")


def test_compute_constant_body():
    C = lw.compute((3,), lambda i: 1.5, name="C")
    assert C.dtype == "float32"


def test_reduce_axis_and_sum():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    k = lw.reduce_axis((0, n), name="k")
    assert k.kind == "reduce" and k.name == "k"
    C = lw.compute((n,), lambda i: lw.sum(A[i, k], axis=k), name="C")
    assert isinstance(C.op.body[0], Reduce)
    assert C.op.reduce_axis == [k]
    k2 = lw.reduce_axis((2, 5), name="k2")
    assert k2.min.value == 2 and k2.extent.value == 3


def test_reduce_axis_validation():
    with pytest.raises(lw.ExprError, match=r"reduce_axis takes a \(min, max\) pair, got 5"):
        lw.reduce_axis(5)
    with pytest.raises(lw.DTypeError, match="reduce_axis 'k' max must be an integer"):
        lw.reduce_axis((0, 2.5), name="k")


def test_reducer_needs_a_reduce_axis():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    with pytest.raises(lw.ExprError, match=r"sum\(\.\.\., axis=\.\.\.\) needs reduce axes made by lw.reduce_axis"):
        lw.compute((n,), lambda i: lw.sum(A[i, i], axis=i), name="C")
    with pytest.raises(lw.ExprError, match="needs axis="):
        lw.sum(A[0, 0], axis=None)


def test_reduction_must_be_the_whole_body():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    k = lw.reduce_axis((0, n), name="k")
    with pytest.raises(lw.ExprError, match="compute 'C': a reduction must be the whole body"):
        lw.compute((n,), lambda i: lw.sum(A[i, k], axis=k) + 1.0, name="C")


def test_elementwise_min_max_vs_reducing():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    k = lw.reduce_axis((0, n), name="k")
    assert not isinstance(lw.max(A[0, 0], 1.0), Reduce)
    assert isinstance(lw.max(A[0, k], axis=k), Reduce)


def test_tuple_reduction_gives_two_tensors():
    n = lw.var("n")
    A = lw.placeholder((4, n), name="A")
    k = lw.reduce_axis((0, n), name="k")
    idx, val = lw.compute((4,), lambda i: lw.argmax((k, A[i, k]), axis=k), name="am")
    assert idx.dtype == "int64" and val.dtype == "float32"
    assert idx.op is val.op and idx.name == "am.v0"


def test_comm_reducer():
    n = lw.var("n")
    A = lw.placeholder((4, n), name="A")
    k = lw.reduce_axis((0, n), name="k")
    mysum = lw.comm_reducer(lambda x, y: x + y, lambda t: lw.const(0, t), name="mysum")
    C = lw.compute((4,), lambda i: mysum(A[i, k], axis=k), name="C")
    assert C.op.body[0].combiner.name == "mysum"


def test_thread_axis_tags():
    assert lw.thread_axis("threadIdx.x").kind == "thread"
    with pytest.raises(lw.ExprError, match="unknown thread axis 'foo'"):
        lw.thread_axis("foo")
