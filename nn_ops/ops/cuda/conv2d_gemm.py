"""The implicit-GEMM convolution (``ops/conv2d_gemm.py``) on the GPU: the matmul schedule's tiles.

Rows are output channels, columns the output pixels of all images (``q``): the output
(with its fused epilogue: bias, relu, residual add) is reordered to (channel, image, y,
x), its pixel axes fused into ``q`` and tiled like a matmul's output (``gemm_tiles``: 16 x
16 threads, a register block per thread); the reduction over ``C*KH*KW`` runs in K-steps
whose weight panel (``W2``, float4 rows) and patch panel (``cols``, the input gathered with
its padding, inlined into the copy) go through shared memory, double-buffered when every
tile is whole.  What matmul.py says about the register block applies here.
"""
from __future__ import annotations

from ....dsl.tensor import thread_axis
from ..registry import fused_output, register_schedule
from .conv2d import _inline_helpers
from .matmul import K_TILE, K_TILE_SINGLE, THREADS, _cooperative_copy, _whole_tiles, gemm_tiles


@register_schedule("conv2d_gemm", "cuda")
def schedule_conv2d_gemm(s, op, target) -> None:
    gemm = op.input_tensors[0].op
    _inline_helpers(s, gemm)
    final = fused_output(s, op)
    if final is not s[op]:
        s[op].compute_inline()         # the epilogue reads the product directly
    W2, cols = gemm.input_tensors[:2]
    n, o, y, x = final.op.axis
    final.reorder(o, n, y, x)
    q = final.fuse(n, final.fuse(y, x))     # (n, (y, x)): the fused index folds back to the product's
    oc, pixels = gemm.outputs[0].shape
    pm, pn = gemm_tiles(oc, pixels)
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
    k = L.op.reduce_axis[0]
    double = _whole_tiles((oc, pixels), k, (THREADS * pm, THREADS * pn), K_TILE)
    ko, ki = L.split(k, factor=K_TILE if double else K_TILE_SINGLE)
    L.reorder(ko, ki, ci, cj)
    L.unroll(ki)
    L.unroll(ci)
    L.vectorize(cj)
    for tensor in (W2, cols):
        cache = s.cache_read(tensor, "shared", [gemm.outputs[0]])
        s[cache].compute_at(L, ko)
        _cooperative_copy(s, cache, THREADS, THREADS)
        if double:
            s[cache].double_buffer()
