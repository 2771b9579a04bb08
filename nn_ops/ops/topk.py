"""Top-k along one axis (ONNX TopK), by ranking: O(n^2) comparisons per line.

``rank[i]`` counts the elements that come before element ``i`` in the sorted order
(larger first, or smaller first; equal values keep index order, as ONNX specifies); the
``r``-th output is the element whose rank is ``r``.  Two ``"reduce"`` stages, parallel
over the lines; the values are then a gather_elements of the indices.  The axis may be
symbolic (a detector's boxes, more for a larger image), and ``k`` too (``min(boxes, 1000)``); the
caller then checks ``k`` against it at run time.
"""
from __future__ import annotations

from ...dsl.expr import cast
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .elementwise import extents


def topk_indices(X: Tensor, k: int, axis: int = -1, largest: bool = True, name: str = "topk") -> Tensor:
    shape = extents(X)
    nd = len(shape)
    axis = axis % nd
    n = shape[axis]
    if isinstance(k, int) and (k < 1 or (isinstance(n, int) and k > n)):
        raise ExprError(f"top-k with k={k} along an axis of {n}")

    def at(p, i):
        return tuple(i if a == axis else v for a, v in enumerate(p))

    j = reduce_axis((0, n), name="j")

    def rank_body(*p):
        xi, xj = X[p], X[at(p, j)]
        ahead = (xj > xi) if largest else (xj < xi)
        before = ahead | ((xj == xi) & (j < p[axis]))
        return lw_sum(cast("int64", before), axis=j)

    rank = compute(shape, rank_body, name=name + ".rank", tag="reduce")
    out_shape = tuple(k if a == axis else d for a, d in enumerate(shape))
    i = reduce_axis((0, n), name="i")
    return compute(out_shape, lambda *p: lw_sum(i, axis=i, where=rank[at(p, i)] == p[axis]), name=name, tag="reduce")
