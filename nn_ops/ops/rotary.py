"""Rotary position embedding (ONNX RotaryEmbedding), computed in the input's own layout.

Each output element of the rotated part mixes two input elements of its head with the
cos/sin of its position: ``(c*x1 - s*x2, s*x1 + c*x2)`` on the two halves (or on even/odd
pairs, ``interleaved``); elements past ``rotary_dim`` are copied.  The caches are indexed
by position ids read at run time (checked: one outside the cache raises ArgumentError) or,
without them, by (batch, sequence).  One injective stage, no transposes.
"""
from __future__ import annotations

from typing import Optional

from ...dsl.expr import cast, checked_index, select
from ...dsl.intrinsics import elementwise_max, elementwise_min
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import extents


def rotary_embedding(x: Tensor, cos: Tensor, sin: Tensor, position_ids: Optional[Tensor] = None,
                     interleaved: bool = False, rotary_dim: int = 0, num_heads: int = 0,
                     name: str = "rotary") -> Tensor:
    shape = extents(x)          # symbolic batch and sequence allowed (shape-polymorphic kernels)
    if len(shape) == 4 and isinstance(shape[3], int):
        head = shape[3]
    elif len(shape) == 3 and num_heads and isinstance(shape[2], int) and shape[2] % num_heads == 0:
        head = shape[2] // num_heads
    else:
        raise ExprError(f"rotary embedding of an input of shape {shape} (num_heads={num_heads})")
    rdim = rotary_dim or head
    half = rdim // 2
    cshape = extents(cos)
    same_caches = [str(d) for d in sin.shape] == [str(d) for d in cos.shape]
    if cshape[-1] != half or not same_caches or rdim > head or rdim % 2:
        raise ExprError(f"rotary caches of shape {cshape} for rotary_dim {rdim}")

    def body(*p):
        if len(shape) == 4:
            b, s, d = p[0], p[2], p[3]
            at = lambda dd: (p[0], p[1], p[2], dd)       # noqa: E731
        else:
            b, s, d = p[0], p[1], p[2] % head
            at = lambda dd: (p[0], p[1], p[2] - d + dd)  # noqa: E731
        if interleaved:
            j, first = d // 2, d % 2 == 0
            partner = select(first, d + 1, d - 1)
        else:
            first = d < half
            j = select(first, d, d - half)
            partner = select(first, d + half, d - half)
        j = elementwise_min(elementwise_max(j, 0), half - 1)
        partner = elementwise_min(elementwise_max(partner, 0), head - 1)
        if position_ids is None:
            row = (b, s)
        else:
            pos = cast("int64", position_ids[(b, s)])
            row = (checked_index(pos, cshape[0], f"axis 0 of '{cos.name}' (a position read from "
                                                 f"'{position_ids.name}')"),)
        c, sn = cos[row + (j,)], sin[row + (j,)]
        own, other = x[at(d)], x[at(partner)]
        rotated = select(first, c * own - sn * other, sn * other + c * own)
        return select(d < rdim, rotated, own)

    return compute(shape, body, name=name, tag="injective")
