"""Patches of an NHWC image (im2col): the rows of a convolution run as a matrix product.

``patches(X[N, H, W, C])[n, y, x, ky, kx, c] = X[n, y sh + ky dh - pt, x sw + kx dw - pl, c]``, or the pad
value outside the image.  Read as a matrix ``[N OH OW, KH KW C]`` (a reshape, no copy), row ``p`` holds
the values output pixel ``p`` multiplies by the weight's column: the int8 convolution
(``ConvInteger``) runs as ``matmul_u8s8`` on it.  Channels last, so the copy moves whole runs of C
values and the product reads each row contiguously.

The pad value may be a run-time scalar tensor: an int8 convolution pads with its input's zero
point (which DynamicQuantizeLinear computes), so that a padded value contributes nothing.
"""
from __future__ import annotations

import math

from ...dsl.expr import const, if_then_else, logical_and
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import static_shape
from .registry import register_schedule, too_little_to_share


def patches(X: Tensor, kernel, stride, padding, dilation, pad_value=None, channels: int = None,
            name: str = "patches") -> Tensor:
    """``X`` [N, H, W, C]; ``padding`` (top, left, bottom, right); ``pad_value``: a scalar tensor (one
    element, X's dtype) or None for zeros; ``channels`` (at least C): each tap's run of channels
    filled up to this many with the pad value (an int8 product's rows in whole words of four)."""
    if X.ndim != 4:
        raise ExprError(f"patches: X must be 4-d [N, H, W, C], got rank {X.ndim}")
    n, h, w, c = static_shape(X)
    channels = c if channels is None else int(channels)
    if channels < c:
        raise ExprError(f"patches: {channels} channels per tap cannot hold the image's {c}")
    (kh, kw), (sh, sw), (dh, dw) = kernel, stride, dilation
    pt, pl, pb, pr = padding
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    if oh < 1 or ow < 1:
        raise ExprError(f"patches: the (dilated) kernel {kernel} does not fit the padded {h}x{w} image")
    if pad_value is not None and (pad_value.dtype != X.dtype or
                                  math.prod(static_shape(pad_value)) != 1):
        raise ExprError(f"patches: the pad value must be one {X.dtype} value, got {pad_value.dtype} of shape "
                        f"{static_shape(pad_value)}")

    def body(nn, yy, xx, ky, kx, cc):
        iy, ix = yy * sh + ky * dh - pt, xx * sw + kx * dw - pl
        read = X[nn, iy, ix, cc]
        inside = [iy >= 0, iy < h, ix >= 0, ix < w] if any(padding) else []
        if channels > c:
            inside.append(cc < c)
        if not inside:
            return read
        outside = const(0, X.dtype) if pad_value is None else pad_value[(0,) * pad_value.ndim]
        condition = inside[0]
        for term in inside[1:]:
            condition = logical_and(condition, term)
        return if_then_else(condition, read, outside)
    return compute((n, oh, ow, kh, kw, channels), body, name=name, tag="patches")


SHORT_CHANNELS = 8      # channel runs this short are unrolled, not vectorized


@register_schedule("patches", "llvm")
def schedule_patches(s, op, target):
    """Image rows in parallel; each channel run one vector (or unrolled, where few), under one bounds
    check per tap.  The injective schedule's one flat loop divided its index apart for every byte and
    ran the channels of an RGB stem scalar: ResNet-18's 7x7 stem (1.8 MB of patches) took 5.1 ms, ~3 ns
    a byte."""
    stage = s[op]
    nn, yy, _, _, _, cc = stage.op.axis
    lanes = target.lanes(op.output(0).dtype)
    channels = cc.extent.value
    if channels >= lanes:
        _, vec = stage.split(cc, factor=lanes, tail="shift")
        stage.vectorize(vec)
    elif channels <= SHORT_CHANNELS:
        stage.unroll(cc)
    else:
        stage.vectorize(cc)
    rows = stage.fuse(nn, yy)
    if not too_little_to_share(op.output(0).shape, 1):
        stage.parallel(rows)
