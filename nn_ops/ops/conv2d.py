"""conv2d: compute definitions (NCHW in, NCHW out) and the CPU default schedules.

Three compute definitions, chosen by shape (as TVM's op strategies do); each is a
set of stages of one kernel:

* general (tag ``conv2d``), the one TVM's x86 ``conv2d_NCHWc`` uses:
  ``<name>.pad`` (zero padding through ``if_then_else`` reads, only with padding),
  ``<name>.wpack`` (W as ``[OC/bn, C/cb, KH, KW, cb, bn]``: ``bn`` output channels
  contiguous, one vector register), ``<name>.nchwc`` (the convolution into
  ``[N, OC/bn, OH, OW, bn]``) and ``<name>`` (the NCHW result, a copy of nchwc);
* 1x1, no padding, >= 32 output pixels (tag ``conv2d_1x1``): a matmul per image over
  the flattened pixels, ``<name>.pixels[n, o, p] = sum_c X[n, c, p] * W[o, c]``,
  vectorized along the pixels, which are contiguous in NCHW: no packing at all; a
  strided 1x1 first copies the pixels it reads (``<name>.subsample``, a quarter of the
  input for stride 2) so the matmul still reads contiguous rows;
* depthwise (``groups == C == OC``, tag ``conv2d_depthwise``): memory-bound, computed
  directly in NCHW;
* weights given at run time (not packed) and at most 64 output pixels (tag ``conv2d_im2col``):
  ``<name>.im2col[n, c, ky, kx, p]`` copies the input patches (padding folded in) and the
  pixels matmul reads W as it is, since packing W would cost as long as the products.

Default schedules: ``nchwc`` is register-blocked over ``owb`` output pixels of a row x
``nv`` channel vectors (computed at the output's pixel-block loop, pixels and vectors
unrolled, channels vectorized, so the block lives in vector registers), reduction
order ``c/cb, ky, kx, c%cb`` outside the block; with enough channel blocks they run in
parallel and each packs its own weights (read once from memory); the copy to NCHW is
the block's transpose.  ``pixels`` is the matmul schedule (rows of output channels x
two pixel vectors, last pixel tile shifted inwards instead of guarded).
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...dsl.expr import Const, const, if_then_else, logical_and
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from ...target import resolve_target
from .elementwise import extents
from .registry import accumulate_in_registers, accumulator_and_tile, fused_output, register_schedule


def _check(cond: bool, message: str):
    if not cond:
        raise ExprError(message)


def _pair(value, what: str, allow_zero: bool):
    if isinstance(value, bool):
        raise ExprError(f"conv2d: {what} must be an int or a pair of ints, got {value!r}")
    if isinstance(value, int):
        value = (value, value)
    if not isinstance(value, (tuple, list)) or len(value) != 2 or \
            not all(isinstance(v, int) and not isinstance(v, bool) for v in value):
        raise ExprError(f"conv2d: {what} must be an int or a pair of ints, got {value!r}")
    low = 0 if allow_zero else 1
    if any(v < low for v in value):
        raise ExprError(f"conv2d: {what} must be {'non-negative' if allow_zero else 'positive'}, got {value!r}")
    return tuple(value)


def _padding(value):
    """(top, left, bottom, right) from an int, a pair (h, w) or a 4-tuple."""
    if isinstance(value, (tuple, list)) and len(value) == 4:
        if not all(isinstance(v, int) and not isinstance(v, bool) and v >= 0 for v in value):
            raise ExprError(f"conv2d: padding must be non-negative ints, got {value!r}")
        return tuple(value)
    h, w = _pair(value, "padding (an int, a pair (h, w) or (top, left, bottom, right))", allow_zero=True)
    return (h, w, h, w)


def _const_shape(t: Tensor, what: str):
    dims = []
    for d in t.shape:
        _check(isinstance(d, Const), f"conv2d: {what} {t.name} must have a static shape, got "
                                     f"{tuple(map(str, t.shape))}")
        dims.append(int(d.value))
    return dims


def _channel_block(oc_per_group: int, lanes: int) -> int:
    """Output channels per vector block: the vector width if it divides, else the largest divisor."""
    for bn in (lanes, 16, 8, 4, 2):
        if bn <= lanes and oc_per_group % bn == 0:
            return bn
    return 1


def conv2d(X: Tensor, W: Tensor, stride=1, padding=0, dilation=1, groups: int = 1, layout: str = "NCHW",
           name: str = "conv2d") -> Tensor:
    """2-d convolution (cross-correlation, as ONNX Conv / PyTorch) of X [N, C, H, W] with W [OC, C/groups, KH, KW].

    ``stride``/``dilation``: an int or a pair (h, w); ``padding``: an int, a pair (h, w)
    or (top, left, bottom, right).  ``groups`` divides C and OC; ``groups == C`` is
    a depthwise convolution.  Returns Y [N, OC, OH, OW].
    """
    _check(layout == "NCHW", f"conv2d: layout {layout!r} is not supported; only 'NCHW' (X [N, C, H, W], "
                             f"W [OC, C/groups, KH, KW]) is")
    _check(isinstance(X, Tensor) and isinstance(W, Tensor), "conv2d takes two tensors X and W")
    _check(X.ndim == 4, f"conv2d: X must be 4-d [N, C, H, W], got shape {tuple(map(str, X.shape))}")
    _check(W.ndim in (4, 6), f"conv2d: W must be 4-d [OC, C/groups, KH, KW] (or packed by "
                             f"pack_conv2d_weight), got shape {tuple(map(str, W.shape))}")
    _check(X.dtype == W.dtype, f"conv2d of {X.dtype} and {W.dtype}; cast one side first")
    _check(isinstance(groups, int) and not isinstance(groups, bool) and groups >= 1,
           f"conv2d: groups must be a positive int, got {groups!r}")
    sh, sw = _pair(stride, "stride", allow_zero=False)
    dh, dw = _pair(dilation, "dilation", allow_zero=False)
    pt, pl, pb, pr = _padding(padding)
    n, c, h, w = _const_shape(X, "input")
    packed = W.ndim == 6
    if packed:  # [OC/bn, C/cb, KH, KW, cb, bn], from pack_conv2d_weight
        ob_, cob_, kh, kw, cb_, bn_ = _const_shape(W, "packed weight")
        oc, cg = ob_ * bn_, cob_ * cb_
    else:
        oc, cg, kh, kw = _const_shape(W, "weight")
    _check(c % groups == 0, f"conv2d: groups={groups} does not divide the input channels C={c}")
    _check(oc % groups == 0, f"conv2d: groups={groups} does not divide the output channels OC={oc}")
    _check(cg == c // groups, f"conv2d: W has {cg} input channels per group, but C={c} with groups={groups} "
                              f"needs {c // groups} (W is [OC, C/groups, KH, KW])")
    eh, ew = (kh - 1) * dh + 1, (kw - 1) * dw + 1
    hp, wp = h + pt + pb, w + pl + pr
    _check(hp >= eh and wp >= ew, f"conv2d: the (dilated) kernel {eh}x{ew} is larger than the padded input "
                                  f"{hp}x{wp}")
    oh, ow = (hp - eh) // sh + 1, (wp - ew) // sw + 1
    attrs = dict(stride=(sh, sw), padding=(pt, pl, pb, pr), dilation=(dh, dw), groups=groups,
                 kernel=(kh, kw), in_channels=c, out_channels=oc)

    Xp = _padded(X, (pt, pl, pb, pr), name)

    ocg = oc // groups
    blocks = conv2d_weight_blocks((n, c, h, w), (oc, cg, kh, kw), (sh, sw), (pt, pl, pb, pr), groups, X.dtype,
                                  dilation=(dh, dw))
    if packed:
        _check(blocks == (bn_, cb_), f"conv2d: the packed weight has blocks (oc {bn_}, c {cb_}) but this "
                                     f"convolution uses {blocks}; pack it with pack_conv2d_weight for these shapes")
    if groups == c and ocg == 1:
        # depthwise: Y[n, c, y, x] = sum_{ry, rx} Xp[n, c, y*sh + ry*dh, x*sw + rx*dw] * W[c, 0, ry, rx]
        ry = reduce_axis((0, kh), name="ry")
        rx = reduce_axis((0, kw), name="rx")
        return compute((n, oc, oh, ow),
                       lambda nn, cc, yy, xx: lw_sum(Xp[nn, cc, yy * sh + ry * dh, xx * sw + rx * dw] *
                                                     W[cc, 0, ry, rx], axis=[ry, rx]),
                       name=name, tag="conv2d_depthwise", attrs=attrs)

    if blocks is None and not (kh == kw == 1):
        # few taps per output (a stem on RGB): rows of output pixels vectorized, channels
        # register-blocked, weights broadcast as they are; no packing, no transpose to NCHW
        return _rows(Xp, W, (n, oc, oh, ow), name, attrs)

    if blocks is None:
        # a matmul per image: Y[n, :, p] = W[:, :] @ X[n, :, p] over the flattened pixels p,
        # vectorized along p (contiguous in NCHW), no packing of either operand
        Xs = X
        if (sh, sw) != (1, 1):
            Xs = compute((n, c, oh, ow), lambda nn, cc, yy, xx: X[nn, cc, yy * sh, xx * sw],
                         name=name + ".subsample", tag="conv2d.subsample")
        rc = reduce_axis((0, c), name="rc")
        Yf = compute((n, oc, oh * ow),
                     lambda nn, o, p: lw_sum(Xs[nn, rc, p // ow, p % ow] * W[o, rc, 0, 0], axis=rc),
                     name=name + ".pixels", tag="conv2d.pixels", attrs=attrs)
        return compute((n, oc, oh, ow), lambda nn, o, yy, xx: Yf[nn, o, yy * ow + xx], name=name,
                       tag="conv2d_1x1", attrs=attrs)

    if not packed and groups == 1 and _im2col_path(oh * ow):
        # weights given at run time and few output pixels: packing W would cost as long as the
        # products (3x3 512->512 @7: 0.6 of 1.8 ms), so copy the input's patches once instead
        # (c * kh * kw x pixels, the padding stage inlined into it) and run the pixels matmul on W
        # as it is
        cols = compute((n, c, kh, kw, oh * ow),
                       lambda nn, cc, ky, kx, p: Xp[nn, cc, (p // ow) * sh + ky * dh, (p % ow) * sw + kx * dw],
                       name=name + ".im2col", tag="conv2d.im2col")
        rc = reduce_axis((0, c), name="rc")
        ry = reduce_axis((0, kh), name="ry")
        rx = reduce_axis((0, kw), name="rx")
        Yf = compute((n, oc, oh * ow),
                     lambda nn, o, p: lw_sum(cols[nn, rc, ry, rx, p] * W[o, rc, ry, rx], axis=[rc, ry, rx]),
                     name=name + ".pixels", tag="conv2d.pixels", attrs=attrs)
        return compute((n, oc, oh, ow), lambda nn, o, yy, xx: Yf[nn, o, yy * ow + xx], name=name,
                       tag="conv2d_im2col", attrs=attrs)

    bn, cb = blocks
    blocks_per_group = ocg // bn
    attrs.update(oc_block=bn, ic_block=cb)
    if packed:
        Wk = W
    else:
        # W[oc, c, ry, rx] -> Wk[oc // bn, c // cb, ry, rx, c % cb, oc % bn]
        Wk = compute((oc // bn, cg // cb, kh, kw, cb, bn),
                     lambda ob, co, yy, xx, ci, oi: W[ob * bn + oi, co * cb + ci, yy, xx],
                     name=name + ".wpack", tag="conv2d.wpack")
    rco = reduce_axis((0, cg // cb), name="rco")
    ry = reduce_axis((0, kh), name="ry")
    rx = reduce_axis((0, kw), name="rx")
    rci = reduce_axis((0, cb), name="rci")

    def body(nn, ob, yy, xx, oi):
        ci = rco * cb + rci
        if groups > 1:
            ci = (ob // blocks_per_group) * cg + ci
        return lw_sum(Xp[nn, ci, yy * sh + ry * dh, xx * sw + rx * dw] * Wk[ob, rco, ry, rx, rci, oi],
                      axis=[rco, ry, rx, rci])
    Yc = compute((n, oc // bn, oh, ow, bn), body, name=name + ".nchwc", tag="conv2d.nchwc", attrs=attrs)
    return compute((n, oc, oh, ow), lambda nn, o, yy, xx: Yc[nn, o // bn, yy, xx, o % bn], name=name,
                   tag="conv2d", attrs=attrs)


def _padded(X: Tensor, padding, name: str) -> Tensor:
    """``X`` [N, C, H, W, ...] (NCHW or blocked; sizes static or symbolic) with zeros around H and W
    (``<name>.pad``, read through ``if_then_else``; padding is top, left, bottom, right), or ``X``
    itself without padding."""
    pt, pl, pb, pr = padding
    if not (pt or pl or pb or pr):
        return X
    shape = extents(X)
    h, w = shape[2], shape[3]
    new = list(shape)
    new[2], new[3] = h + pt + pb, w + pl + pr

    def pad(nn, c, yy, xx, *ci):
        inside = logical_and(logical_and(yy >= pt, yy < pt + h), logical_and(xx >= pl, xx < pl + w))
        return if_then_else(inside, X[(nn, c, yy - pt, xx - pl) + ci], const(0.0, X.dtype))
    return compute(tuple(new), pad, name=name + ".pad", tag="conv2d.pad")


def _output_hw(h, w, kernel, stride, padding, dilation):
    """Output height and width of a convolution (padding is top, left, bottom, right)."""
    (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw) = kernel, stride, padding, dilation
    return (h + pt + pb - ((kh - 1) * dh + 1)) // sh + 1, (w + pl + pr - ((kw - 1) * dw + 1)) // sw + 1


def _rows(Xp: Tensor, W: Tensor, out_shape, name: str, attrs: dict) -> Tensor:
    """The row path's compute: ``Y[n, o, y, x] = sum Xp[n, c, y*sh + ky*dh, x*sw + kx*dw] * W[o, c, ky, kx]``
    over the (padded) input ``Xp``, ``c`` in output channel ``o``'s group; scheduled by
    ``schedule_conv2d_rows``."""
    (sh, sw), (dh, dw) = attrs["stride"], attrs["dilation"]
    oc, cg, kh, kw = (int(d.value) for d in W.shape)
    per_group = oc // attrs["groups"]
    rc = reduce_axis((0, cg), name="rc")
    ry = reduce_axis((0, kh), name="ry")
    rx = reduce_axis((0, kw), name="rx")

    def body(nn, o, yy, xx):
        c = rc if attrs["groups"] == 1 else (o // per_group) * cg + rc
        return lw_sum(Xp[nn, c, yy * sh + ry * dh, xx * sw + rx * dw] * W[o, rc, ry, rx], axis=[rc, ry, rx])
    return compute(out_shape, body, name=name, tag="conv2d_rows", attrs=attrs)


def conv2d_rows(X: Tensor, W: Tensor, bias=None, stride=1, padding=0, dilation=1, groups: int = 1,
                name: str = "conv2d") -> Tensor:
    """Y [N, OC, OH, OW] = conv(X, W) (+ bias [OC]) of NCHW ``X`` whose batch, height and width may be
    symbolic, as the row path (output rows vectorized, a few output channels register-blocked,
    ``W`` [OC, C/groups, KH, KW] broadcast as it lies): for convolutions with fewer output channels
    than ``FEW_CHANNELS`` (an image's 3 at the end of a style net), or groups of few channels (1 in
    and 3 out each), on maps of any size, where channel blocks would be mostly padding."""
    sh, sw = _pair(stride, "stride", allow_zero=False)
    dh, dw = _pair(dilation, "dilation", allow_zero=False)
    pt, pl, pb, pr = _padding(padding)
    _check(X.ndim == 4 and W.ndim == 4, f"conv2d_rows: X and W must be 4-d, got {X.ndim} and {W.ndim}")
    n, c, h, w = X.shape
    oc, cg, kh, kw = _const_shape(W, "weight")
    _check(isinstance(c, Const) and int(c.value) == cg * groups and oc % groups == 0,
           f"conv2d_rows: X has {c} channels and W [OC, C/groups, KH, KW] {oc} x {cg} in {groups} groups")
    attrs = dict(stride=(sh, sw), padding=(pt, pl, pb, pr), dilation=(dh, dw), groups=groups, kernel=(kh, kw),
                 in_channels=cg * groups, out_channels=oc)
    oh, ow = _output_hw(h, w, (kh, kw), (sh, sw), (pt, pl, pb, pr), (dh, dw))
    Y = _rows(_padded(X, (pt, pl, pb, pr), name), W, (n, oc, oh, ow), name, attrs)
    if bias is None:
        return Y
    return compute(Y.shape, lambda nn, o, yy, xx: Y[nn, o, yy, xx] + bias[o], name=name + ".bias", tag="elemwise")


def conv2d_weight_blocks(x_shape, w_shape, stride, padding, groups: int, dtype: str = "float32",
                         dilation=(1, 1)):
    """(output-channel block, input-channel block) of the packed-weight (NCHWc) path, or None.

    None when conv2d takes its depthwise or 1x1 path, which read W as it is.
    """
    n, c, h, w = x_shape
    oc, cg, kh, kw = w_shape
    if groups == c and oc // groups == 1:
        return None
    sh, sw = stride
    if kh == kw == 1 and groups == 1 and not any(padding):
        if _pixels_path(((h - 1) // sh + 1) * ((w - 1) // sw + 1)):
            return None
    ow = (w + padding[1] + padding[3] - (kw - 1) * dilation[1] - 1) // sw + 1
    bn = _channel_block(oc // groups, resolve_target("llvm").lanes(dtype))
    if groups == 1 and (_rows_path(cg * kh * kw, ow) or (bn < FEW_CHANNELS and ow >= 16)):
        return None
    return bn, _divisor_at_most(cg, 8)


def pack_conv2d_weight(weight: np.ndarray, blocks) -> np.ndarray:
    """W [OC, C/groups, KH, KW] -> [OC/bn, C/cb, KH, KW, cb, bn], the layout the NCHWc path reads.

    For constant weights (a network's), packing once at compile time saves re-packing them
    on every call.
    """
    bn, cb = blocks
    oc, cg, kh, kw = weight.shape
    packed = weight.reshape(oc // bn, bn, cg // cb, cb, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(packed)


def _pixels_path(pixels: int) -> bool:
    """Whether a 1x1 convolution with ``pixels`` output pixels runs as the pixels matmul.

    Measured on the ResNet-18 / MobileNetV2 layers (benchmarks/conv2d.py, 2 threads): with
    weights given at run time the pixels path needs no weight packing and no transpose to NCHW,
    and wins down to 7x7 maps, strided or not (49 pixels: 0.56-0.91 -> 0.97-1.08 of
    onnxruntime; the strided copy is a small fraction of the input).
    """
    return pixels >= 32


def _im2col_path(pixels: int) -> bool:
    """Whether a convolution with run-time weights and ``pixels`` output pixels runs as im2col +
    the pixels matmul rather than packing its weights.

    Measured (2 threads, ResNet-18's 7x7 outputs): 3x3 512->512 @7 1.89 -> 1.16 ms, 3x3/2
    256->512 @14 1.06 -> 0.74 ms; at 14x14 outputs (196 pixels) packing wins (1.22 vs 1.35 ms).
    The register block then spans every pixel (four vectors), so no patch is loaded twice."""
    return pixels <= 64


#: fewer output channels per vector block than this (3 of an image, 21 classes of a segmentation
#: head: blocks of 1) take the row path whatever their taps: the blocked path's vectors would hold
#: one channel, scalar code (the fast neural style net's last 9x9 conv, 32 -> 3 at 256x256: 29.8 ms;
#: re-measure: ``python -m benchmarks.network --models style_transfer``)
FEW_CHANNELS = 4


def _rows_path(taps: int, ow: int) -> bool:
    """Whether a convolution with ``taps`` = C * KH * KW products per output runs as vector rows.

    With few taps the channel-blocked path spends as long on its transpose to NCHW as on
    the products (MobileNetV2's 3x3 stem on RGB, 27 taps: 0.64 of onnxruntime)."""
    return taps <= 32 and ow >= 16


# ------------------------------------------------------------------ schedule

def _channel_rows(channels: int, limit: int):
    """(output channels per register block, split tail) of the pixels matmul: the largest divisor of
    ``channels`` up to ``limit``, unless that is under half the limit (58 channels: 2), then blocks of
    even size with the last one shifted inwards.  ShuffleNetV2's 1x1 convs (58 -> 58 at 28x28, 116 ->
    116 at 14x14; 2 threads, Zen 5, standalone) ran 85 -> 18 us and 27 -> 17 us."""
    rows = _divisor_at_most(channels, limit)
    if 2 * rows >= limit or channels <= limit:
        return rows, "guard"
    blocks = -(-channels // limit)
    return -(-channels // blocks), "shift"


def matmul_channel_rows(npv: int, registers: int) -> int:
    """At most this many output channels in a register block of the pixels matmul with ``npv`` pixel
    vectors: 28 accumulators (16 rows of one vector), and the block's accumulators, its ``npv``
    input vectors and one broadcast weight must fit the ``registers``.  AVX2's 16 registers took
    8 x 2 blocks that spilled their accumulators (MobileNetV2's lone 1x1 layers on NCHW at 39-67 %
    of the 256-bit FMA peak, Zen 5, one thread, CPU time); re-measure: ``python -m benchmarks.conv2d
    --only "mv2 1x1" --target "llvm -mcpu=x86-64-v3"``."""
    return max(1, min(28 // npv if npv > 1 else 16, (registers - 1 - npv) // npv))


def pixels_matmul_vectors(pixels: int, lanes: int) -> int:
    """Pixel vectors per register block of a 1x1 conv's pixels matmul over ``pixels`` output pixels."""
    return 2 if pixels >= 2 * lanes else 1


def im2col_pixel_vectors(spanning: int, registers: int) -> int:
    """Pixel vectors per register block of the im2col matmul whose patches are ``spanning`` vectors:
    of the counts whose block keeps ``MIN_ACCUMULATORS``, the one with the fewest loads per FMA (pixel
    vectors + broadcast weights over accumulators).  On 32 registers that is all of them (each weight
    read once); AVX2's 16 cannot span 49 pixels (7 vectors leave one channel row): 3 x 4 blocks ran
    ResNet-18's run-time-weight 7x7 layers 1.74x faster than 7 x 1 and 1.10x than 7 x 4, which
    spilled (x86-64-v3 code on Zen 5, one thread, CPU time under load); re-measure:
    ``python -m benchmarks.conv2d --weights input --only 512 --target "llvm -mcpu=x86-64-v3"``."""
    def loads_per_fma(v):
        rows = matmul_channel_rows(v, registers)
        return (v + rows) / (v * rows)
    fitting = [v for v in range(1, spanning + 1) if v * matmul_channel_rows(v, registers) >= MIN_ACCUMULATORS]
    return min(fitting or [spanning], key=lambda v: (loads_per_fma(v), -v))


def _divisor_at_most(n: int, limit: int) -> int:
    for d in range(min(n, limit), 0, -1):
        if n % d == 0:
            return d
    return 1


def _row_block(ow: int, limit: int) -> int:
    """Output pixels per register block: a divisor of the row, as large as fits."""
    return _divisor_at_most(ow, limit)


def pixels_per_block(nv: int, registers: Optional[int] = None) -> int:
    """At most this many output pixels in a register block of ``nv`` channel vectors: 28
    accumulators in all (14 pixels for one vector), and the block's accumulators, its ``nv``
    weight vectors and one broadcast input must fit the ``registers`` (the target's vector
    registers; by default those of the CPU being compiled for).  4 x 7 did not fit 32: ResNet-18's
    stem (3 -> 64 channels at 112x112, 4 vectors) spilled, and 4 x 4 ran 1.19x faster (Zen 5,
    interleaved; the autoscheduler found it first, 1.13x side by side).  With AVX2's 16 registers
    blocks of 2 x 14 kept their accumulators in memory: 2 x 4 ran 1.5x faster on 3x3 and 1x1
    layers at 28-56 pixels (AVX2 code on a Zen 5, one thread)."""
    if registers is None:
        registers = resolve_target("llvm").vector_registers
    limit = 28 // nv if nv > 1 else 14
    return min(limit, (registers - 1 - nv) // nv)


#: a register block's fixed cost per row segment, in pixels' worth of work (the weight vectors it
#: loads per input channel and tap); ``static_row_block`` weighs blocks with it
ROW_BLOCK_OVERHEAD = 2


#: accumulators a register block needs to keep the FMA units busy: an FMA's latency (4 cycles on
#: the x86 cores of the last decade) times the FMAs issued per cycle (2)
MIN_ACCUMULATORS = 8


def static_row_block(width: int, limit: int, vectors: int = 0):
    """(pixels, tail) of the register blocks on a row of ``width`` pixels (at most ``limit``): a
    divisor of the row (``"guard"``: no tail), unless blocks of another size with the last one
    shifted inwards to end at the row's end (``"shift"``: it recomputes a few pixels of the block
    before) cost less by a quarter (a block costs its pixels + ``ROW_BLOCK_OVERHEAD``). Prime widths
    had blocks of one pixel: the 64-channel 3x3 at 23x23 ran at 117 GFLOPS, shifted blocks of 12 at
    344 (the 1x1 256->256 there 143 -> 474, at 29x29 145 -> 336; 2 threads, one process). Not for
    less: with a margin of a tenth SqueezeNet's stem (111 wide, 4 channel vectors) went from blocks
    of 3 to shifted blocks of 6 and ran 1.17x slower (the cost does not see register pressure).  Both
    the blocked convs (``nchwc.py``) and the NCHW one (``schedule_conv2d``) take their blocks here.
    ``vectors``: accumulator vectors per pixel, where known; a block with fewer than
    ``MIN_ACCUMULATORS`` leaves FMA units idle, and costs that much more (AVX2's 16 registers
    allow 2 x 6 pixels: a row of 14 took blocks of 2 at 64 GFLOPS, shifted blocks of 5 ran at 113).
    A divisor block of several vectors with no more than ``MIN_ACCUMULATORS`` has no latency to
    spare, and any cheaper shifted block wins (AVX2 code on Zen 5, rows of 28: 2 x 6 shifted
    1.06x 2 x 4 on ResNet-18's stride-2 layers; 112: the 7x7 stem 1.13x; one thread, CPU time)."""
    def cost(pixels):
        idle = max(1.0, MIN_ACCUMULATORS / (vectors * pixels)) if vectors else 1.0
        return -(-width // pixels) * (pixels + ROW_BLOCK_OVERHEAD) * idle
    divisor = _row_block(width, limit)
    shifted = min(range(1, min(limit, width) + 1), key=lambda p: (cost(p), -p))
    margin = 1.0 if vectors >= 2 and vectors * divisor <= MIN_ACCUMULATORS else 0.75
    if cost(shifted) < margin * cost(divisor):
        return shifted, "shift"
    return divisor, "guard"


def _epilogue_or_self(s, op):
    """The stage to tile: ``op`` (the NCHW copy-out), or the fused elementwise output it feeds,
    with the copy-out inlined into it (see ``registry.fused_output``)."""
    Y = fused_output(s, op)
    if Y is not s[op]:
        s[op].compute_inline()
    return Y


@register_schedule("conv2d", "llvm")
def schedule_conv2d(s, op, target):
    out = op.outputs[0]
    Yc = op.input_tensors[0]
    Xp, Wk = Yc.op.input_tensors[0], Yc.op.input_tensors[1]
    packs_weights = getattr(Wk.op, "tag", "") == "conv2d.wpack"
    bn = op.attrs["oc_block"]
    n_, oc_, oh_, ow_ = [int(d.value) for d in out.shape]
    lanes = target.lanes(out.dtype)
    # register block: owb pixels x nv channel vectors
    nv = 2 if (oc_ // bn) % 2 == 0 and bn == lanes else 1
    owb, tail = static_row_block(ow_, pixels_per_block(nv, target.vector_registers), vectors=nv)
    Y = _epilogue_or_self(s, op)
    n, o, y, x = Y.op.axis
    oo, oi = Y.split(o, factor=bn * nv)
    xo, xi = Y.split(x, factor=owb, tail=tail)
    Y.reorder(n, oo, y, xo, oi, xi)
    blocks = n_ * (oc_ // (bn * nv))
    # enough channel blocks to share out: run them in parallel and pack each block's
    # weights inside it (read once from memory, used from cache); else rows too, weights at root
    per_block = blocks >= 4 * max(1, target.num_threads)
    if per_block:
        fused = Y.fuse(n, oo)
    else:
        fused = Y.fuse(n, oo, y)
    Y.parallel(fused)
    cn, cob, cy, cx, coi = s[Yc].op.axis
    rco, ry, rx, rci = s[Yc].op.reduce_axis
    accumulate_in_registers(s, Yc, Y, xo, (cn, cy, rco, ry, rx, rci, cx, cob, coi), (cob, cx))
    # weights given in NCHW[c] layout: packed per channel block, or once at root
    if packs_weights:
        W = s[Wk]
        wo, wco, wy, wx, wci, wi = W.op.axis
        if per_block:
            W.compute_at(Y, fused)
        else:
            W.parallel(wo)
        W.vectorize(wi)
    _schedule_input_copy(s, Xp, lanes)


def _schedule_input_copy(s, tensor, lanes: int) -> None:
    """An input copy (a padding stage, or a strided 1x1's ``subsample``) is computed at root:
    rows in parallel (a stem has only 3 planes), each row in the widest vectors it holds
    (masked loads at the padding's borders, strided loads for a subsample); an im2col patch
    copy: input channels in parallel, the padding read through (inlined)."""
    tag = getattr(tensor.op, "tag", "")
    if tag == "conv2d.im2col":
        s[tensor].parallel(s[tensor].op.axis[1])
        for t in tensor.op.input_tensors:
            if getattr(t.op, "tag", "") == "conv2d.pad":
                s[t].compute_inline()
        return
    if tag not in ("conv2d.pad", "conv2d.subsample"):
        return
    P = s[tensor]
    pn, pc, py, px = P.op.axis
    P.parallel(P.fuse(pn, pc, py))
    width = tensor.shape[3].value if isinstance(tensor.shape[3], Const) else lanes   # symbolic: guarded tail
    vec = next((v for v in (lanes, 8, 4) if v <= width), 1)
    if vec > 1:
        _, pxi = P.split(px, factor=vec)
        P.vectorize(pxi)


@register_schedule("conv2d_depthwise", "llvm")
def schedule_conv2d_depthwise(s, op, target):
    """Planes in parallel; per output row, vectors of output pixels accumulate the taps in registers.

    The loop order is ``plane, row, pixel vector, ky, kx, lanes``: each tap is one (for
    stride 2, a wide load and a shuffle) vector FMA into the block's accumulator.  The
    padded plane is computed per plane, inside the parallel loop (it stays in cache).
    """
    out = op.outputs[0]
    ow_ = int(out.shape[3].value)
    # the widest vector a row fills (narrow rows of late layers: 8 or 4 lanes, not scalar code)
    lanes = next((v for v in (target.lanes(out.dtype), 8, 4) if v <= ow_), 1)
    Y = fused_output(s, op)
    n, c, y, x = Y.op.axis
    plane = Y.fuse(n, c)
    Y.parallel(plane)
    vector = lanes > 1
    if vector:
        # full vectors for the last tile where the stage may recompute (an epilogue, not the reduction)
        xo, xi = Y.split(x, factor=lanes, tail="shift" if ow_ % lanes and Y is not s[op] else "guard")
        Y.vectorize(xi)
    conv = s[op]
    if Y is not conv:       # fused epilogue: the accumulator block is computed inside its pixel vector
        if vector:
            conv.compute_at(Y, xo)
            cn, cc, cy, cx = conv.op.axis
            ry, rx = conv.op.reduce_axis
            conv.reorder(cn, cc, cy, ry, rx, cx)
            conv.vectorize(cx)
        else:
            conv.compute_at(Y, plane)
    elif vector:
        ry, rx = conv.op.reduce_axis
        conv.reorder(plane, y, xo, ry, rx, xi)
    for t in op.input_tensors:
        if getattr(t.op, "tag", "") == "conv2d.pad":
            P = s[t]
            P.compute_at(Y, plane)
            px = P.op.axis[3]
            if vector and int(t.shape[3].value) >= lanes:
                _, pxi = P.split(px, factor=lanes)
                P.vectorize(pxi)


@register_schedule("conv2d_rows", "llvm")
def schedule_conv2d_rows(s, op, target):
    """Register block of mr output channels x two pixel vectors of a row; taps outside, strided
    vector reads of the (padded) input, weights broadcast.  Rows of symbolic width (``conv2d_rows``
    on a shape-polymorphic map): blocks of two vectors, the row's last one partial and masked in
    registers (``pad_tails``), rows in parallel (an axis of symbolic extent is not fused)."""
    out = op.outputs[0]
    oc_ = int(out.shape[1].value)
    lanes = target.lanes(out.dtype)
    if not isinstance(out.shape[3], Const):
        mr = _divisor_at_most(oc_, min(8, matmul_channel_rows(2, target.vector_registers)))
        acc, Y = accumulator_and_tile(s, op)
        n, o, y, x = Y.op.axis
        xo, xi = Y.split(x, factor=2 * lanes, tail="guard")
        oo, oi = Y.split(o, factor=mr)
        Y.reorder(n, y, oo, xo, oi, xi)
        Y.parallel(y)
        Y.vectorize(xi)
        Y.pragma(xo, "pad_tails")                   # (lowering/passes/pad_tail_tiles.py)
        cn, co, cy, cx = s[acc].op.axis
        accumulate_in_registers(s, acc, Y, xo, (cn, cy, *s[acc].op.reduce_axis, co, cx), (co,))
        _schedule_input_copy(s, op.input_tensors[0], lanes)
        return
    ow_ = int(out.shape[3].value)
    npv = 2 if ow_ >= 2 * lanes else 1
    mr = _divisor_at_most(oc_, min(8 if npv > 1 else 16, matmul_channel_rows(npv, target.vector_registers)))
    acc, Y = accumulator_and_tile(s, op)
    n, o, y, x = Y.op.axis
    tile = lanes * npv
    xo, xi = Y.split(x, factor=tile, tail="shift" if ow_ % tile else "guard")
    oo, oi = Y.split(o, factor=mr)
    Y.reorder(n, oo, y, xo, oi, xi)
    Y.parallel(Y.fuse(n, oo, y))
    xiv, xil = Y.split(xi, factor=lanes)
    Y.vectorize(xil)
    s[acc].compute_at(Y, xo)
    cn, co, cy, cx = s[acc].op.axis
    rc, ry, rx = s[acc].op.reduce_axis
    cxv, cxl = s[acc].split(cx, factor=lanes)
    s[acc].reorder(cn, cy, rc, ry, rx, co, cxv, cxl)
    s[acc].unroll(co)
    s[acc].unroll(cxv)
    s[acc].vectorize(cxl)
    _schedule_input_copy(s, op.input_tensors[0], lanes)


@register_schedule("conv2d_1x1", "llvm")
@register_schedule("conv2d_im2col", "llvm")
def schedule_conv2d_1x1(s, op, target):
    """Register-blocked matmul over flattened pixels: mr output channels x npv pixel vectors.

    For the 1x1 form the pixels are the input's (or its subsample's); for im2col they are the
    patch copy's, and a block spans all of them (at most four vectors)."""
    out = op.outputs[0]
    Yf = op.input_tensors[0]
    n_, oc_, oh_, ow_ = [int(d.value) for d in out.shape]
    lanes = target.lanes(out.dtype)
    pixels = oh_ * ow_
    if op.tag == "conv2d_im2col":
        npv = im2col_pixel_vectors(-(-pixels // lanes), target.vector_registers)
    else:
        npv = pixels_matmul_vectors(pixels, lanes)
    mr, channel_tail = _channel_rows(oc_, matmul_channel_rows(npv, target.vector_registers))
    Y = _epilogue_or_self(s, op)
    n, o, y, x = Y.op.axis
    p = Y.fuse(y, x)
    tile = lanes * npv
    po, pi = Y.split(p, factor=tile, tail="shift" if pixels % tile else "guard")
    oo, oi = Y.split(o, factor=mr, tail=channel_tail)
    c_ = int(np.prod([int(r.extent.value) for r in Yf.op.reduce_axis]))
    if c_ * pixels * 4 <= (1 << 20) and oc_ * pixels * 4 <= (1 << 20):
        # input and output fit in cache: sweep the input once per channel block, writing few
        # rows at a time
        Y.reorder(n, oo, po, oi, pi)
        at = Y.fuse(n, oo, po)
        Y.parallel(at)
    else:
        # a pixel tile of every input channel stays in cache for all channel blocks, and the
        # output is written once, tile by tile (an output larger than L2 written channel block by
        # channel block was 1.2-1.3x slower: MobileNetV2's 16->96 @112, 24->144 @56)
        Y.reorder(n, po, oo, oi, pi)
        Y.parallel(Y.fuse(n, po))
        at = oo
    piv, pil = Y.split(pi, factor=lanes)
    Y.vectorize(pil)
    s[Yf].compute_at(Y, at)
    cn, co, cp = s[Yf].op.axis
    cpv, cpl = s[Yf].split(cp, factor=lanes)
    s[Yf].reorder(cn, *s[Yf].op.reduce_axis, co, cpv, cpl)
    s[Yf].unroll(co)
    s[Yf].unroll(cpv)
    s[Yf].vectorize(cpl)
    _schedule_input_copy(s, Yf.op.input_tensors[0], lanes)

