"""conv2d (and conv2d_transpose) on the GPU, first version: one thread per output element, direct convolution.

Padding, weight packing, a strided 1x1's pixel copy and im2col patches are inlined into the reads; the reduction stage (the
blocked ``.nchwc`` stage, the 1x1 ``.pixels`` stage, or the depthwise op itself) is
computed per thread inside the output's thread loop, so a fused epilogue (bias, relu)
and the layout change cost no extra pass.  Correct and simple, not fast: no shared
memory tiling or register blocking yet (the gemm schedule's technique would apply to
the 1x1 and im2col forms).
"""
from __future__ import annotations

from ..registry import fused_output, register_schedule
from .injective import bind_fused

THREADS = 128
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
    _, tx = bind_fused(final, list(final.op.axis), THREADS)
    s[reduction].compute_at(final, tx)
