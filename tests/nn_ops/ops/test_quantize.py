"""``rescale`` / ``rescale_add``: an 8-bit value's (a pair's) requantization in multiply-adds, rounded half to even
and saturated."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.errors import ExprError
from loopweave.nn_ops.ops.quantize import rescale, rescale_add


@pytest.mark.parametrize("int32_range", [False, True])
def test_rescale_rounds_half_to_even_and_saturates_per_channel(int32_range):
    """Clamped in float32 before the rounding, or (``int32_range``) in int32 after it."""
    X = lw.placeholder((2, 3, 4), name="X", dtype="uint8")
    M = lw.placeholder((3, 1), name="M", dtype="float32")
    O = lw.placeholder((3, 1), name="O", dtype="float32")
    Y = rescale(X, M, O, "int8", int32_range=int32_range)
    f = lw.build(nn_ops.schedule(Y, "llvm"), [X, M, O, Y])
    x = np.array([[[0, 1, 3, 255]] * 3] * 2, np.uint8)
    m = np.array([[0.5], [1.0], [-2.0]], np.float32)
    o = np.array([[0.0], [-128.5], [100.0]], np.float32)
    out = np.zeros((2, 3, 4), np.int8)
    f(x, m, o, out)
    want = np.clip(np.rint(x.astype(np.float32) * m + o), -128, 127).astype(np.int8)
    np.testing.assert_array_equal(out, want)
    assert out[0, 0, 1] == 0 and out[0, 0, 2] == 2 and out[0, 1, 3] == 126 and out[0, 2, 3] == -128


def test_rescale_names_a_float_output_and_a_constant_of_the_wrong_dtype():
    X = lw.placeholder((4,), name="X", dtype="uint8")
    M = lw.placeholder((4,), name="M", dtype="float32")
    with pytest.raises(ExprError, match="integer type"):
        rescale(X, M, M, "float32")
    with pytest.raises(ExprError, match="O64 must be float32"):
        rescale(X, M, lw.placeholder((4,), name="O64", dtype="float64"), "uint8")


def test_rescale_add_rounds_half_to_even_and_saturates():
    A = lw.placeholder((6,), name="A", dtype="uint8")
    B = lw.placeholder((6,), name="B", dtype="int8")
    Y = rescale_add(A, B, (0.5, 1.0), -1.0, "uint8")
    f = lw.build(nn_ops.schedule(Y, "llvm"), [A, B, Y])
    a = np.array([1, 3, 0, 255, 255, 10], np.uint8)
    b = np.array([0, 0, -128, 127, 0, 1], np.int8)
    out = np.zeros(6, np.uint8)
    f(a, b, out)
    np.testing.assert_array_equal(out, [0, 0, 0, 254, 126, 5])      # -0.5 -> 0, 0.5 -> 0, ..., 126.5 -> 126, 5


def test_rescale_add_names_operands_of_different_shapes():
    with pytest.raises(ExprError, match="equal shapes"):
        rescale_add(lw.placeholder((4,), name="A", dtype="uint8"), lw.placeholder((1,), name="B", dtype="uint8"),
                    (1.0, 1.0), 0.0, "uint8")
