"""softmax on the GPU: one block per row, partial reductions in shared memory, one kernel.

For ``Y = exp(X - M) * (1 / S)`` over the last axis, ``M = max(X)`` and ``S = sum(exp(X - M))``
are each factored (``rfactor``) into ``THREADS`` partial results, one per thread, read
coalesced (thread t takes columns t, t + THREADS, ...), kept in shared memory; every
thread then combines the partials itself (a serial pass over shared memory, instead
of a tree reduction, which the schedule language cannot state yet) into per-thread
copies of M and S, and writes its columns of Y.  Barriers come from ``insert_syncs``.
Softmax over another axis, or of a 1-d tensor, falls back to one thread per row.
"""
from __future__ import annotations

from ....dsl.expr import Const
from ....dsl.tensor import thread_axis
from ..registry import register_schedule
from .injective import bind_fused
from .reduce import schedule_reduce

THREADS = 256


def _threads(row_length) -> int:
    if isinstance(row_length, Const):
        t = 32
        while t < THREADS and t < row_length.value:
            t *= 2
        return t
    return THREADS


@register_schedule("softmax", "cuda")
def schedule_softmax(s, op, target) -> None:
    """``op`` is the scaling stage of nn_ops.shape_ops.softmax; its inputs are the exp (E) and sum (S)
    stages, E reads the max (M).  On the GPU E is recomputed where it is read (inlined)."""
    Y = s[op]
    E = next(t for t in op.input_tensors if t.op.name.endswith(".exp"))
    S = next(t for t in op.input_tensors if t is not E)
    M = next(t for t in E.op.input_tensors if getattr(t.op, "tag", "") == "softmax_stat")
    s[E].compute_inline()
    axes = list(Y.op.axis)
    if int(op.attrs.get("axis", len(axes) - 1)) != len(axes) - 1 or len(axes) < 2:
        for red in (M, S):
            schedule_reduce(s, red.op, target)
        bind_fused(Y, list(Y.leaf_iter_vars))
        return
    block_per_row(s, Y, [M, S])


def block_per_row(s, Y, stats) -> None:
    """Rows of ``Y`` (all axes but the last) on blocks, the last axis over the block's threads;
    each row statistic in ``stats`` (reductions over the last axis, computed per row) is
    factored into one partial result per thread in shared memory, and every thread combines
    the partials itself.  Shared by softmax and layer_norm."""
    from ..registry import compute_all_at
    *rows, j = list(Y.op.axis)
    threads = _threads(j.extent)
    row = Y.fuse(*rows) if len(rows) > 1 else rows[0]
    _, ji = Y.split(j, factor=threads)
    Y.bind(row, thread_axis("blockIdx.x"))
    Y.bind(ji, thread_axis("threadIdx.x"))
    partials = []
    for st in stats:             # factor all first: rfactor needs an unscheduled stage
        R = s[st]
        _, ki = R.split(R.op.reduce_axis[0], factor=threads)
        partials.append(s.rfactor(st, ki))
    compute_all_at(s, list(stats) + partials, Y, row)     # readers first (S reads M, var reads mean)
    for partial in partials:
        P = s[partial]
        P.set_scope("shared")
        P.bind(P.op.axis[0], thread_axis("threadIdx.x"))
