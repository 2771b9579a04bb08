"""argmax / argmin along one axis, and hardmax (one-hot of the argmax).

The (index, value) tuple reduction is one ``"reduce"`` stage (parallel over the output
elements); a copy stage reads its index part, because a kernel's output is one tensor.
Ties go to the first index, or to the last with ``select_last``: the reduction then runs
over negated indices, whose smallest is the last position.
"""
from __future__ import annotations

from ...dsl.expr import cast, const
from ...dsl.reduction import argmax as lw_argmax, argmin as lw_argmin
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .elementwise import extents


def arg_reduce(X: Tensor, axis: int, kind: str = "max", keepdims: bool = True, select_last: bool = False,
               name: str = "argmax") -> Tensor:
    """int64 positions of the largest (``kind="max"``) or smallest value along ``axis`` (sizes may be
    symbolic)."""
    src = extents(X)
    nd = len(src)
    axis = axis + nd if axis < 0 else axis
    if not 0 <= axis < nd:
        raise ExprError(f"arg{kind} axis {axis} out of range for rank {nd}")
    reducer = {"max": lw_argmax, "min": lw_argmin}[kind]
    shape = tuple(1 if a == axis else d for a, d in enumerate(src) if keepdims or a != axis)
    k = reduce_axis((0, src[axis]), name="k")

    def body(*idx):
        index = list(idx)
        if keepdims:
            index[axis] = k
        else:
            index.insert(axis, k)
        position = (const(0, "int64") - k) if select_last else k
        return reducer((position, X[tuple(index)]), axis=k)

    pair = compute(shape, body, name=name + ".pair", tag="reduce")
    if select_last:
        return compute(shape, lambda *idx: const(0, "int64") - pair[0][idx], name=name, tag="injective")
    return compute(shape, lambda *idx: pair[0][idx], name=name, tag="injective")


def hardmax(X: Tensor, axis: int = -1, name: str = "hardmax") -> Tensor:
    """1 at the first largest value along ``axis``, 0 elsewhere."""
    shape = extents(X)
    nd = len(shape)
    axis = axis + nd if axis < 0 else axis
    best = arg_reduce(X, axis, "max", keepdims=True, name=name + ".argmax")

    def body(*idx):
        at = tuple(0 if a == axis else i for a, i in enumerate(idx))
        return cast(X.dtype, idx[axis] == best[at])

    return compute(shape, body, name=name, tag="injective")
