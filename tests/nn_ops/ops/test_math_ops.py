"""The elementwise ops of math_ops, trig and logic_ops at vectorized sizes, against numpy.

The ONNX node cases use tiny tensors whose loops are too short to vectorize; these use
shapes whose inner axis fills whole vectors, with operands broadcast along it, so the
vector code paths (and selects with lane-invariant values) are exercised.
"""
import math

import numpy as np
import pytest

import loopweave as lw
from loopweave.nn_ops.ops import arg_reduce, cumsum, index as index_ops, logic as logic_ops, math as math_ops
from loopweave.nn_ops.ops.registry import schedule


def _run(inputs, arrays, out):
    f = lw.build(schedule([out]), list(inputs) + [out])
    result = np.empty(tuple(int(d.value) for d in out.shape), out.dtype)
    f(*arrays, result)
    return result


def _softplus(x):
    return np.log1p(np.exp(-np.abs(x))) + np.maximum(x, 0)


ATTRS = {"alpha": 0.7, "gamma": 1.3, "lambd": 0.5, "bias": 0.2}
UNARY = {
    "abs": np.abs, "sign": np.sign, "reciprocal": lambda x: 1 / x, "floor": np.floor, "ceil": np.ceil,
    "round": np.round, "log": np.log, "softplus": _softplus, "softsign": lambda x: x / (1 + np.abs(x)),
    "mish": lambda x: x * np.tanh(_softplus(x)), "swish": lambda x: x / (1 + np.exp(-0.7 * x)),
    "elu": lambda x: np.where(x > 0, x, 0.7 * np.expm1(x)),
    "selu": lambda x: 1.3 * np.where(x > 0, x, 0.7 * np.expm1(x)),
    "celu": lambda x: np.where(x > 0, x, 0.7 * np.expm1(x / 0.7)),
    "thresholded_relu": lambda x: np.where(x > 0.7, x, 0), "shrink": lambda x: np.where(x < -0.5, x + 0.2,
                                                                                         np.where(x > 0.5, x - 0.2, 0)),
    "sin": np.sin, "cos": np.cos, "tan": np.tan, "atan": np.arctan, "asin": np.arcsin, "acos": np.arccos,
    "sinh": np.sinh, "cosh": np.cosh, "asinh": np.arcsinh, "acosh": np.arccosh, "atanh": np.arctanh,
}
DOMAIN = {"log": (0.01, 10), "reciprocal": (0.1, 10), "asin": (-0.999, 0.999), "acos": (-0.999, 0.999),
          "atanh": (-0.999, 0.999), "acosh": (1.0, 50), "sin": (-300, 300), "cos": (-300, 300), "tan": (-1.5, 1.5)}


def test_every_unary_has_a_reference_here():
    assert set(UNARY) == set(math_ops.UNARY)


@pytest.mark.parametrize("kind", sorted(UNARY))
@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_unary_float(kind, dtype):
    lo, hi = DOMAIN.get(kind, (-6, 6))
    x = np.random.default_rng(0).uniform(lo, hi, (3, 96)).astype(dtype)
    X = lw.placeholder(x.shape, name="X", dtype=dtype)
    got = _run([X], [x], math_ops.math_unary(kind, X, ATTRS))
    want = UNARY[kind](x.astype(np.float64))
    np.testing.assert_allclose(got, want, rtol=2e-6 if dtype == "float32" else 1e-9, atol=1e-6)


@pytest.mark.parametrize("kind", ["abs", "sign"])
@pytest.mark.parametrize("dtype", ["int64", "int32", "int8"])
def test_unary_integer(kind, dtype):
    x = np.random.default_rng(1).integers(-100, 100, (2, 64)).astype(dtype)
    X = lw.placeholder(x.shape, name="X", dtype=dtype)
    np.testing.assert_array_equal(_run([X], [x], math_ops.math_unary(kind, X)), UNARY[kind](x))


