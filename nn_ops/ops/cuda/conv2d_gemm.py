"""The implicit-GEMM convolution (``ops/conv2d_gemm.py``) on the GPU: the matmul schedule's tiles.

Rows are output channels, columns the output pixels of all images (``q``): the output
(with its fused epilogue: bias, relu, residual add) is reordered to (channel, image, y,
x), its pixel axes fused into ``q`` and tiled like a matmul's output (``gemm_tiles``: 16 x
16 threads, a register block per thread); the reduction over ``C*KH*KW`` runs in K-steps
whose weight panel (``W2``, float4 rows) and patch panel (``cols``, the input gathered with
its padding, inlined into the copy) go through shared memory, double-buffered when every
tile is whole.  What matmul.py says about the register block applies here.  Where the tiles
are too few to fill the GPU and the reduction is long (deep layers at small batch), the
reduction is split (``split_k``): the slices' partial products are a batch of such matmuls,
and a second kernel adds them with the epilogue.
"""
from __future__ import annotations

from ....dsl.tensor import thread_axis
from ....lowering.passes.distribute_warp_tiles import mma_kind
from ..registry import fused_output, register_schedule
from .conv2d import _inline_helpers
from .injective import bind_fused
from . import matmul
from .gemm_stages import cooperative_copy
from .matmul import K_TILE, K_TILE_SINGLE, MULTIPROCESSORS, THREADS, _schedule_gemm_cuda, _whole_tiles, gemm_tiles
from .matmul_tensor_cores import (CONV_WARP_COLUMNS, TENSOR_CORE_PRECISIONS, accumulate_in_warps, schedule_gemm_tensor_cores,
                                  tensor_core_tiles, tile_output)

MAX_SPLITS = 32
MIN_SLICE = 128          # reduction elements per slice at least
EPILOGUE_THREADS = 256   # the kernel that adds the slices: one thread per output


@register_schedule("conv2d_gemm", "cuda")
def schedule_conv2d_gemm(s, op, target) -> None:
    gemm = op.input_tensors[0].op
    _inline_helpers(s, gemm)
    final = fused_output(s, op)
    if final is not s[op]:
        s[op].compute_inline()         # the epilogue reads the product directly
    if target.precision in TENSOR_CORE_PRECISIONS and _on_tensor_cores(s, final, gemm, target):
        return
    oc, pixels = gemm.outputs[0].shape
    pm, pn = gemm_tiles(oc, pixels)
    k = gemm.reduce_axis[0]
    splits = split_k(_blocks(oc, pixels, THREADS * pm, THREADS * pn), int(k.extent.value))
    if splits > 1:
        _split_k(s, final, gemm, splits, (pm, pn), target)
        return
    n, o, y, x = final.op.axis
    final.reorder(o, n, y, x)
    q = final.fuse(n, final.fuse(y, x))     # (n, (y, x)): the fused index folds back to the product's
    by, yi = final.split(o, factor=THREADS * pm)
    bx, xi = final.split(q, factor=THREADS * pn)
    ty, yi = final.split(yi, nparts=THREADS)
    tx, xi = final.split(xi, nparts=THREADS)
    final.reorder(by, bx, ty, tx, yi, xi)
    final.bind(by, thread_axis("blockIdx.y"))
    final.bind(bx, thread_axis("blockIdx.x"))
    final.bind(ty, thread_axis("threadIdx.y"))
    final.bind(tx, thread_axis("threadIdx.x"))
    final.unroll(yi)                   # the register block is read with constant indices
    final.unroll(xi)

    L = s[gemm]
    L.compute_at(final, tx)
    ci, cj = L.op.axis
    double = _whole_tiles((oc, pixels), k, (THREADS * pm, THREADS * pn), K_TILE)
    ko, ki = L.split(k, factor=K_TILE if double else K_TILE_SINGLE)
    L.reorder(ko, ki, ci, cj)
    L.unroll(ki)
    L.unroll(ci)
    L.vectorize(cj)
    W2, cols = gemm.input_tensors[:2]
    for tensor in (W2, cols):
        cache = s.cache_read(tensor, "shared", [gemm.outputs[0]])
        s[cache].compute_at(L, ko)
        panel = matmul.A_PANEL if double and tensor is W2 else "rows"   # (whole tiles only: matmul.py)
        cooperative_copy(s, cache, THREADS, THREADS, rows_fastest=panel == "steps")
        if double:
            s[cache].double_buffer()
        matmul.store_a_panel(s, cache, gemm.outputs[0], ki, panel)


