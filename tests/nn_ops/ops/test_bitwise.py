"""Bitwise ops and shifts on integer tensors (nn_ops.bitwise): numpy broadcasting, default schedule, errors."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops.bitwise import bitwise_binary, bitwise_not_

NUMPY = {"bitwise_and": np.bitwise_and, "bitwise_or": np.bitwise_or, "bitwise_xor": np.bitwise_xor,
         "shift_left": np.left_shift, "shift_right": np.right_shift}


def _values(dtype, shape, rng, shift=False):
    info = np.iinfo(dtype)
    if shift:       # amounts inside and outside [0, bits), negative ones for signed dtypes
        return rng.integers(-3 if info.min else 0, info.bits + 3, shape).astype(dtype)
    return rng.integers(info.min, info.max, shape, dtype=dtype, endpoint=True)


@pytest.mark.parametrize("kind", sorted(NUMPY))
@pytest.mark.parametrize("dtype,a_shape,b_shape", [("uint8", (2, 3, 33), (3, 1)), ("int16", (5, 17), (5, 17)),
                                                   ("int32", (1, 40), (4, 1)), ("uint64", (3, 9), (9,))])
def test_broadcast_ops_match_numpy(kind, dtype, a_shape, b_shape):
    rng = np.random.default_rng(0)
    a = _values(dtype, a_shape, rng)
    b = _values(dtype, b_shape, rng, shift=kind.startswith("shift"))
    A, B = lw.placeholder(a_shape, name="A", dtype=dtype), lw.placeholder(b_shape, name="B", dtype=dtype)
    C = bitwise_binary(kind, A, B)
    out = np.zeros(tuple(int(d.value) for d in C.shape), dtype)
    lw.build(nn_ops.schedule(C), [A, B, C])(a, b, out)
    np.testing.assert_array_equal(out, NUMPY[kind](a, b))


@pytest.mark.parametrize("dtype", ["int8", "uint16", "int64"])
def test_bitwise_not_matches_numpy(dtype):
    a = _values(dtype, (3, 21), np.random.default_rng(1))
    A = lw.placeholder(a.shape, name="A", dtype=dtype)
    C = bitwise_not_(A)
    out = np.zeros(a.shape, dtype)
    lw.build(nn_ops.schedule(C), [A, C])(a, out)
    np.testing.assert_array_equal(out, ~a)


def test_float_tensor_is_an_error_naming_op_and_dtype():
    A, B = lw.placeholder((4,), name="A"), lw.placeholder((4,), name="B")
    with pytest.raises(lw.ExprError, match="shift_left needs integer tensors, got A of dtype float32"):
        bitwise_binary("shift_left", A, B)
    with pytest.raises(lw.ExprError, match="bitwise_not needs integer tensors, got A of dtype float32"):
        bitwise_not_(A)


def test_mixed_dtypes_and_unknown_ops_are_errors():
    A, B = lw.placeholder((4,), name="A", dtype="int32"), lw.placeholder((4,), name="B", dtype="int64")
    with pytest.raises(lw.ExprError, match="bitwise_or of int32 and int64 tensors"):
        bitwise_binary("bitwise_or", A, B)
    with pytest.raises(lw.ExprError, match="unknown bitwise op 'nand'"):
        bitwise_binary("nand", A, A)
