"""Mistakes a newcomer makes in a compute definition or a build, each met with a message naming the
fix: an ambiguous dtype, numpy's or Python's functions on expressions, two arguments of one name,
vectorize/unroll of a symbolic extent (a warning: the loop stays serial)."""
import re
import warnings

import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops


@pytest.mark.parametrize("dtype, choices", [("float", "'float32' (loopweave's default) or 'float64'"),
                                            (float, "'float32' (loopweave's default) or 'float64'"),
                                            ("int", "'int32' or 'int64'"), (int, "'int32' or 'int64'"),
                                            ("uint", "'uint8', 'uint16', 'uint32' or 'uint64'")])
def test_ambiguous_dtype_names_are_refused(dtype, choices):
    with pytest.raises(lw.DTypeError, match=f"is ambiguous .*; write {re.escape(choices)}"):
        lw.placeholder((4,), name="A", dtype=dtype)


def test_explicit_dtypes_still_read_as_before():
    assert lw.placeholder((4,), name="A", dtype=np.float64).dtype == "float64"
    assert lw.placeholder((4,), name="A", dtype=np.dtype("int64")).dtype == "int64"
    assert lw.placeholder((4,), name="A", dtype=bool).dtype == "bool"


@pytest.mark.parametrize("call, instead", [(np.exp, "lw.exp"), (np.sqrt, "lw.sqrt"), (np.abs, "lw.abs"),
                                           (lambda x: np.maximum(x, 0.0), r"lw.max\(a, b\)")])
def test_numpy_functions_on_expressions_name_loopweave_s(call, instead):
    A = lw.placeholder((4,), name="A")
    with pytest.raises(lw.ExprError, match=f"does not work on loopweave expressions .*; use {instead}"):
        lw.compute((4,), lambda i: call(A[i]), name="B")


def test_python_max_on_expressions_names_lw_max():
    A = lw.placeholder((4,), name="A")
    with pytest.raises(lw.ExprError, match=r"Python's max\(a, b\) and min\(a, b\) .* use lw.max\(a, b\)"):
        lw.compute((4,), lambda i: max(A[i], 0.0), name="B")


def test_numpy_scalars_still_work_as_numbers_and_arrays_are_refused():
    A = lw.placeholder((4,), name="A")
    B = lw.compute((4,), lambda i: np.float32(0.5) * A[i] + np.float32(1.0) - (np.float32(2.0) < A[i]).astype(
        "float32"), name="B")
    f = lw.build(lw.create_schedule(B), [A, B])
    a = np.array([1.0, 2.0, 3.0, 4.0], np.float32)
    out = np.empty(4, np.float32)
    f(a, out)
    np.testing.assert_allclose(out, 0.5 * a + 1.0 - (a > 2.0))
    with pytest.raises(lw.ExprError, match="a numpy array and a loopweave expression"):
        np.ones(3, np.float32) * A[0]


def test_two_arguments_of_one_name_are_refused():
    A = lw.placeholder((4,), name="A")
    A2 = lw.placeholder((4,), name="A")
    B = lw.compute((4,), lambda i: A[i] + A2[i], name="B")
    s = lw.create_schedule(B)
    with pytest.raises(lw.LoweringError, match="arguments 0 and 1 are two different tensors both named 'A'"):
        lw.build(s, [A, A2, B])
    with pytest.raises(lw.LoweringError, match=r"the tensor 'A' is listed twice .*positions 0 and 1"):
        lw.lower(s, [A, A, B])


def test_vectorize_or_unroll_of_a_symbolic_extent_warns_with_the_split():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = lw.create_schedule(B)
    s[B].vectorize(B.op.axis[0])
    with pytest.warns(lw.ScheduleWarning, match=r"vectorize: axis 'i' of stage 'B' has the symbolic extent n, .*"
                                                r"o, i = s\[B\]\.split\(i, factor=8\); s\[B\]\.vectorize\(i\)"):
        lw.lower(s, [A, B])
    s = lw.create_schedule(B)
    s[B].unroll(B.op.axis[0])
    with pytest.warns(lw.ScheduleWarning, match="unroll: axis 'i' of stage 'B' has the symbolic extent n"):
        lw.build(s, [A, B])
    s = lw.create_schedule(B)
    io, ii = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(ii)
    with warnings.catch_warnings():
        warnings.simplefilter("error", lw.ScheduleWarning)
        lw.lower(s, [A, B])                     # a constant extent: no warning


def test_a_stage_computed_inside_a_tile_is_not_warned_about():
    """compute_at gives the stage's axes the tile's extents: bound inference decides, not the root extent."""
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] * 2.0, name="B")
    C = lw.compute((n,), lambda i: B[i] + 1.0, name="C")
    s = lw.create_schedule(C)
    co, ci = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(ci)
    s[B].compute_at(s[C], co)
    s[B].vectorize(B.op.axis[0])
    with warnings.catch_warnings():
        warnings.simplefilter("error", lw.ScheduleWarning)
        lw.lower(s, [A, C])


def test_the_op_library_s_defaults_do_not_warn():
    n = lw.var("n")
    A = lw.placeholder((n, 64), name="A")
    B = lw.placeholder((64, 64), name="B")
    C = nn_ops.matmul(A, B)
    with warnings.catch_warnings():
        warnings.simplefilter("error", lw.ScheduleWarning)
        lw.lower(nn_ops.schedule(C), [A, B, C])