def _on_tensor_cores(s, final, gemm, target) -> bool:
    """The product in warp tiles on the tensor cores (``matmul_tensor_cores.py``), rows the output
    channels and columns the pixels as above, split over the reduction where the tiles are too few
    (``split_k``); False (nothing changed) where they make no whole tiles."""
    oc, pixels = gemm.outputs[0].shape
    k = gemm.reduce_axis[0]
    depth = mma_kind(target).depth
    tiles = tensor_core_tiles(oc, pixels, k.extent, target.max_shared_memory_per_block, depth, CONV_WARP_COLUMNS)
    if tiles is None or gemm.outputs[0].dtype != "float32":
        return False
    splits = split_k(_blocks(oc, pixels, tiles[0], tiles[1]), int(k.extent.value))
    if splits > 1:
        _split_k(s, final, gemm, splits, None, target)
        return True
    n, o, y, x = final.op.axis
    outputs = int(n.extent.value) * int(y.extent.value) * int(x.extent.value)
    if (int(oc.value), int(pixels.value)) != (int(o.extent.value), outputs):
        # padded rows or columns (``conv2d_implicit_gemm``): the output's last tile would cut the warp
        # tiles, so the product is a kernel of its own over whole tiles, and the epilogue another
        C = s[gemm]
        CW = s.cache_write(gemm.outputs[0], "warp")
        warp = tile_output(C, *C.op.axis, tiles)
        accumulate_in_warps(s, C, warp, CW, s[CW].op.input_tensors[:2], tiles, depth)
        _, tx = bind_fused(final, list(final.op.axis), EPILOGUE_THREADS)
        return True
    s[gemm].set_scope("warp")
    final.reorder(o, n, y, x)
    q = final.fuse(n, final.fuse(y, x))
    warp = tile_output(final, o, q, tiles)
    accumulate_in_warps(s, final, warp, gemm.outputs[0], gemm.input_tensors[:2], tiles, depth)
    return True


def _blocks(oc, pixels, rows: int, columns: int) -> int:
    """Blocks of ``rows x columns`` output tiles."""
    return -(-int(oc.value) // rows) * -(-int(pixels.value) // columns)


def split_k(blocks: int, length: int) -> int:
    """Slices of the reduction for a grid of ``blocks`` tiles: 1 when the grid fills the GPU, else
    enough slices to give about two blocks per multiprocessor, each slice a whole number of
    16-long steps and at least ``MIN_SLICE`` long (ResNet-18's last 3x3 convolutions at batch 1:
    8 tiles of 64 x 64 over a 4608-long reduction took 1.5 ms on an H100 unsplit)."""
    if blocks >= MULTIPROCESSORS // 2:
        return 1
    best = 1
    for splits in range(2, MAX_SPLITS + 1):
        if length % (splits * K_TILE) or length // splits < MIN_SLICE:
            continue
        best = splits
        if blocks * splits >= 2 * MULTIPROCESSORS:
            break
    return best


def _split_k(s, final, gemm, splits: int, tiles, target) -> None:
    """Partial products of ``splits`` reduction slices (``rfactor``), each tiled as a batch of
    matmuls (the slice on blockIdx.z; ``tiles`` per thread, or None: on the tensor cores), then
    one thread per output adds the slices and applies the epilogue."""
    L = s[gemm]
    part, _ = L.split(gemm.reduce_axis[0], nparts=splits)
    partial = s.rfactor(gemm.outputs[0], part)
    if tiles is not None or not schedule_gemm_tensor_cores(s, partial.op, target, batch=True):
        _schedule_gemm_cuda(s, partial.op, target, batch=True, tiles=tiles)
    _, tx = bind_fused(final, list(final.op.axis), EPILOGUE_THREADS)
    L.compute_at(final, tx)
