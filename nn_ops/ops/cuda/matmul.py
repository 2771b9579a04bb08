"""matmul, dense and batch_matmul on the GPU: shared-memory tiles, register blocks.

Each block of 16 x 16 threads computes a tile of the output, 128 x 64 where the output
is large; each thread an ``8 x 4`` block of it (other sizes where they make whole tiles
or fill the multiprocessors: ``gemm_tiles``), accumulated in registers
(``cache_write(C, "local")`` computed at the thread).  The reduction runs in steps of
32 or 16 (``reduction_step``: the deepest that makes whole steps and fits double-buffered in
shared memory; 8, single-buffered, when the tiles are partial): per step the block
copies the tile's rows x step panel of A and step x columns panel of B into shared memory
cooperatively (every thread copies float4s;
``insert_syncs`` puts the barriers around the copies), then every thread runs the
unrolled register-block x step multiply-adds from shared memory and registers.  When the
output and the reduction are whole tiles, both panels are double-buffered
(``Stage.double_buffer``): the next step's global loads are in flight during this
step's arithmetic, with one barrier per step (on an H100 at 4096^3: 32.7 TFLOPS
single-buffered with 8-deep steps, 39.4 double-buffered with 16-deep ones; 16-deep
steps single-buffered are slower, 30.4; ``python -m benchmarks.cuda_matmul``).  A fused epilogue (bias, activation)
is computed from the registers on the way out.
"""
from __future__ import annotations

from ....dsl import dtypes
from ....dsl.expr import Const
from ....dsl.tensor import thread_axis
from ..registry import register_schedule
from .gemm_stages import VEC, cooperative_copy, copied_as_is, gemm_stages
from .matmul_tensor_cores import TENSOR_CORE_PRECISIONS, schedule_gemm_tensor_cores

TILE = 128          # the largest output tile per block (rows and columns)
PER_THREAD = 8      # the largest output block per thread (rows and columns): 16 x 16 threads
THREADS = TILE // PER_THREAD
MULTIPROCESSORS = 132   # an H100's; fewer blocks than this leave multiprocessors idle
K_TILES = (32, 16)  # reduction steps staged through shared memory, double-buffered: the deepest that fits
K_TILE = 16         # the step other GEMM-shaped schedules (implicit-GEMM convs) use
K_TILE_SINGLE = 8   # ... when partial tiles rule double buffering out
A_PANELS = ("rows", "steps", "padded_steps")   # layouts of the row operand's shared panel (``store_a_panel``)
A_PANEL = "rows"    # the default: measured fastest on an H200 (benchmarks/RESULTS.md)
# double-buffer the panels by cp.async where they copy an input as it is: on an H200 at 4096^3,
# 44.3 TFLOPS against 42.3 through registers (``python -m benchmarks.cuda_matmul --register-copies``)
ASYNC_COPIES = True


def _whole_tiles(extents, k, tiles, k_tile: int) -> bool:
    """Whether every block copies full panels at every step (double buffering needs one copy shape)."""
    pairs = list(zip(extents, tiles)) + [(k.extent, k_tile)]
    return all(isinstance(e, Const) and e.value % step == 0 for e, step in pairs)


