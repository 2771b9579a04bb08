"""The per-element parts of ONNX's NegativeLogLikelihoodLoss: pick ``-x[n, target, d...]``
(times the class weight), and the weight each element carries.

Targets equal to ``ignore_index`` contribute 0 and weigh 0.  Other targets are checked
where they index memory (``dsl.expr.checked_index``): one outside ``[0, C)`` makes the call
raise ``ArgumentError`` naming the input and the target (ONNX leaves them undefined).
Both are ``"injective"`` stages; the reductions (sum, mean) are ordinary reduce nodes.
"""
from __future__ import annotations

from typing import Optional

from ...dsl.expr import cast, checked_index, const, select
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import extents


def _target_class(x: Tensor, target: Tensor, idx, classes: int, ignore_index: Optional[int]):
    """The target read at ``idx`` and the class it picks, checked against ``classes`` (an ignored
    target picks class 0, whose value is then not used)."""
    t = cast("int64", target[idx])
    c = t if ignore_index is None else select(t == ignore_index, const(0, "int64"), t)
    return t, checked_index(c, classes, f"axis 1 of '{x.name}' (a class read from '{target.name}')")


def _class_weight(weight: Optional[Tensor], c, dtype: str):
    return const(1.0, dtype) if weight is None else weight[(c,)]


def _check(x: Tensor, target: Tensor):
    """The shapes of ``x`` and ``target`` (sizes may be symbolic: those are taken to fit)."""
    xs, ts = extents(x), extents(target)
    if len(xs) < 2 or len(ts) != len(xs) - 1 or any(
            isinstance(t, int) and isinstance(d, int) and t != d for t, d in zip(ts, xs[:1] + xs[2:])):
        raise ExprError(f"loss input of shape {xs} needs a target of shape {xs[:1] + xs[2:]}, got {ts}")
    if target.dtype not in ("int32", "int64"):
        raise ExprError(f"loss target must be int32 or int64, got {target.dtype}")
    return xs, ts


def nll_terms(x: Tensor, target: Tensor, weight: Optional[Tensor] = None, ignore_index: Optional[int] = None,
              name: str = "nll") -> Tensor:
    """``-x[n, t, d...] * weight[t]`` per (n, d...), 0 where ``t == ignore_index``."""
    xs, ts = _check(x, target)

    def body(*idx):
        t, c = _target_class(x, target, idx, xs[1], ignore_index)
        value = (const(0.0, x.dtype) - x[(idx[0], c) + tuple(idx[1:])]) * _class_weight(weight, c, x.dtype)
        return value if ignore_index is None else select(t == ignore_index, const(0.0, x.dtype), value)

    return compute(ts, body, name=name, tag="injective")


def nll_weights(x: Tensor, target: Tensor, weight: Optional[Tensor] = None, ignore_index: Optional[int] = None,
                name: str = "nll_weight") -> Tensor:
    """The weight of each (n, d...): ``weight[t]`` (or 1), 0 where ``t == ignore_index``."""
    xs, ts = _check(x, target)

    def body(*idx):
        t, c = _target_class(x, target, idx, xs[1], ignore_index)
        if weight is None:      # (arithmetic, not a select of two constants: see math_ops)
            return const(1.0, x.dtype) if ignore_index is None else cast(x.dtype, t != ignore_index)
        w = weight[(c,)]
        return w if ignore_index is None else select(t == ignore_index, const(0.0, x.dtype), w)

    return compute(ts, body, name=name, tag="injective")
