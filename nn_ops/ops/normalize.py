"""Normalizations by whole-tensor reductions over any axes (ONNX LpNormalization,
MeanVarianceNormalization, RMSNormalization), and log-sum-exp.

Each is ``shape.reduce`` stages (``"reduce"``: a parallel loop of their own) and one
elementwise stage reading them, with the static path's arithmetic (``converters/normalization.py``
and ``converters/math.py`` build the same expressions as graphs), so a shape-polymorphic kernel
gives the values a static compile gives.  Sizes may be symbolic: a mean divides by the count
computed per call.
"""
from __future__ import annotations

from typing import Optional, Sequence

from ...dsl.expr import const
from ...dsl.intrinsics import abs as lw_abs, exp, log, sqrt
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import extents
from . import math as math_ops
from .norm import _inner_read
from .shape import reduce


def _axes(shape, axes: Optional[Sequence[int]]) -> list:
    nd = len(shape)
    return sorted({a % nd for a in axes}) if axes else list(range(nd))


def _at(idx, axes) -> tuple:
    """``idx`` in a reduction over ``axes`` kept as size-1 axes."""
    return tuple(0 if a in axes else i for a, i in enumerate(idx))


def _squared(X: Tensor, name: str) -> Tensor:
    return compute(X.shape, lambda *i: X[i] * X[i], name=name, tag="elemwise")


def lp_normalize(X: Tensor, axis: int = -1, p: int = 2, name: str = "lp_normalize") -> Tensor:
    """``x / ||x||_p`` along ``axis`` (p 1 or 2); a zero norm gives 0, not NaN."""
    if p not in (1, 2):
        raise ExprError(f"lp_normalize: p={p} (1 or 2)")
    axes = _axes(extents(X), [axis])
    source = compute(X.shape, lambda *i: lw_abs(X[i]), name=name + ".abs", tag="elemwise") if p == 1 \
        else _squared(X, name + ".square")
    total = reduce(source, axes, "sum", keepdims=True, name=name + ".sum")
    divide = math_ops.BINARY["div_or_zero"]        # a zero norm gives 0, as the static path's

    def body(*idx):
        norm = total[_at(idx, axes)] if p == 1 else sqrt(total[_at(idx, axes)])
        return divide(X[idx], norm)
    return compute(X.shape, body, name=name, tag="elemwise")


def mean_variance_normalize(X: Tensor, axes: Sequence[int] = (0, 2, 3), name: str = "mvn") -> Tensor:
    """``(x - mean) / (sqrt(mean(x^2) - mean^2) + 1e-9)`` over ``axes`` (ONNX's definition)."""
    axes = _axes(extents(X), axes)
    mean = reduce(X, axes, "mean", keepdims=True, name=name + ".mean")
    mean_square = reduce(_squared(X, name + ".square"), axes, "mean", keepdims=True, name=name + ".ex2")

    def body(*idx):
        mu = mean[_at(idx, axes)]
        return (X[idx] - mu) / (sqrt(mean_square[_at(idx, axes)] - mu * mu) + const(1e-9, X.dtype))
    return compute(X.shape, body, name=name, tag="elemwise")


def rms_normalize(X: Tensor, scale: Tensor, axis: int = -1, epsilon: float = 1e-5, name: str = "rms_norm") -> Tensor:
    """``x / sqrt(mean(x^2 over the axes from axis on) + epsilon) * scale`` (ONNX RMSNormalization);
    ``scale`` broadcasts over the normalised axes."""
    shape = extents(X)
    first = axis % len(shape)
    axes = list(range(first, len(shape)))
    mean_square = reduce(_squared(X, name + ".square"), axes, "mean", keepdims=True, name=name + ".ms")
    eps = const(epsilon, X.dtype)
    return compute(X.shape, lambda *idx: X[idx] / sqrt(mean_square[_at(idx, axes)] + eps)
                   * _inner_read(scale, idx[first:], len(axes)), name=name, tag="elemwise")


def log_sum_exp(X: Tensor, axes: Optional[Sequence[int]], keepdims: bool = True, name: str = "log_sum_exp") -> Tensor:
    """``m + log(sum(exp(x - m)))`` over ``axes`` with ``m`` the maximum: no overflow for large x."""
    shape = extents(X)
    axes = _axes(shape, axes)
    top = reduce(X, axes, "max", keepdims=True, name=name + ".max")
    shifted = compute(X.shape, lambda *i: exp(X[i] - top[_at(i, axes)]), name=name + ".exp", tag="elemwise")
    total = reduce(shifted, axes, "sum", keepdims=True, name=name + ".sum")
    if keepdims:
        return compute(total.shape, lambda *i: log(total[i]) + top[i], name=name, tag="elemwise")
    kept = [d for a, d in enumerate(total.shape) if a not in axes]

    def body(*idx):
        it = iter(idx)
        full = tuple(0 if a in axes else next(it) for a in range(len(shape)))
        return log(total[full]) + top[full]
    return compute(tuple(kept), body, name=name, tag="elemwise")
