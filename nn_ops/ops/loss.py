"""The per-element parts of ONNX's NegativeLogLikelihoodLoss: pick ``-x[n, target, d...]``
(times the class weight), and the weight each element carries.

Targets equal to ``ignore_index`` contribute 0 and weigh 0.  Other targets are clamped
into ``[0, C)`` before they index memory (ONNX leaves out-of-range targets undefined).
Both are ``"injective"`` stages; the reductions (sum, mean) are ordinary reduce nodes.
"""
from __future__ import annotations

from typing import Optional

from ...dsl.expr import cast, const, select
from ...dsl.intrinsics import elementwise_max, elementwise_min
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import static_shape


def _target_class(target: Tensor, idx, classes: int):
    t = cast("int64", target[idx])
    return t, elementwise_min(elementwise_max(t, const(0, "int64")), const(classes - 1, "int64"))


def _class_weight(weight: Optional[Tensor], c, dtype: str):
    return const(1.0, dtype) if weight is None else weight[(c,)]


def _check(x: Tensor, target: Tensor):
    xs, ts = static_shape(x), static_shape(target)
    if len(xs) < 2 or ts != xs[:1] + xs[2:]:
        raise ExprError(f"loss input of shape {xs} needs a target of shape {xs[:1] + xs[2:]}, got {ts}")
    if target.dtype not in ("int32", "int64"):
        raise ExprError(f"loss target must be int32 or int64, got {target.dtype}")
    return xs, ts


def nll_terms(x: Tensor, target: Tensor, weight: Optional[Tensor] = None, ignore_index: Optional[int] = None,
              name: str = "nll") -> Tensor:
    """``-x[n, t, d...] * weight[t]`` per (n, d...), 0 where ``t == ignore_index``."""
    xs, ts = _check(x, target)

    def body(*idx):
        t, c = _target_class(target, idx, xs[1])
        value = (const(0.0, x.dtype) - x[(idx[0], c) + tuple(idx[1:])]) * _class_weight(weight, c, x.dtype)
        return value if ignore_index is None else select(t == ignore_index, const(0.0, x.dtype), value)

    return compute(ts, body, name=name, tag="injective")


def nll_weights(x: Tensor, target: Tensor, weight: Optional[Tensor] = None, ignore_index: Optional[int] = None,
                name: str = "nll_weight") -> Tensor:
    """The weight of each (n, d...): ``weight[t]`` (or 1), 0 where ``t == ignore_index``."""
    xs, ts = _check(x, target)

    def body(*idx):
        t, c = _target_class(target, idx, xs[1])
        if weight is None:      # (arithmetic, not a select of two constants: see math_ops)
            return const(1.0, x.dtype) if ignore_index is None else cast(x.dtype, t != ignore_index)
        w = weight[(c,)]
        return w if ignore_index is None else select(t == ignore_index, const(0.0, x.dtype), w)

    return compute(ts, body, name=name, tag="injective")
