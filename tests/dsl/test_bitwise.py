"""Bitwise and shift operators (loopweave.dsl.bitwise): dtype rules, folding, and what LLVM code computes."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.expr import Call, Compare, Const, Logical

INT_DTYPES = ["int8", "uint8", "int16", "uint16", "int32", "uint32", "int64", "uint64"]


def _numpy_shift(a, b, left: bool):
    """numpy's answer, as ONNX BitShift's reference: 0 (or the sign fill) for an amount outside [0, bits)."""
    return np.left_shift(a, b) if left else np.right_shift(a, b)


# ------------------------------------------------------------------ expressions and dtype rules

def test_operators_on_integers_build_bitwise_calls():
    A = lw.placeholder((4,), name="A", dtype="uint16")
    i = lw.var("i")
    for e, name in ((A[i] & A[0], "bitwise_and"), (A[i] | 3, "bitwise_or"), (3 ^ A[i], "bitwise_xor"),
                    (~A[i], "bitwise_not"), (A[i] << 2, "shift_left"), (1 >> A[i], "shift_right")):
        assert isinstance(e, Call) and e.name == name and e.dtype == "uint16"
        assert all(a.dtype == "uint16" for a in e.args)       # a literal adopts the other side's dtype
    assert str(A[i] & A[0]) == "bitwise_and(A[i], A[0])"


def test_operators_on_bools_stay_logical():
    n = lw.var("n")
    assert isinstance((n < 1) & (n > 3), Logical)
    assert isinstance(~(n < 1), Logical)
    xor = (n < 1) ^ (n > 3)
    assert isinstance(xor, Compare) and xor.op == "ne"


def test_mixed_widths_promote_like_arithmetic():
    a, b = lw.var("a", "int8"), lw.var("b", "int32")
    assert (a & b).dtype == "int32"
    assert lw.shift_left(a, b).dtype == "int32"


@pytest.mark.parametrize("build", [lambda x: x & x, lambda x: x | 1, lambda x: x ^ x, lambda x: ~x,
                                   lambda x: x << 1, lambda x: x >> x, lambda x: lw.bitwise_and(x, x)])
def test_float_operand_names_the_op_and_dtype(build):
    x = lw.var("x", "float32")
    with pytest.raises(lw.DTypeError, match=r"lw\.(bitwise_\w+|shift_\w+) \('.{1,2}'\) needs integer operands, "
                                            r"got dtype float32; cast"):
        build(x)


def test_bool_operand_to_a_bitwise_function_points_to_logic():
    n = lw.var("n")
    with pytest.raises(lw.DTypeError, match=r"lw\.shift_left \('<<'\) needs integer operands, got dtype bool"):
        (n < 1) << (n < 2)
    with pytest.raises(lw.DTypeError, match=r"bitwise_or.*got dtype bool.*&, \|, ~ on bools"):
        lw.bitwise_or(n < 1, n < 2)


def test_int_and_bool_mixed_is_a_logic_error():
    n = lw.var("n")
    with pytest.raises(lw.DTypeError, match="'\\^' needs a bool operand"):
        (n < 1) ^ n


def test_int_and_float_mixed_is_a_promotion_error():
    a, x = lw.var("a", "int32"), lw.var("x", "float32")
    with pytest.raises(lw.DTypeError, match=r"lw\.bitwise_and \('&'\) mixes int32 and float32"):
        a & x


# ------------------------------------------------------------------ constant folding

@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_constant_folding_matches_numpy(dtype):
    info = np.iinfo(dtype)
    values = sorted({info.min, info.min + 1, -1 if info.min else 0, 0, 1, 5, info.max - 1, info.max})
    amounts = [v for v in range(-2 if info.min else 0, info.bits + 3)]
    for x in values:
        cx = lw.const(x, dtype)
        assert (~cx).value == int(~np.array(x, dtype))
        for y in values:
            cy = lw.const(y, dtype)
            for got, want in (((cx & cy), np.bitwise_and), ((cx | cy), np.bitwise_or), ((cx ^ cy), np.bitwise_xor)):
                assert isinstance(got, Const) and got.dtype == dtype
                assert got.value == int(want(np.array(x, dtype), np.array(y, dtype)))
        for y in amounts:
            a, b = np.array(x, dtype), np.array(y).astype(dtype)
            assert (cx << lw.const(y, dtype)).value == int(_numpy_shift(a, b, True)), (x, y)
            assert (cx >> lw.const(y, dtype)).value == int(_numpy_shift(a, b, False)), (x, y)


# ------------------------------------------------------------------ generated code

def _run(build_fn, a, b, vectorize: bool):
    n = a.shape[0]
    A = lw.placeholder((n,), name="A", dtype=str(a.dtype))
    B = lw.placeholder((n,), name="B", dtype=str(b.dtype))
    C = lw.compute((n,), lambda i: build_fn(A[i], B[i]), name="C")
    s = lw.create_schedule(C)
    if vectorize:
        _, inner = s[C].split(C.op.axis[0], factor=8)
        s[C].vectorize(inner)
    f = lw.build(s, [A, B, C])
    out = np.zeros(n, C.dtype)
    f(a, b, out)
    return out


@pytest.mark.parametrize("vectorize", [False, True], ids=["scalar", "vector"])
@pytest.mark.parametrize("dtype", INT_DTYPES)
def test_llvm_code_matches_numpy(dtype, vectorize):
    """Every op on every integer dtype; shift amounts include negative ones and ones >= the width
    (poison for LLVM's shl/lshr/ashr, numpy's 0 or sign fill here)."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    n = 45
    a = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    b = rng.integers(info.min, info.max, n, dtype=dtype, endpoint=True)
    amounts = rng.integers(-3 if info.min else 0, info.bits + 4, n).astype(dtype)
    cases = [(lambda x, y: x & y, b, a & b), (lambda x, y: x | y, b, a | b), (lambda x, y: x ^ y, b, a ^ b),
             (lambda x, y: ~x, b, ~a), (lambda x, y: (x & 7) | 1, b, (a & 7) | 1),
             (lambda x, y: x << y, amounts, _numpy_shift(a, amounts, True)),
             (lambda x, y: x >> y, amounts, _numpy_shift(a, amounts, False)),
             (lambda x, y: x >> 1, amounts, a >> np.array(1, dtype))]
    for k, (fn, second, want) in enumerate(cases):
        np.testing.assert_array_equal(_run(fn, a, second, vectorize), want, err_msg=f"case {k}")
