"""Products with few rows on the GPU (``gemv``: a batch-1 classifier, ``X [M<=16, K] @ W [K, N]``).

One thread per output walking the whole of K gives a 1000-way classifier 1000 threads
on 8 of 132 multiprocessors, latency-bound: 112 us for 512 x 1000 on an H100, against
~2 MB of weights that the memory system moves in about a microsecond.  Here K is split
into ``K_SLICES`` slices (``rfactor``): a first kernel has thread (y, x) of a block sum
slice y of column x (a warp reads 32 adjacent floats of a row of W: coalesced) into a
partial-sum buffer ``[slices, M, N]``, with a block per ``COLUMNS`` columns and
``THREAD_SLICES`` slices (about ``K / 16`` slices in all, so that 512 x 1000 runs 128
blocks of 16-long sums rather than 8 blocks of 512-long ones); a second
kernel, one thread per output, adds the ``K_SLICES`` partials and applies a fused
epilogue (bias, relu).  Two launches, replayed from a CUDA graph in a network.
"""
from __future__ import annotations

from ....dsl.expr import Const
from ....dsl.tensor import thread_axis
from ..registry import fused_output, register_schedule
from .injective import bind_fused

COLUMNS = 32         # one warp across adjacent columns of W
THREAD_SLICES = 8    # slices per block of the first kernel: 256 threads
SLICE_LENGTH = 16    # aim for sums this long per thread ...
MAX_SLICES = 64      # ... with at most this many partial sums per output
THREADS = 128    # the combining kernel: one thread per output


@register_schedule("gemv", "cuda")
def schedule_gemv(s, op, target) -> None:
    final = fused_output(s, op)
    own = s[op]
    k = own.op.reduce_axis[0]
    length = k.extent.value if isinstance(k.extent, Const) else THREAD_SLICES * SLICE_LENGTH
    slices = min(MAX_SLICES, max(THREAD_SLICES, length // SLICE_LENGTH // THREAD_SLICES * THREAD_SLICES))
    slice_, _ = own.split(k, nparts=slices)
    partial = s.rfactor(op.outputs[0], slice_)
    P = s[partial]
    y, *rows, x = P.op.axis
    block, column = P.split(x, factor=COLUMNS)
    block_y, y = P.split(y, factor=THREAD_SLICES)
    P.reorder(block, block_y, y, column, *rows)
    P.bind(block, thread_axis("blockIdx.x"))
    P.bind(block_y, thread_axis("blockIdx.y"))
    P.bind(y, thread_axis("threadIdx.y"))
    P.bind(column, thread_axis("threadIdx.x"))
    if final is own:
        bind_fused(own, [iv for iv in own.leaf_iter_vars if iv.kind != "reduce"], THREADS)
        return
    _, tx = bind_fused(final, list(final.op.axis), THREADS)
    own.compute_at(final, tx)
