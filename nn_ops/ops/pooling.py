"""2-d pooling (max / average, with padding, strides, dilation, ceil mode) and global pooling, NCHW.

Each is one reduction over the window, tagged ``"pool"``; padded reads are guarded with
``if_then_else`` (bound inference keeps them exact).  Average pooling multiplies each
read by the reciprocal of its window's count (``window_reciprocal``), so it stays a single stage.
"""
from __future__ import annotations

import math
from typing import Sequence

import numpy as np

from ...dsl import dtypes
from ...dsl.expr import as_expr, cast, const, if_then_else, logical_and
from ...dsl.intrinsics import elementwise_max, elementwise_min
from ...dsl.reduction import argmax as lw_argmax, max as lw_max, sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import DTypeError, ExprError
from .elementwise import extents, static_shape
from .registry import constant_divisor_prefix, register_schedule


def pool_output_size(size, k: int, stride: int, pad_lo: int, pad_hi: int, dilation: int, ceil_mode: bool):
    """The output size of a pool; ``size`` an int, or a symbolic size (an expression) where ceil mode
    never drops a last window (``ceil_mode_is_plain``)."""
    eff = dilation * (k - 1) + 1
    span = size + pad_lo + pad_hi - eff
    if not isinstance(size, int):
        return ((span + stride - 1) if ceil_mode else span) // stride + 1
    out = (math.ceil(span / stride) if ceil_mode else span // stride) + 1
    if ceil_mode and (out - 1) * stride >= size + pad_lo:
        out -= 1    # the last window must start inside the input or left padding
    return out


def ceil_mode_is_plain(k: int, stride: int, pad_hi: int, dilation: int) -> bool:
    """Whether a ceil-mode pool's last window always starts inside the input or its left padding, at
    every size (so its output size is a plain ceiling): the last start is below
    ``size + pad_lo + pad_hi - eff + stride``, at most ``size + pad_lo`` when ``pad_hi + stride <= eff``
    (SqueezeNet's 3x3 stride-2 pools without padding)."""
    return pad_hi + stride <= dilation * (k - 1) + 1


def pool2d(X: Tensor, kernel: Sequence[int], stride: Sequence[int] = (1, 1), padding: Sequence[int] = (0, 0, 0, 0),
           dilation: Sequence[int] = (1, 1), pool_type: str = "max", count_include_pad: bool = False,
           ceil_mode: bool = False, name: str = "pool", with_indices: bool = False,
           column_major: bool = False) -> Tensor:
    """Pool an NCHW tensor; ``padding`` is (top, left, bottom, right) as in ONNX.  With
    ``with_indices`` a max pool returns, instead of the maxima, their int64 positions in X
    flattened row-major, or column-major within each plane (ONNX MaxPool's Indices output
    and its ``storage_order``).  Sizes may be symbolic (a shape-polymorphic kernel's) where ceil
    mode never drops a last window (``ceil_mode_is_plain``)."""
    if len(X.shape) != 4:
        raise ExprError(f"pool2d takes an NCHW tensor, got shape {extents(X)}")
    if pool_type not in ("max", "avg"):
        raise ExprError(f"pool_type must be 'max' or 'avg', got {pool_type!r}")
    N, C, H, W = extents(X)
    kh, kw = kernel
    sh, sw = stride
    pt, pl, pb, pr = padding
    dh, dw = dilation
    if ceil_mode and not (isinstance(H, int) and isinstance(W, int)) and not (
            ceil_mode_is_plain(kh, sh, pb, dh) and ceil_mode_is_plain(kw, sw, pr, dw)):
        raise ExprError("pool2d: ceil_mode on a map of symbolic size whose last window may start in the right "
                        "padding")
    OH = pool_output_size(H, kh, sh, pt, pb, dh, ceil_mode)
    OW = pool_output_size(W, kw, sw, pl, pr, dw, ceil_mode)
    rh = reduce_axis((0, kh), name="rh")
    rw = reduce_axis((0, kw), name="rw")
    dtype = X.dtype
    padded = (pt or pl or pb or pr) or ceil_mode

    def read(n, c, oh, ow, fill):
        h = oh * sh - pt + rh * dh
        w = ow * sw - pl + rw * dw
        if not padded:
            return X[n, c, h, w]
        inside = logical_and(logical_and(h >= 0, h < H), logical_and(w >= 0, w < W))
        return if_then_else(inside, X[n, c, h, w], const(fill, dtype))

    lowest = float("-inf") if dtypes.is_float(dtype) else int(np.iinfo(dtype).min)   # padding never wins
    if pool_type == "max" and with_indices:
        # the first largest value in window order, and its row-major position in X (ONNX's Indices)
        def position(n, c, oh, ow):
            h, w = oh * sh - pt + rh * dh, ow * sw - pl + rw * dw
            plane = (n * C + c) * (H * W)
            return plane + (w * H + h if column_major else h * W + w)
        pair = compute((N, C, OH, OW), lambda n, c, oh, ow: lw_argmax(
            (position(n, c, oh, ow), read(n, c, oh, ow, lowest)), axis=[rh, rw]), name=name + ".pair", tag="reduce")
        return compute((N, C, OH, OW), lambda *i: pair[0][i], name=name, tag="injective")
    if pool_type == "max":
        return compute((N, C, OH, OW), lambda n, c, oh, ow: lw_max(read(n, c, oh, ow, lowest), axis=[rh, rw]),
                       name=name, tag="pool")

    def inverse_count(oh, ow):
        return window_reciprocal(oh, ow, (H, W), kernel, stride, padding, dilation, count_include_pad, ceil_mode, dtype)

    return compute((N, C, OH, OW),
                   lambda n, c, oh, ow: lw_sum(read(n, c, oh, ow, 0.0) * inverse_count(oh, ow), axis=[rh, rw]),
                   name=name, tag="pool")


def window_reciprocal(oh, ow, size, kernel, stride, padding, dilation, count_include_pad: bool, ceil_mode: bool,
                      dtype: str):
    """1 / (the values an average pool's window at output (oh, ow) divides by): its taps inside the
    map (``count_include_pad``: inside the padded map), or all of them where nothing is padded.  It
    depends on the output position only, so the window's loops multiply by it (LLVM hoists it out of
    them): the division per tap before made Inception's 3x3 pools of 768 channels at 17x17 take 257 us."""
    if not dtypes.is_float(dtype):
        raise DTypeError(f"average pooling takes a float tensor, got {dtype}; cast it first")
    H, W = size
    kh, kw = kernel
    sh, sw = stride
    pt, pl, pb, pr = padding
    dh, dw = dilation
    one = const(1.0, dtype)
    if not ceil_mode and (count_include_pad or not any(padding)):     # every window whole
        return const(1.0 / (kh * kw), dtype)
    hs, ws = oh * sh - pt, ow * sw - pl
    if count_include_pad:
        he = elementwise_min(hs + (kh - 1) * dh + 1, as_expr(H + pb, "int64"))
        we = elementwise_min(ws + (kw - 1) * dw + 1, as_expr(W + pr, "int64"))
        return one / cast(dtype, ((he - hs + dh - 1) // dh) * ((we - ws + dw - 1) // dw))
    # valid taps: h in [0, H) among oh*sh - pt + r*dh, r < kh
    rh_lo = elementwise_max((-hs + dh - 1) // dh, const(0, "int64"))
    rh_hi = elementwise_min((H - 1 - hs) // dh + 1, const(kh, "int64"))
    rw_lo = elementwise_max((-ws + dw - 1) // dw, const(0, "int64"))
    rw_hi = elementwise_min((W - 1 - ws) // dw + 1, const(kw, "int64"))
    return one / cast(dtype, elementwise_max(rh_hi - rh_lo, const(1, "int64")) *
                      elementwise_max(rw_hi - rw_lo, const(1, "int64")))


def global_pool(X: Tensor, pool_type: str = "avg", name: str = "global_pool") -> Tensor:
    """Pool each (n, c) plane of an NCHW tensor to one value: output shape (N, C, 1, 1).  Sizes may
    be symbolic (a mean then divides by the plane's size computed per call)."""
    shape = extents(X)
    if len(shape) < 3:
        raise ExprError(f"global_pool takes an N, C, spatial... tensor, got shape {shape}")
    N, C = shape[:2]
    spatial = shape[2:]
    axes = [reduce_axis((0, s), name=f"r{k}") for k, s in enumerate(spatial)]
    ones = (1,) * len(spatial)
    if pool_type == "max":
        return compute((N, C) + ones, lambda n, c, *_: lw_max(X[(n, c) + tuple(axes)], axis=axes),
                       name=name, tag="global_pool")
    count = math.prod(spatial)
    inv = const(1.0 / max(1, count), X.dtype) if isinstance(count, int) else \
        const(1.0, X.dtype) / cast(X.dtype, count)
    return compute((N, C) + ones, lambda n, c, *_: lw_sum(X[(n, c) + tuple(axes)] * inv, axis=axes),
                   name=name, tag="global_pool")


def _schedule_parallel_outer(s, op, target, keep_inner: int):
    """Fuse all spatial axes but the last ``keep_inner`` into one parallel loop."""
    stage = s[op]
    axes = list(op.axis)
    outer = axes[:len(axes) - keep_inner] if keep_inner else axes
    outer = outer[:constant_divisor_prefix(outer)]      # symbolic extents: no division by a run-time size
    if len(outer) > 1:
        fused = stage.fuse(*outer)
    elif outer:
        fused = outer[0]
    else:
        return
    stage.parallel(fused)


@register_schedule("pool", "llvm")
def schedule_pool(s, op, target):
    """Parallel over (n, c, oh); the window and ow loops run inside."""
    _schedule_parallel_outer(s, op, target, keep_inner=1)


@register_schedule("global_pool", "llvm")
def schedule_global_pool(s, op, target):
    """Parallel over (n, c) planes; each plane is reduced by one thread."""
    _schedule_parallel_outer(s, op, target, keep_inner=len(op.axis) - 2)
