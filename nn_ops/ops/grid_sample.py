"""GridSample (ONNX): sample X at the normalized coordinates a grid holds, read at run time.

Per spatial axis, the grid value ``g`` in [-1, 1] becomes a pixel coordinate (with or
without ``align_corners``), is rounded (nearest), moved inside by the padding mode when
it falls outside (border: clamped; reflection: mirrored), and then read through 1
(nearest), 2 (linear) or 4 (cubic, Keys with a = -0.75) taps, each tap again resolved by
the padding mode (zeros: 0 outside).  The output sums the taps' products of weights, as
the ONNX reference does axis by axis.  Coordinates are float32 as in the reference, the
arithmetic after them float64; every tap index is clamped before it reads memory.  One
injective stage; per-axis quantities are bound once with ``Let``.  Every size may be symbolic
(a shape-polymorphic kernel's).
"""
from __future__ import annotations

import itertools
import math

from ...dsl.expr import Let, Var, as_expr, cast, const, select
from ...dsl.intrinsics import elementwise_max, elementwise_min, floor, round as lw_round
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import extents

F64, I64 = "float64", "int64"


def _c(v):
    """A float64 of ``v``: a number, or a size (an int expression, symbolic)."""
    return const(float(v), F64) if isinstance(v, (int, float)) else cast(F64, v)


def _bind(values, body, name):
    """``body(vars)`` with each value bound once (nested lets)."""
    names = [Var(f"{name}{k}", v.dtype) for k, v in enumerate(values)]
    expr = body(names)
    for var, value in reversed(list(zip(names, values))):
        expr = Let(var, value, expr)
    return expr


def _reflect(x, lo: float, hi: float):
    """Mirror ``x`` at the borders until it lies in [lo, hi] (the reference's _gs_reflect); ``hi``
    may be a float64 expression (of a symbolic size), and [lo, hi] then empty at some sizes."""
    if isinstance(hi, float) and hi - lo <= 0:
        return _c(lo)
    span = _c(hi) - _c(lo)
    below, above = _c(lo) - x, x - _c(hi)
    d = elementwise_max(elementwise_max(below, above), _c(0.0))
    n = floor(d / span)
    r = d - n * span
    odd = (n - _c(2.0) * floor(n * _c(0.5))) > _c(0.5)
    from_low = select(odd, _c(hi) - r, _c(lo) + r)       # reflected off the lower border
    from_high = select(odd, _c(lo) + r, _c(hi) - r)
    mirrored = select(below > _c(0.0), from_low, select(above > _c(0.0), from_high, x))
    return mirrored if isinstance(hi, float) else select(span > _c(0.0), mirrored, _c(lo))


def _cubic_weights(t):
    a = -0.75
    def k(x):       # x = |distance|
        return select(x <= _c(1.0), (_c(a + 2) * x - _c(a + 3)) * x * x + _c(1.0),
                      ((_c(a) * x - _c(5 * a)) * x + _c(8 * a)) * x - _c(4 * a))
    return [k(t + _c(1.0)), k(t), k(_c(1.0) - t), k(_c(2.0) - t)]


def grid_sample(X: Tensor, grid: Tensor, mode: str = "linear", padding_mode: str = "zeros",
                align_corners: bool = False, name: str = "grid_sample") -> Tensor:
    xs, gs = extents(X), extents(grid)
    k = len(xs) - 2
    if len(gs) != k + 2 or (isinstance(gs[0], int) and isinstance(xs[0], int) and gs[0] != xs[0]) \
            or not isinstance(gs[-1], int) or gs[-1] != k:
        raise ExprError(f"grid_sample: grid of shape {gs} for input of shape {xs}")
    if mode not in ("nearest", "linear", "cubic") or padding_mode not in ("zeros", "border", "reflection"):
        raise ExprError(f"grid_sample mode {mode!r} / padding_mode {padding_mode!r}")
    dims = xs[2:]
    lows = [0.0 if align_corners else -0.5 for _ in dims]
    highs = [(d - 1.0 if align_corners else d - 0.5) if isinstance(d, int) else
             _c(d) - _c(1.0 if align_corners else 0.5) for d in dims]
    shape = xs[:2] + gs[1:-1]

    def coordinate(g, axis):
        d = dims[axis]
        half = _c((d - 1) / 2.0) if isinstance(d, int) else (_c(d) - _c(1.0)) * _c(0.5)
        x = (g + _c(1.0)) * half if align_corners else ((g + _c(1.0)) * _c(d) - _c(1.0)) * _c(0.5)
        x = cast(F64, cast("float32", x))              # the reference keeps coordinates in float32
        if mode == "nearest":
            x = lw_round(x)
        outside = (x < _c(lows[axis])) | (x > _c(highs[axis]))
        if padding_mode == "border":
            x = select(outside, elementwise_min(elementwise_max(x, _c(0.0)), _c(d) - _c(1.0)), x)
        elif padding_mode == "reflection":
            x = _reflect(x, lows[axis], highs[axis])
        return x

    def tap(i, axis):
        """(valid, index) of integer tap ``i`` along ``axis`` under the padding mode."""
        d = dims[axis]
        if padding_mode == "reflection":
            i = cast(I64, _reflect(cast(F64, i), lows[axis], highs[axis]))
        d = as_expr(d, I64)
        valid = (i >= const(0, I64)) & (i < d)
        return valid, elementwise_min(elementwise_max(i, const(0, I64)), d - const(1, I64))

    def body(*o):
        n, c, out = o[0], o[1], tuple(o[2:])
        coords = [coordinate(cast(F64, grid[(n,) + out + (k - 1 - axis,)]), axis) for axis in range(k)]

        def with_coords(xv):
            if mode == "nearest":
                taps = [[(cast(I64, x), None)] for x in xv]
            else:
                taps = []
                for x in xv:
                    x0 = floor(x)
                    t = x - x0
                    base = cast(I64, x0)
                    if mode == "linear":
                        taps.append([(base, _c(1.0) - t), (base + const(1, I64), t)])
                    else:
                        taps.append([(base + const(j - 1, I64), w) for j, w in enumerate(_cubic_weights(t))])
            total = None
            for combo in itertools.product(*taps):
                valid, index, weight = None, [], None
                for axis, (i, w) in enumerate(combo):
                    ok, idx = tap(i, axis)
                    valid = ok if valid is None else valid & ok
                    index.append(idx)
                    weight = w if weight is None else (weight if w is None else weight * w)
                value = cast(F64, X[(n, c) + tuple(index)])
                if padding_mode == "zeros":
                    value = select(valid, value, _c(0.0))
                term = value if weight is None else value * weight
                total = term if total is None else total + term
            return cast(X.dtype, total)

        return _bind(coords, with_coords, "gx")

    if all(isinstance(d, int) for d in shape) and math.prod(shape) == 0:
        raise ExprError("grid_sample with an empty result")
    return compute(shape, body, name=name, tag="injective")
