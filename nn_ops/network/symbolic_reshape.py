"""A reshape between shapes of sympy sizes, inside a kernel over size vars.

Its axes are matched in runs of equal products (as ``ops.shape.reshape`` matches static ones) and
read through them by ``ops.shape.index_through_runs``: a run that merges or splits axes takes its
index apart by the sizes of all but its first axes, so those must be constants: an attention head merge ``[batch, 4, seq, 64] -> [4*batch, seq, 64]`` reads
``[h // 4, h % 4, s, d]``.  A division by a run-time size (``[batch*seq, 256] -> [batch, seq, ...]``)
would cost an integer division per element and an index bound inference cannot follow: no runs.
"""
from __future__ import annotations

from typing import Callable, List, Optional, Sequence, Tuple

import sympy

from ...dsl.expr import const
from ...dsl.tensor import Tensor, compute
from ..ops.shape import index_through_runs
from . import symbolic as S

Runs = List[Tuple[List[int], List[int]]]


def reshape_runs(src: Sequence, dst: Sequence) -> Optional[Runs]:
    """``(dst axes, src axes)`` of each run (unit axes left out), or None when the sizes do not pair
    up into runs or a run's inner sizes are not constants."""
    src, dst = [S.dim(d) for d in src], [S.dim(d) for d in dst]
    outs = [a for a, d in enumerate(dst) if d != 1]
    ins = [a for a, d in enumerate(src) if d != 1]
    runs, o, i = [], 0, 0
    while o < len(outs) and i < len(ins):
        run_out, run_in = [outs[o]], [ins[i]]
        po, pi = dst[outs[o]], src[ins[i]]
        o, i = o + 1, i + 1
        while S.equal(po, pi) is not True:
            if _divides(po, pi) and o < len(outs):
                run_out.append(outs[o])
                po, o = po * dst[outs[o]], o + 1
            elif _divides(pi, po) and i < len(ins):
                run_in.append(ins[i])
                pi, i = pi * src[ins[i]], i + 1
            else:
                return None
        if not all(S.is_static(dst[a]) for a in run_out[1:]) or not all(S.is_static(src[a]) for a in run_in[1:]):
            return None
        runs.append((run_out, run_in))
    return runs if o == len(outs) and i == len(ins) else None


def _divides(a, b) -> bool:
    """Whether ``a`` divides ``b`` (sizes that are products of symbols), and is not equal to it."""
    quotient = sympy.cancel(b / a)
    num, den = sympy.fraction(quotient)
    return den == 1 and quotient != 1


def reshape_over_sizes(x: Tensor, src: Sequence, dst: Sequence, extent: Callable, name: str = "reshape") -> Tensor:
    """``x`` (of sympy shape ``src``) read with shape ``dst``; ``extent`` maps a sympy size to the
    kernel's DSL extent.  The caller checked ``reshape_runs(src, dst)``."""
    runs = reshape_runs(src, dst)
    src_static = [S.as_int(d) for d in src]
    dst_static = [S.as_int(d) for d in dst]

    def fcompute(*idx):
        return x[index_through_runs(idx, runs, src_static, dst_static, const(0, "int64"))]

    return compute(tuple(extent(d) for d in dst), fcompute, name=name, tag="injective")

