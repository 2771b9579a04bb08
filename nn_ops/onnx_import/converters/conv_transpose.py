"""Converter for ConvTranspose: 2-d, and 1-d as 2-d on rows of height 1 (as Conv does)."""
from __future__ import annotations

import numpy as np

from ..context import ImportContext, Unsupported, converter
from .nn import _as_rows, _from_rows, accumulate_float16_in_float32


def _per_axis(ctx: ImportContext, node, name: str, default, rank: int):
    values = [int(v) for v in ctx.attr(node, name, [default] * rank)]
    if len(values) != rank:
        raise Unsupported(f"{name}={values} for a {rank}-d ConvTranspose ({rank} values expected)")
    return values


def _window(ctx: ImportContext, node, in_sizes, kernel):
    """Strides, dilations, output_padding and (begin pads, end pads), one value per spatial axis.

    ``output_shape`` (or ``auto_pad`` SAME_*, whose output is ``input * stride``) sets the
    pads from the total ``natural size - output_shape``, split as ONNX's spec and reference
    say (SAME_UPPER puts the smaller half first); a negative total makes negative pads,
    i.e. zero rows added to the output."""
    rank = len(in_sizes)
    strides = _per_axis(ctx, node, "strides", 1, rank)
    dilations = _per_axis(ctx, node, "dilations", 1, rank)
    extra = _per_axis(ctx, node, "output_padding", 0, rank)
    for k, (e, s, d) in enumerate(zip(extra, strides, dilations)):
        if not 0 <= e < max(s, d):      # onnxruntime's and PyTorch's rule (a larger one adds only zeros)
            raise Unsupported(f"attribute output_padding={list(extra)}: output_padding[{k}] = {e} must be >= 0 and "
                              f"less than max(stride, dilation) = {max(s, d)} on spatial axis {k}")
    auto_pad = ctx.attr(node, "auto_pad", "NOTSET") or "NOTSET"
    if auto_pad not in ("NOTSET", "VALID", "SAME_UPPER", "SAME_LOWER"):
        raise Unsupported(f"auto_pad={auto_pad!r}")
    output_shape = [int(v) for v in ctx.attr(node, "output_shape", [])]
    if output_shape and len(output_shape) == rank + 2:      # some exporters give [N, C, spatial...]
        output_shape = output_shape[2:]
    if output_shape and len(output_shape) != rank:
        raise Unsupported(f"output_shape={output_shape} for a {rank}-d ConvTranspose")
    if output_shape or auto_pad.startswith("SAME"):
        wanted = output_shape or [size * s for size, s in zip(in_sizes, strides)]
        natural = [s * (size - 1) + e + (k - 1) * d + 1
                   for size, s, e, k, d in zip(in_sizes, strides, extra, kernel, dilations)]
        totals = [n - o for n, o in zip(natural, wanted)]
        if auto_pad == "SAME_UPPER":
            begin, end = [t // 2 for t in totals], [t - t // 2 for t in totals]
        else:
            begin, end = [t - t // 2 for t in totals], [t // 2 for t in totals]
    elif auto_pad == "VALID":
        begin, end = [0] * rank, [0] * rank
    else:
        pads = _per_axis(ctx, node, "pads", 0, 2 * rank)
        begin, end = pads[:rank], pads[rank:]
    return strides, dilations, extra, begin, end


@converter("ConvTranspose", since=1)
def conv_transpose(ctx: ImportContext, node):
    """float16 accumulates in float32 and rounds once at the end, as Conv does."""
    accumulate_float16_in_float32(ctx, node, _conv_transpose)


def _conv_transpose(ctx: ImportContext, node, inputs, out: str) -> str:
    x, w, bias = inputs[0], inputs[1], inputs[2:]
    x_shape, w_shape = ctx.shape(x), ctx.shape(w)
    rank = len(x_shape) - 2
    if rank not in (1, 2) or len(w_shape) != len(x_shape):
        raise Unsupported(f"a {rank}-d ConvTranspose (input of rank {len(x_shape)}, weight of rank "
                          f"{len(w_shape)}): only 1-d and 2-d are supported")
    kernel = list(w_shape[2:])
    declared = [int(k) for k in ctx.attr(node, "kernel_shape", kernel)]
    if declared != kernel:
        raise Unsupported(f"kernel_shape={declared} differs from the weight's spatial shape {kernel}")
    strides, dilations, extra, begin, end = _window(ctx, node, list(x_shape[2:]), kernel)
    if rank == 1:
        attrs = {"stride": (1, strides[0]), "dilation": (1, dilations[0]), "output_padding": (0, extra[0]),
                 "padding": (0, begin[0], 0, end[0]), "groups": int(ctx.attr(node, "group", 1))}
        return _from_rows(ctx, node, "conv2d_transpose", [_as_rows(ctx, x), _as_rows(ctx, w)] + bias, attrs, out)
    attrs = {"stride": tuple(strides), "dilation": tuple(dilations), "output_padding": tuple(extra),
             "padding": (begin[0], begin[1], end[0], end[1]), "groups": int(ctx.attr(node, "group", 1))}
    if (attrs["groups"] == 1 and kernel == strides and dilations == [1, 1] and extra == [0, 0]
            and begin + end == [0, 0, 0, 0]):
        shuffled = _as_pixel_shuffle(ctx, node, x, w, bias, kernel, out)
        if shuffled:
            return shuffled
    return ctx.emit("conv2d_transpose", [x, w] + bias, out, attrs, name=node.name)


def _as_pixel_shuffle(ctx: ImportContext, node, x, w, bias, kernel, out):
    """A ConvTranspose whose kernel equals its stride (U-Net's 2x2/2 up-convolution, no pads) with
    constant weights: each input pixel writes its own KHxKW output tile, so it is a 1x1 conv to
    OC*KH*KW channels (the blocked conv path) followed by DepthToSpace (CRD): Y[n, o, i*KH + ky,
    j*KW + kx] = Z[n, (o*KH + ky)*KW + kx, i, j].  The gather form computes KH*KW taps per output
    where one counts.  None when a weight or bias is not a constant."""
    w_value = ctx.const(w)
    b_value = ctx.const(bias[0]) if bias else None
    if w_value is None or (bias and b_value is None):
        return None
    kh, kw = kernel
    c, oc = w_value.shape[:2]
    n, _, h, wd = ctx.shape(x)
    w1 = ctx.add_constant(w + ".pixel_shuffle", np.ascontiguousarray(
        w_value.transpose(1, 2, 3, 0).reshape(oc * kh * kw, c, 1, 1)))
    inputs = [x, w1]
    if bias:
        inputs.append(ctx.add_constant(bias[0] + ".pixel_shuffle", np.repeat(b_value, kh * kw)))
    z = ctx.emit("conv2d", inputs, ctx.temp(out, "tiles"),
                 {"stride": (1, 1), "padding": (0, 0, 0, 0), "dilation": (1, 1), "groups": 1})
    r = ctx.emit("reshape", [z], ctx.temp(out, "split"), {"shape": (n, oc, kh, kw, h, wd)})
    t = ctx.emit("transpose", [r], ctx.temp(out, "perm"), {"perm": (0, 1, 4, 2, 5, 3)})
    return ctx.emit("reshape", [t], out, {"shape": (n, oc, h * kh, wd * kw)}, name=node.name)
