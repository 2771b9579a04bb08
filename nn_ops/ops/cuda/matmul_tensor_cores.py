"""matmul, dense and batch_matmul on the tensor cores (``precision="tf32"`` or ``"fp16"``): warp tiles of mma.sync.

Each block of warps computes a ``rows x columns`` tile of the output (128 x 128 where the
output allows), each warp a 64 x 32 part of it held as tensor-core fragments: a stage in
scope ``"warp"`` (``lowering/passes/distribute_warp_tiles.py`` turns its nests into
``mma.sync.m16n8k8`` steps, ``m16n8k16`` for fp16, and per-lane epilogues).  The reduction runs in steps staged
through shared memory, double-buffered, each step's rows padded so that the 32 lanes'
fragment loads fall in 32 different banks (A's rows by 4 floats mod 16, B's by 8 mod 32).
A fused epilogue (bias, activation) runs on each lane's elements on the way out.

Only whole tiles: rows and columns multiples of 32, the reduction a multiple of the mma's depth
(8 for tf32, 16 for fp16), float32.  Other shapes keep the fp32 schedule (``matmul.py``), which is
exact where the tensor cores are not: ``precision=`` permits rounding, it does not demand it.
"""
from __future__ import annotations

from typing import Optional, Tuple

from ....dsl.expr import Const
from ....dsl.tensor import thread_axis
from ....lowering.passes.distribute_warp_tiles import M as MMA_M, MMA_KINDS, N as MMA_N, mma_kind
from .gemm_stages import cooperative_copy, copied_as_is, gemm_stages

TILES = (128, 64, 32)        # block tile sides, the largest that divides the output's side
WARP_ROWS = 64
# a matmul's warp computes 64 x 64 (on an H200 at 4096^3: tf32 141 TFLOPS against 121 for 64 x 32,
# fp16 132 against 107; fewer fragment loads per mma); an implicit-GEMM convolution's 64 x 32
# (its ResNet-18 at batch 32 ran 6.2 ms of kernels with 64 x 64 against 4.9): its blocks need the
# threads for the patch gather
WARP_COLUMNS, CONV_WARP_COLUMNS = 64, 32
STEPS = (32, 16, 8)          # reduction steps through shared memory: the deepest that fits double-buffered
A_ALIGN, B_ALIGN = (16, 4), (32, 8)   # (factor, offset) of the panels' row strides: conflict-free fragments
TENSOR_CORE_PRECISIONS = tuple(MMA_KINDS)   # target precisions whose GEMMs use the tensor cores
# fill the panels by cp.async where they copy an input as it is: on an H200 at 4096^3, tf32 120.7
# TFLOPS against 111.7 through registers (``python -m benchmarks.cuda_matmul --precision tf32 --register-copies``)
ASYNC_COPIES = True


def _padded(width: int, align) -> int:
    factor, offset = align
    return width + (offset - width) % factor


def tensor_core_tiles(rows, columns, depth, shared_bytes: int, mma_depth: int, warp_columns: int = WARP_COLUMNS
                      ) -> Optional[Tuple[int, int, int, int, int]]:
    """(block rows, block columns, warp rows, warp columns, step) for a ``rows x columns`` output
    with a reduction of ``depth`` in mma steps of ``mma_depth`` (a warp's columns at most
    ``warp_columns``), or None where the tensor-core schedule does not apply."""
    if not all(isinstance(e, Const) for e in (rows, columns, depth)):
        return None
    rows, columns, depth = rows.value, columns.value, depth.value
    bm = next((t for t in TILES if rows % t == 0), None)
    bn = next((t for t in TILES if columns % t == 0), None)
    if bm is None or bn is None or depth % mma_depth:
        return None
    for step in (s for s in STEPS if s % mma_depth == 0):
        panels = bm * _padded(step, A_ALIGN) + step * _padded(bn, B_ALIGN)
        if depth % step == 0 and 2 * 4 * panels <= shared_bytes:
            return bm, bn, min(WARP_ROWS, bm), min(warp_columns, bn), step
    return None


def schedule_gemm_tensor_cores(s, op, target, batch: bool) -> bool:
    """Schedule ``op`` (matmul/dense/batch_matmul) on the tensor cores; False (nothing changed)
    where its shape or dtype does not make whole warp tiles."""
    if op.outputs[0].dtype != "float32" or len(op.reduce_axis) != 1:
        return False
    *_, i_ext, j_ext = (a.extent for a in op.axis)
    depth = mma_kind(target).depth
    tiles = tensor_core_tiles(i_ext, j_ext, op.reduce_axis[0].extent, target.max_shared_memory_per_block, depth)
    if tiles is None:
        return False
    C, CW, A_t, B_t = gemm_stages(s, op, "warp")
    *lead, i, j = C.op.axis
    warp = tile_output(C, i, j, tiles, lead)
    if batch:
        C.bind(lead[0], thread_axis("blockIdx.z"))
    accumulate_in_warps(s, C, warp, CW, (A_t, B_t), tiles, depth,
                        asynchronous=ASYNC_COPIES and copied_as_is((A_t, B_t), target))
    return True


def tile_output(C, i, j, tiles, lead=()):
    """Tile stage ``C`` over its rows ``i`` and columns ``j`` (after ``lead`` loops): blocks on
    blockIdx.y/x, warps on threadIdx.y, then 16 x 8 sub-tiles; returns the warp loop."""
    bm, bn, wm, wn, _ = tiles
    bi, ii = C.split(i, factor=bm)
    bj, jj = C.split(j, factor=bn)
    wi, ii = C.split(ii, factor=wm)
    wj, jj = C.split(jj, factor=wn)
    ti, i16 = C.split(ii, factor=MMA_M)
    tj, j8 = C.split(jj, factor=MMA_N)
    C.reorder(*lead, bi, bj, wi, wj, ti, tj, i16, j8)
    warp = C.fuse(wi, wj)
    C.bind(bi, thread_axis("blockIdx.y"))
    C.bind(bj, thread_axis("blockIdx.x"))
    C.bind(warp, thread_axis("threadIdx.y"))
    C.unroll(ti)                       # the fragments are read back with constant indices
    C.unroll(tj)
    return warp


def accumulate_in_warps(s, C, warp, CW, operands, tiles, mma_depth: int, asynchronous: bool = False) -> None:
    """Compute the product ``CW`` (a "warp" stage) at ``C``'s warp loop in 16 x 8 x ``mma_depth`` steps, its two
    ``operands`` (rows x reduction, reduction x columns) staged through padded, double-buffered
    shared panels that all threads of the block copy (by cp.async with ``asynchronous``: the caller
    checks ``copied_as_is``)."""
    bm, bn, wm, wn, step = tiles
    L = s[CW]
    L.compute_at(C, warp)
    *lead, ci, cj = L.op.axis
    ko, ki = L.split(L.op.reduce_axis[0], factor=step)
    kio, k8 = L.split(ki, factor=mma_depth)
    cti, ci16 = L.split(ci, factor=MMA_M)
    ctj, cj8 = L.split(cj, factor=MMA_N)
    L.reorder(ko, kio, *lead, cti, ctj, ci16, cj8, k8)
    for loop in (kio, cti, ctj):
        L.unroll(loop)
    warps = (bm // wm) * (bn // wn)
    for tensor, align in zip(operands, (A_ALIGN, B_ALIGN)):
        cache = s.cache_read(tensor, "shared", [CW])
        s[cache].compute_at(L, ko)
        cooperative_copy(s, cache, warps, 32)
        s[cache].storage_align(s[cache].op.axis[-2], *align)
        s[cache].double_buffer(asynchronous=asynchronous)
