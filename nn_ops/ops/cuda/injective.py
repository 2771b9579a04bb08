"""Elementwise, broadcast and layout ops on the GPU: one thread per output element.

All axes are fused into one, split into blocks of ``THREADS`` threads (blockIdx.x,
threadIdx.x); when the innermost extent allows, each thread handles ``LANES``
consecutive elements as one vector access (float4) instead.
"""
from __future__ import annotations

from ....dsl.expr import Const
from ..registry import register_schedule

THREADS = 256
LANES = 4


def bind_fused(stage, axes, threads: int = THREADS):
    """Fuse ``axes`` (outer first), split by ``threads``, bind blockIdx.x / threadIdx.x; (block axis, thread axis)."""
    from ....dsl.tensor import thread_axis
    fused = stage.fuse(*axes) if len(axes) > 1 else axes[0]
    bx, tx = stage.split(fused, factor=threads)
    stage.bind(bx, thread_axis("blockIdx.x"))
    stage.bind(tx, thread_axis("threadIdx.x"))
    return bx, tx


@register_schedule("elemwise", "cuda")
@register_schedule("broadcast", "cuda")
@register_schedule("injective", "cuda")
@register_schedule("patches", "cuda")
def schedule_injective(s, op, target) -> None:
    stage = s[op]
    if getattr(stage, "fused_anchor", None) is not None:
        return   # a fused epilogue: the anchor op's schedule tiles this stage
    axes = list(stage.leaf_iter_vars)
    if not axes:
        return
    inner = axes[-1]
    if isinstance(inner.extent, Const) and inner.extent.value % LANES == 0 and inner.extent.value >= LANES:
        outer, lanes = stage.split(inner, factor=LANES)
        stage.vectorize(lanes)
        bind_fused(stage, axes[:-1] + [outer])
    else:
        bind_fused(stage, axes)
