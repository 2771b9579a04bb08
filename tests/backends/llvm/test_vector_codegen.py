"""Vector code generation: strided loads (stride 2-4: one masked wide load + a shuffle, not a
gather) and selects of mixed widths."""
import numpy as np
import pytest

import loopweave as lw


@pytest.mark.parametrize("stride", [2, 3, 4, 5])
def test_strided_vector_load(stride):
    n = 16 * 8
    A = lw.placeholder((n * stride - (stride - 1),), name="A")     # ends exactly at the last element read
    B = lw.compute((n,), lambda i: A[i * stride] * 2.0, name="B")
    s = lw.create_schedule(B)
    _, inner = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(inner)
    f = lw.build(s, [A, B])
    a = np.random.default_rng(stride).random(n * stride - (stride - 1)).astype("float32")
    b = np.empty(n, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, a[::stride] * 2)
    ll = f.get_source("ll")
    assert ("masked.gather" in ll) == (stride > 4)


@pytest.mark.parametrize("false_reads", [False, True])
def test_vector_select_between_lane_invariant_values(false_reads):
    """select(vector condition, x, y) with x and y the same for every lane (a scalar read, a
    constant): each side is broadcast to the condition's width (one used to stay scalar)."""
    A = lw.placeholder((64,), name="A")
    C = lw.placeholder((2,), name="C")
    B = lw.compute((64,), lambda i: lw.select(A[i] > 0.5, C[0], C[1] if false_reads else lw.const(0.0)), name="B")
    s = lw.create_schedule(B)
    _, inner = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(inner)
    a = np.random.default_rng(0).random(64).astype("float32")
    c = np.array([-np.inf, 2.0], "float32")
    b = np.empty(64, "float32")
    lw.build(s, [A, C, B])(a, c, b)
    np.testing.assert_array_equal(b, np.where(a > 0.5, c[0], c[1] if false_reads else 0.0).astype("float32"))


@pytest.mark.parametrize("dtype,instruction", [("float32", "vcvtps2dq"), ("float64", "vcvtpd2dq")])
def test_a_rounded_float_converted_to_int32_is_one_rounding_convert(dtype, instruction):
    """int32(round(x)): ``llvm.lrint``, one convert in the default rounding mode (to nearest even),
    not a round and a truncating convert; halves go to even."""
    A = lw.placeholder((64,), name="A", dtype=dtype)
    B = lw.compute((64,), lambda i: lw.cast("int32", lw.round(A[i])), name="B")
    s = lw.create_schedule(B)
    _, inner = s[B].split(B.op.axis[0], factor=8)
    s[B].vectorize(inner)
    f = lw.build(s, [A, B], target="llvm -mcpu=x86-64-v3")
    asm = f.get_source("asm")
    assert instruction in asm and "vround" not in asm
    a = (np.arange(64) - 32).astype(dtype) / 4
    b = np.empty(64, "int32")
    f(a, b)
    np.testing.assert_array_equal(b, np.rint(a).astype("int32"))
