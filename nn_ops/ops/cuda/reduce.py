"""Reductions on the GPU (sum/mean/max/min, pooling; softmax has its own, in softmax.py).

Many outputs (pooling, reductions over a short axis): one thread per output element,
each running its whole reduction serially; the spatial axes are fused and bound like
an elementwise op.  Few outputs over a long reduction: one block per output, as
softmax.py does: the reduction is ``rfactor``ed into one partial result per thread
(coalesced reads) in shared memory, then combined; every thread of the block combines
the partials and stores the same value (a benign race: one of the equal stores wins),
since the schedule language cannot yet say "thread 0 only".
"""
from __future__ import annotations

from ....dsl.tensor import thread_axis
from ..registry import const_product, register_schedule
from .injective import bind_fused

THREADS = 128
BLOCK_THREADS = 256
LONG_REDUCTION = 2048     # elements per output from which a block per output pays
FEW_OUTPUTS = 4096        # at most this many outputs (blocks) for the block-per-output form


def _block_per_output(s, op) -> None:
    stage = s[op]
    reduce_leaves = [iv for iv in stage.leaf_iter_vars if iv.kind == "reduce"]
    k = stage.fuse(*reduce_leaves) if len(reduce_leaves) > 1 else reduce_leaves[0]
    _, ki = stage.split(k, factor=BLOCK_THREADS)
    partial = s.rfactor(op.outputs[0], ki)
    spatial = list(stage.op.axis)
    row = stage.fuse(*spatial) if len(spatial) > 1 else spatial[0]
    stage.bind(row, thread_axis("blockIdx.x"))
    P = s[partial]
    P.set_scope("shared")
    P.compute_at(stage, row)
    P.bind(P.op.axis[0], thread_axis("threadIdx.x"))


@register_schedule("reduce", "cuda")
@register_schedule("pool", "cuda")
@register_schedule("global_pool", "cuda")
def schedule_reduce(s, op, target) -> None:
    stage = s[op]
    spatial = [iv for iv in stage.leaf_iter_vars if iv.kind != "reduce"]
    if not spatial:
        return   # a full reduction to a scalar has no axis to bind; check_gpu_schedule explains
    length = const_product([iv.extent for iv in op.reduce_axis])
    outputs = const_product([iv.extent for iv in op.axis])
    if op.num_outputs == 1 and length is not None and outputs is not None and length >= LONG_REDUCTION \
            and outputs <= FEW_OUTPUTS:
        _block_per_output(s, op)
        return
    bind_fused(stage, spatial, THREADS)
