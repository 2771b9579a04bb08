"""Elementwise math beyond nn_ops/ops/elementwise.py: activations, rounding, integer division, casts.

(A select between two constants is written as arithmetic on the cast condition: the code
generator's vector select wants at least one vector operand.)

Each op is an expression per element, tagged ``"elemwise"`` (one input) or
``"broadcast"`` (several, numpy broadcasting): inlined into consumers or given the
injective schedule.  Integer division and remainder follow ONNX (and numpy's
``trunc``/``fmod``/``mod``); a zero divisor gives 0 instead of a hardware trap, as
numpy does, so bad data never kills the process.
"""
from __future__ import annotations

import math

from ...dsl import dtypes
from ...dsl.expr import cast, const, select
from ...dsl.intrinsics import abs as lw_abs
from ...dsl.intrinsics import ceil, exp, floor, fmod, log, round as lw_round, sigmoid, tanh
from ...dsl.tensor import Tensor
from ...errors import ExprError
from . import trig
from .elementwise import unary
from .logic import broadcast_map


def _c(value, dtype):
    return const(value, dtype)


def _softplus(v):
    """log(1 + exp(v)) without overflow: max(v, 0) + log(1 + exp(-|v|))."""
    zero, one = _c(0.0, v.dtype), _c(1.0, v.dtype)
    return select(v > zero, v, zero) + log(one + exp(zero - lw_abs(v)))


def _expm1_branch(v, alpha):
    return _c(alpha, v.dtype) * (exp(v) - _c(1.0, v.dtype))


# name -> (fn(v, attrs), needs a float input)
UNARY = {
    "abs": (lambda v, a: lw_abs(v), False),
    "sign": (lambda v, a: cast(v.dtype, v > _c(0, v.dtype)) - cast(v.dtype, v < _c(0, v.dtype)), False),
    "reciprocal": (lambda v, a: _c(1.0, v.dtype) / v, True),
    "floor": (lambda v, a: floor(v), True),
    "ceil": (lambda v, a: ceil(v), True),
    "round": (lambda v, a: lw_round(v), True),
    "log": (lambda v, a: log(v), True),
    "softplus": (lambda v, a: _softplus(v), True),
    "softsign": (lambda v, a: v / (_c(1.0, v.dtype) + lw_abs(v)), True),
    "mish": (lambda v, a: v * tanh(_softplus(v)), True),
    "swish": (lambda v, a: v * sigmoid(v * _c(a["alpha"], v.dtype)), True),
    "elu": (lambda v, a: select(v > _c(0.0, v.dtype), v, _expm1_branch(v, a["alpha"])), True),
    "selu": (lambda v, a: _c(a["gamma"], v.dtype) * select(v > _c(0.0, v.dtype), v,
                                                          _expm1_branch(v, a["alpha"])), True),
    "celu": (lambda v, a: select(v > _c(0.0, v.dtype), v,
                                 _expm1_branch(v / _c(a["alpha"], v.dtype), a["alpha"])), True),
    "thresholded_relu": (lambda v, a: select(v > _c(a["alpha"], v.dtype), v, _c(0.0, v.dtype)), True),
    "shrink": (lambda v, a: select(v < _c(-a["lambd"], v.dtype), v + _c(a["bias"], v.dtype),
                                   select(v > _c(a["lambd"], v.dtype), v - _c(a["bias"], v.dtype),
                                          _c(0.0, v.dtype))), True),
}


UNARY.update({name: ((lambda f: lambda v, a: f(v))(fn), True) for name, fn in trig.FUNCTIONS.items()})


def math_unary(kind: str, x: Tensor, attrs=None) -> Tensor:
    fn, float_only = UNARY[kind]
    if float_only and not dtypes.is_float(x.dtype):
        raise ExprError(f"{kind} needs a float tensor, got {x.dtype}")
    attrs = dict(attrs or {})
    return unary(lambda v: fn(v, attrs), x, kind)


def is_nan_value(v):
    """Whether element ``v`` is NaN (the one value unequal to itself)."""
    return v != v


def is_nan(x: Tensor) -> Tensor:
    return unary(is_nan_value, x, "isnan")


def is_inf_value(v, positive: bool = True, negative: bool = True):
    """Whether element ``v`` is an infinity of a sign asked for."""
    if positive and negative:
        return lw_abs(v) == _c(math.inf, v.dtype)
    if positive:
        return v == _c(math.inf, v.dtype)
    if negative:
        return v == _c(-math.inf, v.dtype)
    return (v != v) & (v == v)       # neither sign asked for: always False


def is_inf(x: Tensor, positive: bool = True, negative: bool = True) -> Tensor:
    return unary(lambda v: is_inf_value(v, positive, negative), x, "isinf")


def _trunc_div(a, b):
    """Integer a / b rounded toward zero; 0 where b == 0."""
    zero, one = _c(0, a.dtype), _c(1, a.dtype)
    safe = select(b == zero, one, b)
    q = a // safe
    fix = (a % safe != zero) & ((a < zero) != (safe < zero))
    return select(b == zero, zero, select(fix, q + one, q))


def _floor_mod(a, b):
    """Remainder with the divisor's sign (Python's %, numpy's mod); 0 where an integer b == 0."""
    if dtypes.is_float(a.dtype):
        r = _trunc_mod(a, b)
        zero = _c(0.0, a.dtype)
        return select((r != zero) & ((r < zero) != (b < zero)), r + b, r)
    zero, one = _c(0, a.dtype), _c(1, a.dtype)
    return select(b == zero, zero, a % select(b == zero, one, b))


def _trunc_mod(a, b):
    """Remainder with the dividend's sign (C's %, numpy's fmod).

    Floats: ``x - y * trunc(x / y)`` in float64, exact for float16/float32 operands while
    ``|x / y| < 2**29``; ``fmod(x, +-inf)`` is ``x`` for finite ``x``.  float64 has no wider
    type to compute in and uses the exact ``lw.fmod`` (a libm call per element).
    """
    if a.dtype == "float64":
        return fmod(a, b)
    if dtypes.is_float(a.dtype):
        x, y = cast("float64", a), cast("float64", b)
        q = x / y
        t = select(q < _c(0.0, "float64"), ceil(q), floor(q))
        inf = _c(math.inf, "float64")
        finite_x = lw_abs(x) < inf
        r = select(finite_x & (lw_abs(y) == inf), x, x - y * t)
        return cast(a.dtype, r)
    zero = _c(0, a.dtype)
    return select(b == zero, zero, a - _trunc_div(a, b) * b)


BINARY = {"trunc_div": _trunc_div, "mod": _floor_mod, "fmod": _trunc_mod,
          "prelu": lambda x, s: select(x < _c(0, x.dtype), s * x, x),
          "div_or_zero": lambda a, b: select(b == _c(0, a.dtype), _c(0, a.dtype), a / b)}


def math_binary(kind: str, a: Tensor, b: Tensor) -> Tensor:
    if a.dtype != b.dtype:
        raise ExprError(f"{kind} of {a.dtype} and {b.dtype} tensors")
    if kind == "trunc_div" and not dtypes.is_int(a.dtype):
        raise ExprError(f"{kind} needs integer tensors, got {a.dtype}")
    return broadcast_map(BINARY[kind], [a, b], kind)


def cast_to(x: Tensor, dtype: str) -> Tensor:
    """Convert each element to ``dtype`` (float to int truncates; nonzero to bool is True)."""
    dtype = dtypes.normalize(dtype)
    return unary(lambda v: cast(dtype, v), x, "cast")
