"""conv2d (and conv2d_transpose) on the GPU: direct convolution, register-blocked over output channels.

The channel-blocked form (weights packed ``[OC/bn, C/cb, KH, KW, cb, bn]``, the form of
every 3x3 convolution of ResNet-18) gives each thread one output pixel and ``per``
adjacent output channels of a block (``_channels_per_thread``: 16, or fewer while the grid
would have under ``MIN_THREADS`` threads): every input value loaded feeds ``per``
multiply-adds from registers, and since a warp's threads are adjacent pixels of the same
channels, its weight loads are one broadcast address.  Other forms: one thread per output.

Padding, weight packing, a strided 1x1's pixel copy and im2col patches are inlined into the reads; the reduction stage (the
blocked ``.nchwc`` stage, the 1x1 ``.pixels`` stage, or the depthwise op itself) is
computed per thread inside the output's thread loop, so a fused epilogue (bias, relu)
and the layout change cost no extra pass.  Correct and simple, not fast: no shared
memory tiling or register blocking yet (the gemm schedule's technique would apply to
the 1x1 and im2col forms).
"""
from __future__ import annotations

from ....dsl.tensor import thread_axis
from ..registry import fused_output, register_schedule
from .injective import bind_fused

THREADS = 128
BLOCK_THREADS = 256       # the register-blocked conv's block: pixels x channel groups
MIN_THREADS = 132 * 256   # keep about two blocks of 128 per multiprocessor of an H100 busy
_INLINE_TAGS = ("conv2d.pad", "conv2d.wpack", "conv2d.subsample", "conv2d.im2col")


def _inline_helpers(s, op) -> None:
    stack, seen = list(op.input_tensors), set()
    while stack:
        t = stack.pop()
        if id(t.op) in seen:
            continue
        seen.add(id(t.op))
        if getattr(t.op, "tag", "") in _INLINE_TAGS and s[t.op].attach_type != "inline":
            s[t.op].compute_inline()
        stack.extend(getattr(t.op, "input_tensors", []))


@register_schedule("conv2d", "cuda")
@register_schedule("conv2d_1x1", "cuda")
@register_schedule("conv2d_im2col", "cuda")
@register_schedule("conv2d_rows", "cuda")
@register_schedule("conv2d_depthwise", "cuda")
@register_schedule("conv2d_transpose", "cuda")
def schedule_conv2d_direct(s, op, target) -> None:
    _inline_helpers(s, op)
    final = fused_output(s, op)
    reduction = op if op.reduce_axis else op.input_tensors[0].op
    if reduction is not op and final is not s[op]:
        s[op].compute_inline()          # the layout copy reads the reduction stage directly
    if final is s[reduction]:
        spatial = [iv for iv in final.leaf_iter_vars if iv.kind != "reduce"]
        bind_fused(final, spatial, THREADS)
        return
    if reduction.tag == "conv2d.nchwc" and len(final.op.axis) == 4:
        _register_blocked(s, final, reduction)
        return
    _, tx = bind_fused(final, list(final.op.axis), THREADS)
    s[reduction].compute_at(final, tx)


def _channels_per_thread(block: int, other_threads: int) -> int:
    """Output channels per thread: the whole block, halved while too few threads would run."""
    per = block
    while per > 2 and per % 2 == 0 and other_threads * (block // per) < MIN_THREADS:
        per //= 2
    return per


def _register_blocked(s, final, reduction) -> None:
    """Thread = one pixel x ``per`` channels of a block; the reduction's channel loop innermost,
    unrolled.  Pixels (blockIdx.x / threadIdx.x), image and channel block (blockIdx.y) and the
    channel group in the block (threadIdx.y) are kept apart, so the register block's index is a
    constant after simplification (fusing pixels with channels left run-time indices there,
    which put it in local memory)."""
    bn = int(reduction.outputs[0].shape[-1].value)
    n, o, y, x = final.op.axis
    others = int(n.extent.value) * int(y.extent.value) * int(x.extent.value) * (int(o.extent.value) // bn)
    per = _channels_per_thread(bn, others)
    groups = bn // per
    ob, oi = final.split(o, factor=bn)
    oo, oi = final.split(oi, factor=per)
    pixels = final.fuse(y, x)
    bx, tx = final.split(pixels, factor=max(32, BLOCK_THREADS // groups))
    final.reorder(n, ob, bx, oo, tx, oi)
    images = final.fuse(n, ob)           # one block axis: a lone image's index folds to 0
    final.bind(images, thread_axis("blockIdx.y"))
    final.bind(bx, thread_axis("blockIdx.x"))
    final.bind(oo, thread_axis("threadIdx.y"))
    final.bind(tx, thread_axis("threadIdx.x"))
    final.unroll(oi)
    R = s[reduction]
    R.compute_at(final, tx)
    rn, rob, ry_, rx_, roi = R.op.axis
    rco, ry, rx, rci = R.op.reduce_axis
    R.reorder(rn, rob, ry_, rx_, rco, ry, rx, rci, roi)
    R.unroll(rci)
    R.unroll(roi)
