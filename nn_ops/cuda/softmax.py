"""softmax on the GPU: one block per row, partial reductions in shared memory, one kernel.

For ``Y = exp(X - M) / S`` over the last axis, ``M = max(X)`` and ``S = sum(exp(X - M))``
are each factored (``rfactor``) into ``THREADS`` partial results, one per thread, read
coalesced (thread t takes columns t, t + THREADS, ...), kept in shared memory; every
thread then combines the partials itself (a serial pass over shared memory, instead
of a tree reduction, which the schedule language cannot state yet) into per-thread
copies of M and S, and writes its columns of Y.  Barriers come from ``insert_syncs``.
Softmax over another axis, or of a 1-d tensor, falls back to one thread per row.
"""
from __future__ import annotations

from ...dsl.expr import Const
from ...dsl.tensor import ComputeOp, thread_axis
from ..registry import register_schedule
from .reduce import schedule_reduce

THREADS = 256


def _softmax_parts(s, op):
    """(Y, M, S) when ``op`` is the max of a last-axis softmax whose output is the schedule's only output."""
    if len(s.outputs) != 1:
        return None
    y = s.outputs[0]
    if not isinstance(y, ComputeOp) or y.tag != "elemwise" or len(y.axis) < 2:
        return None
    reductions = [t.op for t in y.input_tensors if getattr(t.op, "tag", "") == "softmax_reduce"]
    if len(reductions) != 2 or reductions[0] is not op and reductions[1] is not op:
        return None
    m, s_ = (reductions[0], reductions[1]) if op.name.endswith(".max") else (reductions[1], reductions[0])
    if not (m.name.endswith(".max") and s_.name.endswith(".sum")):
        return None
    if [str(d) for d in y.outputs[0].shape[:-1]] != [str(d) for d in m.outputs[0].shape]:
        return None   # not over the last axis
    return y, m, s_


def _threads(row_length) -> int:
    if isinstance(row_length, Const):
        t = 32
        while t < THREADS and t < row_length.value:
            t *= 2
        return t
    return THREADS


@register_schedule("softmax_reduce", "cuda")
def schedule_softmax_reduce(s, op, target) -> None:
    stage = s[op]
    if stage.attach_type != "root" or getattr(stage, "softmax_done", False):
        return   # already placed by the schedule of the softmax it belongs to
    parts = _softmax_parts(s, op)
    if parts is None:
        schedule_reduce(s, op, target)
        return
    y, m, sm = parts
    Y = s[y]
    *rows, j = Y.op.axis
    threads = _threads(j.extent)
    row = Y.fuse(*rows) if len(rows) > 1 else rows[0]
    jo, ji = Y.split(j, factor=threads)
    Y.bind(row, thread_axis("blockIdx.x"))
    Y.bind(ji, thread_axis("threadIdx.x"))
    Y.fused_anchor = op          # the elementwise output is scheduled here, not by the injective schedule
    partials = {}
    for red in (m, sm):          # factor both first: rfactor needs an unscheduled stage
        R = s[red]
        ko, ki = R.split(R.op.reduce_axis[0], factor=threads)
        partials[red] = s.rfactor(red.outputs[0], ki)
    for red in (sm, m):          # consumers first: S reads M
        R = s[red]
        R.compute_at(Y, row)     # per thread ("local"): each thread combines the partials itself
        R.softmax_done = True
        P = s[partials[red]]
        P.set_scope("shared")
        P.compute_at(Y, row)
        P.bind(P.op.axis[0], thread_axis("threadIdx.x"))