def test_isnan_isinf():
    x = np.random.default_rng(2).standard_normal((2, 64)).astype(np.float32)
    x[0, ::5], x[1, ::7], x[1, 3] = np.inf, -np.inf, np.nan
    X = lw.placeholder(x.shape, name="X")
    np.testing.assert_array_equal(_run([X], [x], math_ops.is_nan(X)), np.isnan(x))
    np.testing.assert_array_equal(_run([X], [x], math_ops.is_inf(X)), np.isinf(x))
    np.testing.assert_array_equal(_run([X], [x], math_ops.is_inf(X, True, False)), x == np.inf)
    np.testing.assert_array_equal(_run([X], [x], math_ops.is_inf(X, False, True)), x == -np.inf)


def test_float_mod_and_prelu_broadcast():
    rng = np.random.default_rng(3)
    a = rng.uniform(-20, 20, (4, 64)).astype(np.float32)
    b = rng.choice([-3.5, -1.25, 0.75, 2.0, math.inf], (4, 1)).astype(np.float32)
    A, B = lw.placeholder(a.shape, name="A"), lw.placeholder(b.shape, name="B")
    np.testing.assert_allclose(_run([A, B], [a, b], math_ops.math_binary("fmod", A, B)), np.fmod(a, b), atol=1e-6)
    np.testing.assert_allclose(_run([A, B], [a, b], math_ops.math_binary("mod", A, B)), np.mod(a, b), atol=1e-6)
    np.testing.assert_allclose(_run([A, B], [a, b], math_ops.math_binary("prelu", A, B)), np.where(a < 0, a * b, a))


@pytest.mark.parametrize("dtype", ["float32", "int64", "int8", "bool"])
@pytest.mark.parametrize("shapes", [((1,), (1,)), ((), ()), ((5, 1), (1,)), ((5, 64), ())], ids=str)
def test_where_with_values_broadcast_along_the_vector_axis(dtype, shapes):
    rng = np.random.default_rng(4)
    c = rng.random((5, 64)) > 0.5
    x, y = (np.asarray(rng.standard_normal(s) * 50).astype(dtype) for s in shapes)
    C = lw.placeholder(c.shape, name="C", dtype="bool")
    X, Y = lw.placeholder(x.shape, name="X", dtype=dtype), lw.placeholder(y.shape, name="Y", dtype=dtype)
    np.testing.assert_array_equal(_run([C, X, Y], [c, x, y], logic_ops.where(C, X, Y)), np.where(c, x, y))


@pytest.mark.parametrize("op", sorted(logic_ops.COMPARE))
def test_compare_vectorized(op):
    rng = np.random.default_rng(5)
    a, b = rng.integers(-3, 3, (4, 64)).astype(np.int32), rng.integers(-3, 3, (64,)).astype(np.int32)
    A, B = lw.placeholder(a.shape, name="A", dtype="int32"), lw.placeholder(b.shape, name="B", dtype="int32")
    ref = {"equal": np.equal, "less": np.less, "greater": np.greater, "less_equal": np.less_equal,
           "greater_equal": np.greater_equal}[op]
    np.testing.assert_array_equal(_run([A, B], [a, b], logic_ops.compare(op, A, B)), ref(a, b))


def test_one_hot_along_the_vector_axis():
    i = np.array([0, 5, -1, 127, 200, -200])
    v = np.array([-2.0, 9.0], np.float32)
    I, V = lw.placeholder(i.shape, name="I", dtype="int64"), lw.placeholder((2,), name="V")
    want = np.full((6, 128), -2.0, np.float32)
    for r, k in enumerate(i):
        if -128 <= k < 128:
            want[r, k % 128] = 9.0
    np.testing.assert_array_equal(_run([I, V], [i, v], index_ops.one_hot(I, V, 128)), want)


@pytest.mark.parametrize("kind,select_last", [("max", False), ("min", False), ("max", True)])
def test_arg_reduce_and_hardmax(kind, select_last):
    x = np.random.default_rng(6).integers(0, 4, (3, 70)).astype(np.float32)   # many ties
    X = lw.placeholder(x.shape, name="X")
    got = _run([X], [x], arg_reduce.arg_reduce(X, 1, kind, keepdims=False, select_last=select_last))
    pick = np.argmax if kind == "max" else np.argmin
    want = x.shape[1] - 1 - pick(x[:, ::-1], axis=1) if select_last else pick(x, axis=1)
    np.testing.assert_array_equal(got, want)
    hard = np.zeros_like(x)
    hard[np.arange(3), np.argmax(x, 1)] = 1
    np.testing.assert_array_equal(_run([X], [x], arg_reduce.hardmax(X, 1)), hard)


