"""Elementwise and broadcasting arithmetic with numpy's broadcasting rules.

Unary ops are tagged ``"elemwise"``, binary ops ``"broadcast"``: the registry
inlines them into their consumers, and a fused kernel ends with them.
"""
from __future__ import annotations

from typing import Sequence, Tuple, Union

from ...dsl.expr import Const, Expr, cast, const, select, structural_equal
from ...dsl.intrinsics import pow as _pow
from ...dsl.intrinsics import elementwise_max, elementwise_min, exp, sigmoid as _sigmoid, sqrt as _sqrt, tanh as _tanh
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError

Operand = Union[Tensor, float, int]


def static_shape(t: Tensor) -> Tuple[int, ...]:
    dims = []
    for d in t.shape:
        if not isinstance(d, Const):
            raise ExprError(f"{t.name} has a symbolic shape {t.shape}; network ops need static shapes")
        dims.append(int(d.value))
    return tuple(dims)


def extents(t: Tensor) -> tuple:
    """``t``'s shape with each constant extent as an int and each symbolic one (an ``lw.var`` size,
    as shape-polymorphic network kernels have) as its expression; ops that work on either use it."""
    return tuple(int(d.value) if isinstance(d, Const) else d for d in t.shape)


def broadcast_shape(a: Sequence, b: Sequence) -> Tuple:
    """numpy's broadcast of two shapes (aligned at the right; 1 stretches).  A symbolic extent (an
    ``lw.var`` size, as ``extents`` gives it) broadcasts with a 1 or with the same extent only."""
    n = max(len(a), len(b))
    a = (1,) * (n - len(a)) + tuple(a)
    b = (1,) * (n - len(b)) + tuple(b)
    out = []
    for x, y in zip(a, b):
        if not isinstance(x, int) or not isinstance(y, int):
            if isinstance(y, int) and y == 1 or not isinstance(y, int) and structural_equal(x, y):
                out.append(x)
            elif isinstance(x, int) and x == 1:
                out.append(y)
            else:
                raise ExprError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast along equal sizes")
            continue
        if x != y and x != 1 and y != 1:
            raise ExprError(f"shapes {tuple(a)} and {tuple(b)} do not broadcast")
        out.append(max(x, y) if min(x, y) != 0 else 0)
    return tuple(out)


def broadcast_index(t: Tensor, out_ndim: int, idx) -> Expr:
    """``t`` read at output index ``idx`` under numpy broadcasting (a size 1 broadcasts; sizes may be
    symbolic)."""
    shape = extents(t)
    lead = out_ndim - len(shape)
    return t[tuple(0 if d == 1 else idx[lead + k] for k, d in enumerate(shape))] if shape else t[()]


def _as_tensor_or_const(x: Operand, dtype: str):
    return x if isinstance(x, Tensor) else const(float(x), dtype)


def binary(op: str, a: Operand, b: Operand, name: str = "") -> Tensor:
    """``a <op> b`` with numpy broadcasting; ``op`` in add, sub, mul, div, max, min, pow."""
    if not isinstance(a, Tensor) and not isinstance(b, Tensor):
        raise ExprError("binary op needs at least one tensor")
    dtype = (a if isinstance(a, Tensor) else b).dtype
    sa = extents(a) if isinstance(a, Tensor) else ()
    sb = extents(b) if isinstance(b, Tensor) else ()
    shape = broadcast_shape(sa, sb)
    nd = len(shape)
    fns = {"add": lambda x, y: x + y, "sub": lambda x, y: x - y, "mul": lambda x, y: x * y,
           "div": lambda x, y: x / y, "max": elementwise_max, "min": elementwise_min, "pow": _pow}
    if op not in fns:
        raise ExprError(f"unknown binary op {op!r}; one of {', '.join(fns)}")
    fn = fns[op]

    def read(x, idx):
        return broadcast_index(x, nd, idx) if isinstance(x, Tensor) else _as_tensor_or_const(x, dtype)

    return compute(shape, lambda *idx: fn(read(a, idx), read(b, idx)), name=name or op, tag="broadcast")


def add(a, b, name="add"): return binary("add", a, b, name)
def subtract(a, b, name="sub"): return binary("sub", a, b, name)
def multiply(a, b, name="mul"): return binary("mul", a, b, name)
def divide(a, b, name="div"): return binary("div", a, b, name)
def maximum(a, b, name="max"): return binary("max", a, b, name)
def minimum(a, b, name="min"): return binary("min", a, b, name)


def unary(fn, x: Tensor, name: str) -> Tensor:
    """``fn(x)`` elementwise (``fn`` maps an expression to an expression)."""
    return compute(x.shape, lambda *idx: fn(x[idx]), name=name, tag="elemwise")


def _c(value, x: Tensor):
    return const(float(value), x.dtype)


def relu(x: Tensor, name="relu") -> Tensor:
    return unary(lambda v: elementwise_max(v, _c(0, x)), x, name)


def clip(x: Tensor, lo=None, hi=None, name="clip") -> Tensor:
    def f(v):
        if lo is not None:
            v = elementwise_max(v, _c(lo, x))
        if hi is not None:
            v = elementwise_min(v, _c(hi, x))
        return v
    return unary(f, x, name)


def leaky_relu_value(v: Expr, alpha: float = 0.01) -> Expr:
    """LeakyRelu of one value (``leaky_relu`` of a tensor, and the shape-polymorphic kernels' epilogues)."""
    return select(v >= const(0.0, v.dtype), v, v * const(float(alpha), v.dtype))


def hard_sigmoid_value(v: Expr, alpha: float = 0.2, beta: float = 0.5) -> Expr:
    return elementwise_min(elementwise_max(v * const(float(alpha), v.dtype) + const(float(beta), v.dtype),
                                           const(0.0, v.dtype)), const(1.0, v.dtype))


def hard_swish_value(v: Expr) -> Expr:
    return v * hard_sigmoid_value(v, 1 / 6, 0.5)


def leaky_relu(x: Tensor, alpha: float = 0.01, name="leaky_relu") -> Tensor:
    return unary(lambda v: leaky_relu_value(v, alpha), x, name)


def sigmoid(x: Tensor, name="sigmoid") -> Tensor:
    return unary(_sigmoid, x, name)


def tanh(x: Tensor, name="tanh") -> Tensor:
    return unary(_tanh, x, name)


def hard_sigmoid(x: Tensor, alpha: float = 0.2, beta: float = 0.5, name="hard_sigmoid") -> Tensor:
    return unary(lambda v: hard_sigmoid_value(v, alpha, beta), x, name)


def hard_swish(x: Tensor, name="hard_swish") -> Tensor:
    return unary(hard_swish_value, x, name)


def exp_(x: Tensor, name="exp") -> Tensor:
    return unary(exp, x, name)


def sqrt(x: Tensor, name="sqrt") -> Tensor:
    return unary(_sqrt, x, name)


def negative(x: Tensor, name="neg") -> Tensor:
    return unary(lambda v: _c(0, x) - v, x, name)


def identity(x: Tensor, name="identity") -> Tensor:
    return unary(lambda v: v, x, name)


def cast_to(x: Tensor, dtype: str, name="cast") -> Tensor:
    return unary(lambda v: cast(dtype, v), x, name)
