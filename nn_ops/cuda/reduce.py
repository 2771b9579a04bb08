"""Reductions on the GPU (sum/mean/max/min, pooling; softmax has its own, in softmax.py).

First version: one thread per output element, each running its whole reduction
serially; the spatial axes are fused and bound like an elementwise op.  That is fast
when there are many outputs (pooling, reductions over a short axis) and slow for a
few long reductions, which want a block per output, as softmax.py does with rfactor.
"""
from __future__ import annotations

from ..registry import register_schedule
from .injective import bind_fused

THREADS = 128


@register_schedule("reduce", "cuda")
@register_schedule("pool", "cuda")
@register_schedule("global_pool", "cuda")
@register_schedule("gemv", "cuda")
def schedule_reduce(s, op, target) -> None:
    stage = s[op]
    spatial = [iv for iv in stage.leaf_iter_vars if iv.kind != "reduce"]
    if not spatial:
        return   # a full reduction to a scalar has no axis to bind; check_gpu_schedule explains
    bind_fused(stage, spatial, THREADS)