@pytest.mark.parametrize("exclusive", [False, True])
@pytest.mark.parametrize("reverse", [False, True])
@pytest.mark.parametrize("kind", ["sum", "prod"])
def test_cumulative(exclusive, reverse, kind):
    x = np.random.default_rng(7).integers(-3, 4, (3, 40)).astype(np.float32)
    X = lw.placeholder(x.shape, name="X")
    y = x[:, ::-1] if reverse else x
    if exclusive:
        y = np.concatenate([np.full((3, 1), 0.0 if kind == "sum" else 1.0, np.float32), y[:, :-1]], axis=1)
    want = np.cumsum(y, axis=1) if kind == "sum" else np.cumprod(y, axis=1)
    want = want[:, ::-1] if reverse else want
    np.testing.assert_array_equal(_run([X], [x], cumsum.cumsum(X, 1, exclusive, reverse, kind=kind)), want)


@pytest.mark.parametrize("mode", ["edge", "reflect", "wrap"])
def test_pad_modes(mode):
    x = np.random.default_rng(8).standard_normal((3, 5, 40)).astype(np.float32)
    before, after = (0, 2, 3), (1, 4, 39 if mode != "reflect" else 30)
    X = lw.placeholder(x.shape, name="X")
    want = np.pad(x, list(zip(before, after)), mode=mode)
    np.testing.assert_array_equal(_run([X], [x], index_ops.pad_index(X, before, after, mode)), want)


@pytest.mark.parametrize("largest", [True, False])
@pytest.mark.parametrize("axis", [0, 1])
def test_topk_with_ties(largest, axis):
    from loopweave.nn_ops.ops import topk
    x = np.random.default_rng(9).integers(0, 6, (5, 50)).astype(np.float32)
    X = lw.placeholder(x.shape, name="X")
    k = 3
    got = _run([X], [x], topk.topk_indices(X, k, axis, largest))
    position = np.indices(x.shape)[axis]
    order = np.lexsort((position, -x if largest else x), axis=axis)     # ties: lower index first
    np.testing.assert_array_equal(got, np.take(order, np.arange(k), axis=axis))


@pytest.mark.parametrize("equation,shapes", [
    ("ij,jk->ik", [(5, 7), (7, 33)]), ("bij,bjk->bik", [(2, 3, 4), (2, 4, 40)]), ("ii->i", [(9, 9)]),
    ("...ij->...ji", [(2, 3, 4, 5)]), ("i,j", [(6,), (40,)]), ("ij->", [(5, 6)]), ("b...d,d->b...", [(3, 4, 5), (5,)]),
    ("ij,ij->i", [(4, 48), (1, 48)]),
], ids=lambda v: v if isinstance(v, str) else "")
def test_einsum(equation, shapes):
    from loopweave.nn_ops.ops import einsum
    rng = np.random.default_rng(11)
    arrays = [rng.standard_normal(s).astype(np.float32) for s in shapes]
    tensors = [lw.placeholder(s, name=f"T{k}") for k, s in enumerate(shapes)]
    got = _run(tensors, arrays, einsum.einsum(equation, tensors))
    np.testing.assert_allclose(got, np.einsum(equation, *arrays), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("shape,axes,kind", [((64, 48), (0, 1), "min"), ((2, 16, 4, 24), (1, 2, 3), "max"),
                                             ((6, 5, 40), (0, 2), "sum")])
def test_reductions_over_several_axes(shape, axes, kind):
    """The reduce schedule fuses reduce axes: LLVM hung on min/max nested two loops deep (64 x 48)."""
    from loopweave.nn_ops.ops import shape as shape_ops
    x = np.random.default_rng(14).standard_normal(shape).astype(np.float32)
    X = lw.placeholder(shape, name="X")
    got = _run([X], [x], shape_ops.reduce(X, axes, kind, keepdims=True))
    np.testing.assert_allclose(got, getattr(np, kind)(x, axis=axes, keepdims=True), rtol=1e-5)
