"""layer_norm on the GPU: one block per row, as softmax (softmax.py): the mean and variance are
factored into one partial result per thread in shared memory, every thread combines them and
writes its columns of the row.  Normalising over several trailing axes falls back to a thread
per row for the statistics and a thread per element for the output."""
from __future__ import annotations

from ..norm import _stat_ops
from ..registry import register_schedule
from .injective import bind_fused
from .reduce import schedule_reduce
from .softmax import block_per_row


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
    block_per_row(s, Y, stats)