def _per_thread(extent, largest: int = PER_THREAD) -> int:
    """Rows (or columns) per thread along an output axis: the largest of ``largest``, 4, 2 whose
    tile (16 threads' worth) divides the extent, so that no thread's register block is partial
    (a partial one has run-time extents, which put it in local memory: a 128 x 64 batch
    matmul in the encoder took 360 us that way on an H100); ``largest`` for ragged extents."""
    if not isinstance(extent, Const):
        return largest
    for p in (8, 4, 2):
        if p <= largest and extent.value % (THREADS * p) == 0:
            return p
    return largest if extent.value >= THREADS * largest else max(2, min(largest, -(-extent.value // THREADS)))


def gemm_tiles(rows, cols, batch=None, multiprocessors: int = MULTIPROCESSORS):
    """Register block per thread (rows, columns) for an output of ``rows x cols`` (times ``batch``).

    8 x 4 (128 x 64 tiles) where they are whole: on an H100 it measured 41.1 TFLOPS at 4096^3
    against 39.5 for 8 x 8, and 33.7 at 1024^3 against 17.6 for 8 x 8 (64 blocks for 132
    multiprocessors), 30.5 for 4 x 4 and 20.0 for 4 x 8.  Then smaller blocks while the grid
    has fewer blocks than half the multiprocessors (a 128 x 64 x 128 attention product on 32
    heads), rows first."""
    pm, pn = _per_thread(rows), _per_thread(cols, largest=4)
    extents = [e.value if isinstance(e, Const) else None for e in (rows, cols)]
    extents.append(1 if batch is None else batch.value if isinstance(batch, Const) else None)
    if None in extents:
        return pm, pn

    def blocks(pm, pn):
        return -(-extents[0] // (THREADS * pm)) * -(-extents[1] // (THREADS * pn)) * extents[2]
    while blocks(pm, pn) < multiprocessors // 2 and max(pm, pn) > 4:
        pm //= 2
    return pm, pn


def reduction_step(extents, k, tiles, dtype_bytes: int = 4, steps=K_TILES, shared_bytes=None):
    """(step, double-buffered): the first of ``steps`` whose double-buffered panels are whole tiles
    and fit in ``shared_bytes`` (None: not checked; lowering names an overflow), else
    ``K_TILE_SINGLE`` single-buffered (at most the last of ``steps``).

    On an H100, 8 x 4 blocks (128 x 64 tiles): 36.5 TFLOPS at 1024^3 with 32-deep steps against
    33.7 with 16-deep ones, 42.5 against 41.6 at 4096^3 (``python -m benchmarks.cuda_matmul --tiles ...``)."""
    for step in steps:
        fits = shared_bytes is None or 2 * (tiles[0] + tiles[1]) * step * dtype_bytes <= shared_bytes
        if fits and _whole_tiles(extents, k, tiles, step):
            return step, True
    return min(steps[-1], K_TILE_SINGLE), False


def _schedule_gemm_cuda(s, op, target, batch: bool, tiles=None, k_tile=None, a_panel=None,
                        threads=(THREADS, THREADS), asynchronous=None) -> None:
    """``tiles``: (rows, columns) per thread, to override :func:`gemm_tiles`; ``k_tile``: the
    reduction step, to override ``K_TILE``; ``a_panel``: the layout of A's shared panel, one of
    ``A_PANELS`` (None: ``A_PANEL``); ``threads``: (rows, columns) of threads per block, whose
    shape also sets a warp's (32 / columns rows of threads) (benchmarks compare variants:
    ``cuda_matmul --tiles``); ``asynchronous``: fill the double-buffered panels by cp.async (None:
    ``ASYNC_COPIES``), where both operands are inputs copied as they are into row-major panels.

    No block swizzle: launching row tiles in groups per column tile needs a fused block index,
    and bound inference through its division gives the register block run-time extents
    (piecewise selects, not vectorized): seen in the lowered IR of a 128 x 64 output."""
    if target.precision in TENSOR_CORE_PRECISIONS and tiles is None and k_tile is None:
        if schedule_gemm_tensor_cores(s, op, target, batch):
            return
    C, CL, A_t, B_t = gemm_stages(s, op, "local")
    AA = s.cache_read(A_t, "shared", [CL])
    BB = s.cache_read(B_t, "shared", [CL])

    axes = list(C.op.axis)
    i, j = axes[-2], axes[-1]
    rows, cols = threads
    pm, pn = tiles if tiles is not None else gemm_tiles(i.extent, j.extent, axes[0].extent if batch else None)
    by, yi = C.split(i, factor=rows * pm)
    bx, xi = C.split(j, factor=cols * pn)
    ty, yi = C.split(yi, nparts=rows)
    tx, xi = C.split(xi, nparts=cols)
    if batch:
        C.reorder(axes[0], by, bx, ty, tx, yi, xi)
        C.bind(axes[0], thread_axis("blockIdx.z"))
    else:
        C.reorder(by, bx, ty, tx, yi, xi)
    C.bind(by, thread_axis("blockIdx.y"))
    C.bind(bx, thread_axis("blockIdx.x"))
    C.bind(ty, thread_axis("threadIdx.y"))
    C.bind(tx, thread_axis("threadIdx.x"))
    C.unroll(yi)                       # the register block is read back with constant indices
    if isinstance(j.extent, Const) and j.extent.value % (cols * pn) == 0:
        C.vectorize(xi)                # whole columns: each row of the block leaves as one float4 store
    else:
        C.unroll(xi)

    L = s[CL]
    s[CL].compute_at(C, tx)
    c_axes = list(L.op.axis)
    ci, cj = c_axes[-2], c_axes[-1]
    # a forced step is taken as asked (a benchmark variant that overflows shared memory says so)
    step, double = reduction_step((i.extent, j.extent), L.op.reduce_axis[0], (rows * pm, cols * pn),
                                  dtypes.itemsize(A_t.dtype), steps=(k_tile,) if k_tile else K_TILES,
                                  shared_bytes=None if k_tile else target.max_shared_memory_per_block)
    ko, ki = L.split(L.op.reduce_axis[0], factor=step)
    # the batch axis goes inside the reduction steps: a thread with no rows of a small output
    # gets an empty loop there, which must not enclose the barriers around the shared copies
    L.reorder(ko, ki, *c_axes)
    L.unroll(ki)
    L.unroll(ci)
    L.vectorize(cj)
    # (whole tiles only: with a partial step, bound inference through the register copy of a
    # step-major panel gives up and sizes it as the whole operand)
    panel = (A_PANEL if a_panel is None else a_panel) if double else "rows"
    # (a step-major panel transposes as it copies, which cp.async cannot)
    asynchronous = (ASYNC_COPIES if asynchronous is None else asynchronous) and copied_as_is((A_t, B_t), target) \
        and panel == "rows"
    for cache in (AA, BB):
        s[cache].compute_at(L, ko)
        cooperative_copy(s, cache, rows, cols, rows_fastest=panel == "steps" and cache is AA)
        if double:
            s[cache].double_buffer(asynchronous=asynchronous)
    store_a_panel(s, AA, CL, ki, panel)


def store_a_panel(s, AA, CL, ki, panel: str) -> None:
    """Lay out A's shared panel: ``"rows"`` as A (row-major), or step-major (``A_shared[k][row]``)
    with each thread's rows of one step read into registers as two float4s.

    Row-major, the rows one thread reads at a step lie a step apart: the two rows of threads
    in a warp hit the same bank.  Step-major, they are contiguous and conflict-free, but the
    copy stores scalars a row apart: ``"steps"`` has neighbouring threads copy neighbouring rows
    (``cooperative_copy(rows_fastest=True)``: conflict-free stores, each warp's float4 global
    loads 32 rows apart), ``"padded_steps"`` keeps the copy's coalesced order and pads each
    step's row by 4 floats (stores over 8 banks).  On an H200, 4096^3: 33.7 TFLOPS for
    ``"steps"`` against 42.3 for ``"rows"`` (``python -m benchmarks.cuda_matmul --tiles ...``)."""
    if panel not in A_PANELS:
        raise ValueError(f"a_panel={panel!r}: use one of {', '.join(A_PANELS)}")
    if panel == "rows":
        return
    stage = s[AA]
    *lead, rows, depth = stage.op.axis
    stage.reorder_storage(*lead, depth, rows)
    if panel == "padded_steps":
        stage.storage_align(depth, 32, 4)
    AL = s.cache_read(AA, "local", [CL])
    s[AL].compute_at(s[CL], ki)
    rows, depth = s[AL].op.axis[-2:]
    outer, lanes = s[AL].split(rows, factor=VEC)
    s[AL].reorder(depth, outer, lanes)
    s[AL].unroll(outer)
    s[AL].vectorize(lanes)


@register_schedule("matmul", "cuda")
def schedule_matmul(s, op, target):
    _schedule_gemm_cuda(s, op, target, batch=False)


@register_schedule("dense", "cuda")
def schedule_dense(s, op, target):
    _schedule_gemm_cuda(s, op, target, batch=False)


@register_schedule("batch_matmul", "cuda")
def schedule_batch_matmul(s, op, target):
    _schedule_gemm_cuda(s, op, target, batch=True)
