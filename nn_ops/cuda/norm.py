"""layer_norm on the GPU: one block per row, as softmax (softmax.py): the mean and variance are
factored into one partial result per thread in shared memory, every thread combines them and
writes its columns of the row.  Normalising over several trailing axes falls back to a thread
per row for the statistics and a thread per element for the output."""
from __future__ import annotations

from ...dsl.tensor import thread_axis
from ..norm import _stat_ops
from ..registry import compute_all_at, register_schedule
from .injective import bind_fused
from .reduce import schedule_reduce
from .softmax import _threads


@register_schedule("layer_norm", "cuda")
def schedule_layer_norm(s, op, target) -> None:
    Y = s[op]
    stats = _stat_ops(op)                                   # mean, var (or just what op reads)
    n_rows = int(op.attrs.get("row_axes", 0))
    axes = list(Y.op.axis)
    if n_rows == 0 or len(axes) - n_rows != 1:
        for st in stats:
            schedule_reduce(s, st.op, target)
        bind_fused(Y, list(Y.leaf_iter_vars))
        return
    *rows, j = axes
    threads = _threads(j.extent)
    row = Y.fuse(*rows) if len(rows) > 1 else rows[0]
    _, ji = Y.split(j, factor=threads)
    Y.bind(row, thread_axis("blockIdx.x"))
    Y.bind(ji, thread_axis("threadIdx.x"))
    partials = {}
    for st in stats:               # factor all first: rfactor needs an unscheduled stage
        R = s[st]
        _, ki = R.split(R.op.reduce_axis[0], factor=threads)
        partials[st] = s.rfactor(st, ki)
    compute_all_at(s, stats + list(partials.values()), Y, row)   # each thread combines the partials itself
    for partial in partials.values():
        P = s[partial]
        P.set_scope("shared")
        P.bind(P.op.axis[0], thread_axis("threadIdx.x"))
