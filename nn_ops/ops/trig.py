"""Trigonometric and hyperbolic functions as expressions over exp/log/sqrt/floor.

The code generator has no sin/cos/atan intrinsics, so these are built from the ones it
has, in float64 (then cast back), which leaves the float32 results correctly rounded or
within an ulp or two:

- sin: reduce to ``r = x - k*pi`` with ``|r| <= pi/2``, Taylor series to r^23
  (truncation error < 1e-18 there), sign by the parity of ``k``; cos(x) = sin(x + pi/2);
- atan: ``pi/2 - atan(1/a)`` above 1, ``pi/4 + atan((a-1)/(a+1))`` above tan(pi/8),
  then a Taylor series to t^41 on ``|t| <= 0.4143``; asin and acos through atan;
- sinh, cosh, asinh, acosh, atanh: their exp/log definitions.

A select between two constants is written as arithmetic on the cast condition (the code
generator's vector select wants a vector operand).  The range reduction of sin uses a float64
pi, so |x| up to about 1e6 keeps float32 accuracy; beyond that the error grows as in any
one-constant reduction.
"""
from __future__ import annotations

import math

from ...dsl.expr import Let, Var, cast, const, select
from ...dsl.intrinsics import abs as lw_abs
from ...dsl.intrinsics import exp, floor, log, round as lw_round, sqrt

F64 = "float64"


def _c(v):
    return const(float(v), F64)


def _let(value, body, name="t"):
    """``body(v)`` with ``v`` bound to ``value`` once: expressions are trees, and without the
    binding a series would copy its argument into every term."""
    v = Var(name, value.dtype)
    return Let(v, value, body(v))


def _poly_odd(x, coefficients):
    """x * (c0 + c1 x^2 + c2 x^4 + ...) by Horner's rule."""
    def horner(x2):
        acc = _c(coefficients[-1])
        for c in reversed(coefficients[:-1]):
            acc = acc * x2 + _c(c)
        return x * acc
    return _let(x * x, horner, "x2")


_SIN = [(-1) ** n / math.factorial(2 * n + 1) for n in range(12)]
_ATAN = [(-1) ** n / (2 * n + 1) for n in range(21)]


def _sin64(x):
    def reduced(k):
        odd = k - _c(2.0) * floor(k * _c(0.5))
        return (_c(1.0) - _c(2.0) * odd) * _let(x - k * _c(math.pi), lambda r: _poly_odd(r, _SIN), "r")
    return _let(lw_round(x * _c(1 / math.pi)), reduced, "k")


def _atan64(x):
    def on_abs(a):
        big = a > _c(1.0)

        def on_unit(a1):            # a1 = min(a, 1/a), in [0, 1]
            mid = a1 > _c(math.tan(math.pi / 8))
            t = select(mid, (a1 - _c(1.0)) / (a1 + _c(1.0)), a1)
            r = cast(F64, mid) * _c(math.pi / 4) + _let(t, lambda u: _poly_odd(u, _ATAN), "u")
            r = select(big, _c(math.pi / 2) - r, r)
            return select(x < _c(0.0), _c(0.0) - r, r)
        return _let(select(big, _c(1.0) / a, a), on_unit, "a1")
    return _let(lw_abs(x), on_abs, "a")


def _asin64(x):
    return _let(x / sqrt(_c(1.0) - x * x), _atan64, "q")


def _in64(fn):
    """Evaluate ``fn`` in float64 (on the input bound once) and cast back to the input's dtype."""
    def apply(v):
        return cast(v.dtype, _let(cast(F64, v), fn, "x"))
    return apply


FUNCTIONS = {
    "sin": _in64(_sin64),
    "cos": _in64(lambda x: _sin64(x + _c(math.pi / 2))),
    "tan": _in64(lambda x: _sin64(x) / _sin64(x + _c(math.pi / 2))),
    "atan": _in64(_atan64),
    "asin": _in64(_asin64),
    "acos": _in64(lambda x: _c(math.pi / 2) - _asin64(x)),
    "sinh": _in64(lambda x: (exp(x) - exp(_c(0.0) - x)) * _c(0.5)),
    "cosh": _in64(lambda x: (exp(x) + exp(_c(0.0) - x)) * _c(0.5)),
    "asinh": _in64(lambda x: (_c(1.0) - _c(2.0) * cast(F64, x < _c(0.0))) * log(lw_abs(x) + sqrt(x * x + _c(1.0)))),
    "acosh": _in64(lambda x: log(x + sqrt(x * x - _c(1.0)))),
    "atanh": _in64(lambda x: _c(0.5) * log((_c(1.0) + x) / (_c(1.0) - x))),
}
