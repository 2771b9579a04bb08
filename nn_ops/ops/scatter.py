"""Scatters (ONNX ScatterElements, ScatterND) as gathers seen from the output side.

Each output position asks which updates land on it: a reduction over the index positions
``k`` where ``indices`` point at it.  With ``reduction="none"`` the last such ``k`` wins (as
ONNX's reference applies updates in order), found as a max-reduction over the flattened
``k``; with add/mul/max/min the matching updates are reduced and combined with the data.
One ``"reduce"`` stage (parallel over the output) and one injective stage.  It costs
O(output x updates) comparisons, which suits the small index sets networks scatter
(cache updates, masks).  Each index is checked where it is read (``dsl.expr.checked_index``):
a negative one counts from the end, one outside ``[-n, n)`` makes the call raise
``ArgumentError`` naming the tensor, the axis and the index (as onnxruntime does).  Sizes may
be symbolic (a shape-polymorphic kernel's) but the last of ScatterND's indices (a coordinate's
depth).
"""
from __future__ import annotations

import math
from typing import Callable, List, Sequence

from ...dsl.expr import checked_index, const, select
from ...dsl.intrinsics import elementwise_max, elementwise_min
from ...dsl.reduction import max as lw_max, min as lw_min, prod as lw_prod, sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .elementwise import extents

_REDUCERS = {"add": lw_sum, "mul": lw_prod, "max": lw_max, "min": lw_min}
_COMBINE = {"add": lambda a, b: a + b, "mul": lambda a, b: a * b, "max": elementwise_max, "min": elementwise_min}


def _normalized(v, n: int, axis: int, data: Tensor, indices: Tensor):
    """``v`` read from ``indices``, checked as an index into ``axis`` of ``data`` (size ``n``)."""
    return checked_index(v, n, f"axis {axis} of '{data.name}' (an index read from '{indices.name}')", wrap=True)


def _scatter(data: Tensor, steps: Sequence, match: Callable, update: Callable, reduction: str,
             name: str) -> Tensor:
    """``steps``: the extents of the index positions ``k``."""
    shape = extents(data)
    if reduction not in ("none",) + tuple(_REDUCERS):
        raise ExprError(f"scatter reduction {reduction!r}")
    if reduction != "none":
        ks = [reduce_axis((0, n), name=f"k{j}") for j, n in enumerate(steps)]
        acc = compute(shape, lambda *p: _REDUCERS[reduction](update(p, ks), axis=ks, where=match(p, ks)),
                      name=name + ".acc", tag="reduce")
        return compute(shape, lambda *p: _COMBINE[reduction](data[p], acc[p]), name=name, tag="injective")
    strides = [math.prod(steps[j + 1:]) for j in range(len(steps))]
    ks = [reduce_axis((0, n), name=f"k{j}") for j, n in enumerate(steps)]
    flat = sum((k * s for k, s in zip(ks[1:], strides[1:])), ks[0] * strides[0])
    which = compute(shape, lambda *p: lw_max(select(match(p, ks), flat, const(-1, "int64")), axis=ks),
                    name=name + ".which", tag="reduce")

    def body(*p):
        w = elementwise_max(which[p], const(0, "int64"))
        chosen: List = [(w // s) % n if j else w // s for j, (s, n) in enumerate(zip(strides, steps))]
        return select(which[p] >= const(0, "int64"), update(p, chosen), data[p])

    return compute(shape, body, name=name, tag="injective")


def _same_size(a, b) -> bool:
    """Whether extents ``a`` and ``b`` are known equal: equal ints, or one expression."""
    return a == b if isinstance(a, int) and isinstance(b, int) else str(a) == str(b)


def _differ(a, b) -> bool:
    """Whether extents ``a`` and ``b`` are ints that differ (symbolic ones are taken to fit)."""
    return isinstance(a, int) and isinstance(b, int) and a != b


def scatter_elements(data: Tensor, indices: Tensor, updates: Tensor, axis: int = 0, reduction: str = "none",
                     name: str = "scatter_elements") -> Tensor:
    shape, ishape, ushape = extents(data), extents(indices), extents(updates)
    nd = len(shape)
    axis = axis % nd
    longer = any(isinstance(i, int) and isinstance(d, int) and i > d
                 for a, (i, d) in enumerate(zip(ishape, shape)) if a != axis)
    if len(ishape) != nd or len(ushape) != nd or any(_differ(u, i) for u, i in zip(ushape, ishape)) or longer:
        raise ExprError(f"scatter_elements: indices {ishape} / updates {ushape} do not fit data {shape}")
    # the axes where the indices may be shorter than the data: their positions past them take no update
    others = [a for a in range(nd) if a != axis and not _same_size(ishape[a], shape[a])]

    def at(p, k):     # the index/update position for output p and index step k (clamped in range)
        return tuple(k if a == axis else (elementwise_min(p[a], ishape[a] - 1) if a in others else p[a])
                     for a in range(nd))

    def match(p, ks):
        ok = _normalized(indices[at(p, ks[0])], shape[axis], axis, data, indices) == p[axis]
        for a in others:
            ok = ok & (p[a] < ishape[a])
        return ok

    return _scatter(data, [ishape[axis]], match, lambda p, ks: updates[at(p, ks[0])], reduction, name)


def scatter_nd(data: Tensor, indices: Tensor, updates: Tensor, reduction: str = "none",
               name: str = "scatter_nd") -> Tensor:
    shape, ishape, ushape = extents(data), extents(indices), extents(updates)
    m, lead = ishape[-1], ishape[:-1]
    if not isinstance(m, int):
        raise ExprError(f"scatter_nd: indices of shape {ishape}, whose last size (the depth of a coordinate) is "
                        f"symbolic")
    if len(ushape) != len(lead + shape[m:]) or any(_differ(u, e) for u, e in zip(ushape, lead + shape[m:])):
        raise ExprError(f"scatter_nd: updates of shape {ushape}, expected {lead + shape[m:]}")

    def match(p, ks):
        ok = None
        for j in range(m):
            hit = _normalized(indices[tuple(ks) + (j,)], shape[j], j, data, indices) == p[j]
            ok = hit if ok is None else ok & hit
        return ok

    return _scatter(data, list(lead), match, lambda p, ks: updates[tuple(ks) + tuple(p[m:])], reduction, name)
