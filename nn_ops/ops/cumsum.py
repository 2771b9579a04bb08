"""Cumulative sum or product along one axis (ONNX CumSum / CumProd, with ``exclusive`` and ``reverse``).

Each output element is a sum over the axis restricted to the positions before it (or
after, reversed): one ``"reduce"`` stage, parallel over the output elements.  It costs
O(n^2) additions per line of length n, which is what a data-parallel kernel pays for a
scan; fine for the short axes (positions, sequence masks) networks scan over.
"""
from __future__ import annotations

from ...dsl.reduction import prod as lw_prod, sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .elementwise import extents


def cumsum(X: Tensor, axis: int, exclusive: bool = False, reverse: bool = False, name: str = "cumsum",
           kind: str = "sum") -> Tensor:
    """Cumulative ``kind`` ("sum" or "prod") along ``axis``."""
    shape = extents(X)          # symbolic extents allowed (shape-polymorphic kernels)
    nd = len(shape)
    axis = axis + nd if axis < 0 else axis
    if not 0 <= axis < nd:
        raise ExprError(f"cumsum axis {axis} out of range for rank {nd}")
    k = reduce_axis((0, shape[axis]), name="k")
    reducer = {"sum": lw_sum, "prod": lw_prod}[kind]

    def body(*idx):
        i = idx[axis]
        if reverse:
            keep = (k > i) if exclusive else (k >= i)
        else:
            keep = (k < i) if exclusive else (k <= i)
        index = list(idx)
        index[axis] = k
        return reducer(X[tuple(index)], axis=k, where=keep)

    return compute(shape, body, name=name, tag="reduce")
