"""Direct int8 convolution with its requantization: a quantized layer (QLinearConv, or a QDQ conv)
as one kernel, uint8 (or int8) in, uint8 (or int8) out.

``Y = saturate(round(float64(acc) * multiplier[o] + y_zero_point))``, ``acc = D + bias[o]`` in int32 (in
float32 where the multiplier is float32: a QDQ conv's, whose reference is float32 arithmetic),
``D = sum_{c, ky, kx} x_u[c, iy, ix] * w_s[o, c, ky, kx]``: the input read as uint8 (an int8 input + 128)
and padded with its own zero point, the weight as int8 (a uint8 weight - 128).  The importer folds the
zero points into ``bias`` (``sum (x - zx) w_s = D - (zx + 128 [int8 x]) * sum w_s``: a constant per output
channel), so the product is exact and the epilogue is ONNX's reference requantization to the bit (saturated
after the rounding, in int32, where the importer proved every sum rounds into int32: ``int32_range``).
The float32 requantization differs from it by one step at most, and only where the float64 value lies
within about ``2**-22`` of its magnitude from a rounding half (float32 roundings of ``acc``, of the
multiplier and of the multiply-add), with half the conversions and multiply-adds.

Two forms (ops of the graph's ``qconv2d`` and ``qconv2d_blocked``), and two of the depthwise conv
(``qdepthwise``, ``qdepthwise_blocked``: ``depthwise_u8s8*``, whose bias is QLinearConv's own, the input's
zero point taken off each value):

* ``conv2d_u8s8`` on NCHW, the int8 weight [OC, C, KH, KW] widened to int32: correct anywhere, not
  fast (the graph's layout pass replaces it on CPUs);
* ``conv2d_u8s8_blocked`` on the blocked layout NCHW[b]c of ``nchwc.py`` (uint8 blocks of ``cb``
  channels, ``cb`` a multiple of 4), the weight packed once (``pack_conv_words``) in words of four
  input channels for ``dot4_u8s8`` (one ``vpdpbusd`` per ``b`` output channels with VNNI), or of two
  widened to int16 for ``dot2_i16`` (``pmaddwd``: x86 without VNNI); the register-blocked schedule of
  the float blocked conv (``nchwc.schedule_conv2d_blocked``), the requantization in its epilogue, the
  result the next layer's blocks.
"""
from __future__ import annotations

import numpy as np

from ...dsl.expr import cast, const, if_then_else, logical_and
from ...dsl.intrinsics import dot2_i16, dot4_u8s8
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .conv2d import _output_hw
from .elementwise import extents, static_shape
from .int8_matmul import pairs_of_words, word_of
from .nchwc import _blocked_dims, depthwise_blocked, pack_blocked_weight, schedule_conv2d_blocked
from .quantize import INT32_SAFE, saturated
from .registry import register_schedule


def pack_conv_words(weight: np.ndarray, in_block: int, out_block: int, pairs: bool = False) -> np.ndarray:
    """int8 W [OC, C, KH, KW] -> int32 words [OC/b, C/cb, KH, KW, cb/4, b]: word ``[.., w, o]`` holds
    input channels ``4 w .. 4 w + 3`` of the block in its bytes (little-endian); with ``pairs``,
    [OC/b, C/cb, KH, KW, cb/2, b], channels ``2 p``, ``2 p + 1`` as int16 halves (``dot2_i16``)."""
    if weight.dtype != np.int8 or weight.ndim != 4:
        raise ExprError(f"pack_conv_words takes a 4-d int8 weight, got {weight.dtype} of shape {weight.shape}")
    if in_block % 4:
        raise ExprError(f"pack_conv_words: input blocks of {in_block} channels are not whole words of four")
    blocked = pack_blocked_weight(weight, out_block, in_block)          # [OB, CB, KH, KW, cb, b]
    lead = blocked.shape[:4]
    bytes_ = blocked.reshape(lead + (in_block // 4, 4, out_block))
    words = np.ascontiguousarray(np.swapaxes(bytes_, -1, -2)).view(np.int32)[..., 0]
    return pairs_of_words(words) if pairs else words


def _requantized(D: Tensor, channel, bias: Tensor, multiplier: Tensor, y_zero_point: int, out_dtype: str,
                 name: str, int32_range: bool = False) -> Tensor:
    """``saturate(round(float64(D + bias[c]) * multiplier[c] + y_zero_point))`` as ``out_dtype``, ``c =
    channel(index)``: QLinearConv's requantization in float64 (ONNX's reference, round half to even), or
    in float32 where ``multiplier`` is float32 (the module docstring says when).  A float32 ``D`` holds an
    exact integer (``depthwise_u8s8_blocked``); in float32 the bias is added to it as a float (one rounding
    more, where the int32 sum took two conversions: the depthwise kernels 6 % faster), and an int32 ``D``
    takes the bias in the multiply-add's offset, ``bias * multiplier + y_zero_point`` (once per channel
    vector, not an add per output: QDQ MobileNetV2 1.03x).  ``int32_range`` (the caller's promise that
    every value rounds into int32: ``rounds_in_int32``): saturated after the rounding, in int32 lanes,
    where the float64 clamp took two instructions per half vector."""
    work = multiplier.dtype

    def body(*idx):
        c = channel(idx)
        zero_point = const(float(y_zero_point), work)
        if work == "float32":
            if D.dtype == "float32":
                scaled = (D[idx] + cast(work, bias[c])) * multiplier[c] + zero_point
            else:
                scaled = cast(work, D[idx]) * multiplier[c] + (cast(work, bias[c]) * multiplier[c] + zero_point)
        else:
            acc = D[idx] if D.dtype == "int32" else cast("int32", D[idx])
            scaled = cast(work, acc + bias[c]) * multiplier[c] + zero_point
        return saturated(scaled, out_dtype, int32_range)
    return compute(D.shape, body, name=name + ".requantize", tag="elemwise")


def rounds_in_int32(multiplier: np.ndarray, y_zero_point: int) -> bool:
    """Whether ``round(acc * multiplier + y_zero_point)`` fits int32 for an int32 ``acc`` and bias taken
    apart or together (``|acc| + |bias| <= 2**32``), computed in float64 or in float32 (a relative error
    below ``2**-20``), so the requantization may saturate after rounding (``_requantized(...,
    int32_range=True)``): multipliers below a half."""
    largest = float(np.abs(np.asarray(multiplier, np.float64)).max(initial=0.0))
    return largest * 2.0 ** 32 * (1 + 2.0 ** -20) + abs(int(y_zero_point)) + 1 < INT32_SAFE


def _check_epilogue(bias: Tensor, multiplier: Tensor, channels: int, op: str) -> None:
    for t, allowed in ((bias, ("int32",)), (multiplier, ("float64", "float32"))):
        if t.dtype not in allowed or static_shape(t) != (channels,):
            raise ExprError(f"{op}: {t.name} must be {' or '.join(allowed)} of shape ({channels},), got {t.dtype} "
                            f"{static_shape(t)}")


def _padded_with(X: Tensor, padding, value: int, name: str) -> Tensor:
    """``X`` (NCHW or blocked) with ``value`` (its zero point: a padded tap contributes nothing once the
    zero point is taken off) around H and W; tag ``conv2d.pad`` (scheduled as the float conv's padding)."""
    pt, pl, pb, pr = padding
    if not (pt or pl or pb or pr):
        return X
    shape = list(extents(X))
    h, w = shape[2], shape[3]
    shape[2], shape[3] = h + pt + pb, w + pl + pr

    def pad(nn, c, yy, xx, *ci):
        inside = logical_and(logical_and(yy >= pt, yy < pt + h), logical_and(xx >= pl, xx < pl + w))
        return if_then_else(inside, X[(nn, c, yy - pt, xx - pl) + ci], const(int(value), X.dtype))
    return compute(tuple(shape), pad, name=name + ".pad", tag="conv2d.pad")


def _widened_to_int16(X: Tensor, signed: bool, name: str, copied: bool) -> Tensor:
    """X's bytes as int16, each read as uint8 (an int8 + 128): ``dot2_i16``'s halves; ``copied``: a copy
    of its own (scheduled as a padding stage), else read through by the padding."""
    def widen(*i):
        value = cast("int16", cast("uint8", X[i]))
        return value ^ const(0x80, "int16") if signed else value
    return compute(X.shape, widen, name=name + ".int16", tag="conv2d.pad" if copied else "elemwise")


def conv2d_u8s8(X: Tensor, W: Tensor, bias: Tensor, multiplier: Tensor, stride=(1, 1), padding=(0, 0, 0, 0),
                dilation=(1, 1), pad_value: int = 0, y_zero_point: int = 0, out_dtype: str = "uint8",
                name: str = "qconv2d", int32_range: bool = False) -> Tensor:
    """X [N, C, H, W] uint8/int8, W [OC, C, KH, KW] int8 -> Y [N, OC, OH, OW] ``out_dtype`` (see the
    module's docstring), the products widened to int32."""
    if X.ndim != 4 or X.dtype not in ("uint8", "int8") or W.ndim != 4 or W.dtype != "int8":
        raise ExprError(f"conv2d_u8s8: X must be 4-d uint8 or int8 and W 4-d int8, got {X.dtype} of rank {X.ndim} "
                        f"and {W.dtype} of rank {W.ndim}")
    n, c, h, w = extents(X)
    oc, wc, kh, kw = static_shape(W)
    if wc != c:
        raise ExprError(f"conv2d_u8s8: the input has {c} channels, the weight {wc}")
    _check_epilogue(bias, multiplier, oc, "conv2d_u8s8")
    (sh, sw), (dh, dw) = stride, dilation
    oh, ow = _output_hw(h, w, (kh, kw), stride, padding, dilation)
    Xp = _padded_with(X, padding, pad_value, name)
    rc, ry, rx = reduce_axis((0, c), name="rc"), reduce_axis((0, kh), name="ry"), reduce_axis((0, kw), name="rx")
    signed = X.dtype == "int8"

    def term(nn, o, yy, xx):
        value = cast("int32", cast("uint8", Xp[nn, rc, yy * sh + ry * dh, xx * sw + rx * dw]))
        return (value ^ const(0x80, "int32") if signed else value) * cast("int32", W[o, rc, ry, rx])
    D = compute((n, oc, oh, ow), lambda nn, o, yy, xx: lw_sum(term(nn, o, yy, xx), axis=[rc, ry, rx]),
                name=name, tag="conv2d_u8s8")
    return _requantized(D, lambda idx: idx[1], bias, multiplier, y_zero_point, out_dtype, name,
                        int32_range)


def conv2d_u8s8_blocked(X: Tensor, Wp: Tensor, bias: Tensor, multiplier: Tensor, stride=(1, 1),
                        padding=(0, 0, 0, 0), dilation=(1, 1), pad_value: int = 0, y_zero_point: int = 0,
                        out_dtype: str = "uint8", pairs: bool = False, name: str = "qconv2d",
                        int32_range: bool = False) -> Tensor:
    """X blocked [N, C/cb, H, W, cb] uint8/int8, Wp words [OC/b, C/cb, KH, KW, cb/4, b] (``pack_conv_words``;
    ``pairs``: [.., cb/2, b]) -> Y blocked [N, OC/b, OH, OW, b] ``out_dtype``."""
    if X.ndim != 5 or X.dtype not in ("uint8", "int8") or Wp.ndim != 6 or Wp.dtype != "int32":
        raise ExprError(f"conv2d_u8s8_blocked: X must be blocked (5-d) uint8 or int8 and Wp 6-d int32 words, got "
                        f"{X.dtype} of rank {X.ndim} and {Wp.dtype} of rank {Wp.ndim}")
    n, xcb, h, w, cb = _blocked_dims(X, "conv2d_u8s8_blocked", (1, 4))
    obn, wcb, kh, kw, words, b = static_shape(Wp)
    per_word = 2 if pairs else 4
    if wcb != xcb or words * per_word != cb:
        raise ExprError(f"conv2d_u8s8_blocked: the weight's {wcb} blocks of {words} words of {per_word} channels "
                        f"do not match the input's {xcb} blocks of {cb}")
    _check_epilogue(bias, multiplier, obn * b, "conv2d_u8s8_blocked")
    (sh, sw), (dh, dw) = stride, dilation
    oh, ow = _output_hw(h, w, (kh, kw), stride, padding, dilation)
    rco, ry, rx = reduce_axis((0, xcb), name="rco"), reduce_axis((0, kh), name="ry"), reduce_axis((0, kw), name="rx")
    rw = reduce_axis((0, words), name="rci")
    signed = X.dtype == "int8"
    if pairs:       # the padded copy widened to int16 (as uint8: an int8 + 128): a pair is one 32-bit load
        Xp = _padded_with(_widened_to_int16(X, signed, name, copied=not any(padding)), padding,
                          pad_value + (128 if signed else 0), name)

        def word(nn, iy, ix):
            low = cast("int32", Xp[nn, rco, iy, ix, 2 * rw]) & const(0xFFFF, "int32")     # (one load: LLVM joins them)
            return low | (cast("int32", Xp[nn, rco, iy, ix, 2 * rw + 1]) << 16)
    else:
        Xp = _padded_with(X, padding, pad_value, name)

        def word(nn, iy, ix):
            return word_of(lambda r: Xp[nn, rco, iy, ix, 4 * rw + r], signed)
    dot = dot2_i16 if pairs else dot4_u8s8

    def body(nn, ob, yy, xx, oi):
        iy, ix = yy * sh + ry * dh, xx * sw + rx * dw
        return lw_sum(dot(word(nn, iy, ix), Wp[ob, rco, ry, rx, rw, oi]), axis=[rco, ry, rx, rw])
    D = compute((n, obn, oh, ow, b), body, name=name, tag="conv2d_u8s8_blocked",
                attrs=dict(kernel=(kh, kw), stride=(sh, sw), block=b, blocked_input=True, pairs=bool(pairs)))
    return _requantized(D, lambda idx: idx[1] * b + idx[4], bias, multiplier, y_zero_point, out_dtype, name,
                        int32_range)


#: vector registers a register block over int16 pairs leaves free: ``pmaddwd`` does not accumulate, so
#: each product needs a register of its own before it is added (AVX2's 16 held 2 x 6 accumulators and
#: spilled them)
PAIRS_SPARE_REGISTERS = 2


class _FewerRegisters:
    """``target`` with ``spare`` fewer vector registers for the register block to fill."""

    def __init__(self, target, spare: int):
        self._target = target
        self.vector_registers = target.vector_registers - spare

    def __getattr__(self, name):
        return getattr(self._target, name)


@register_schedule("conv2d_u8s8_blocked", "llvm")
def schedule_conv2d_u8s8_blocked(s, op, target):
    """The float blocked conv's schedule: the same loop nest, over words instead of channels.  With
    int16 pairs, a register block that leaves ``PAIRS_SPARE_REGISTERS`` free, and register blocks of
    each row on small maps where the float conv keeps the whole map's accumulators in memory as its
    weights stream by: those cost a load, an add and a store per ``pmaddwd``, more than the half-size
    weights read again per row (ResNet-18's 7x7 layers 1.33-1.38x faster alone, the network 1.07x,
    MobileNetV2 1.03x; x86-64-v3 code on a Zen 5, one thread, CPU time)."""
    if op.attrs.get("pairs"):
        schedule_conv2d_blocked(s, op, _FewerRegisters(target, PAIRS_SPARE_REGISTERS), stream_weights=False)
    else:
        schedule_conv2d_blocked(s, op, target)


#: the most taps a depthwise conv sums exactly in float32: each product of a centred uint8 (|x - zx| <= 255)
#: by an int8 (|w| <= 128) is at most 32640, and the sum stays below 2**24
MAX_EXACT_DEPTHWISE_TAPS = (1 << 24) // (255 * 128)


def depthwise_u8s8(X: Tensor, W: Tensor, bias: Tensor, multiplier: Tensor, stride=(1, 1), padding=(0, 0, 0, 0),
                   dilation=(1, 1), pad_value: int = 0, y_zero_point: int = 0, out_dtype: str = "uint8",
                   name: str = "qdepthwise", int32_range: bool = False) -> Tensor:
    """X [N, C, H, W] uint8/int8, W int8 [C, 1, KH, KW] -> Y [N, C, OH, OW]: ``sum (x - pad_value) w + bias``
    in int32, requantized; the products widened to int32."""
    if X.ndim != 4 or X.dtype not in ("uint8", "int8") or W.ndim != 4 or W.dtype != "int8":
        raise ExprError(f"depthwise_u8s8: X must be 4-d uint8 or int8 and W 4-d int8, got {X.dtype} of rank {X.ndim} "
                        f"and {W.dtype} of rank {W.ndim}")
    n, c, h, w = extents(X)
    wc, one, kh, kw = static_shape(W)
    if (wc, one) != (c, 1):
        raise ExprError(f"depthwise_u8s8: a weight of shape {static_shape(W)} for {c} channels ([{c}, 1, KH, KW])")
    _check_epilogue(bias, multiplier, c, "depthwise_u8s8")
    (sh, sw), (dh, dw) = stride, dilation
    oh, ow = _output_hw(h, w, (kh, kw), stride, padding, dilation)
    Xp = _padded_with(X, padding, pad_value, name)
    ry, rx = reduce_axis((0, kh), name="ry"), reduce_axis((0, kw), name="rx")

    def term(nn, cc, yy, xx):
        centred = cast("int32", Xp[nn, cc, yy * sh + ry * dh, xx * sw + rx * dw]) - const(int(pad_value), "int32")
        return centred * cast("int32", W[cc, 0, ry, rx])
    D = compute((n, c, oh, ow), lambda nn, cc, yy, xx: lw_sum(term(nn, cc, yy, xx), axis=[ry, rx]), name=name,
                tag="depthwise_u8s8")
    return _requantized(D, lambda idx: idx[1], bias, multiplier, y_zero_point, out_dtype, name,
                        int32_range)


def depthwise_u8s8_blocked(X: Tensor, Wd: Tensor, bias: Tensor, multiplier: Tensor, stride=(1, 1),
                           padding=(0, 0, 0, 0), dilation=(1, 1), x_zero_point: int = 0, y_zero_point: int = 0,
                           out_dtype: str = "uint8", name: str = "qdepthwise", int32_range: bool = False) -> Tensor:
    """X blocked [N, C/b, H, W, b] uint8/int8, Wd float32 [C/b, KH, KW, b] (the int8 weight's values,
    ``nchwc.pack_depthwise_weight``) -> Y blocked.  The float blocked depthwise conv over ``x - x_zero_point``
    (zero padding is then the zero point's): exact in float32 (``MAX_EXACT_DEPTHWISE_TAPS``), with the float
    kernel's schedule (taps accumulated in registers, padded rows computed per row)."""
    if X.ndim != 5 or X.dtype not in ("uint8", "int8") or Wd.dtype != "float32":
        raise ExprError(f"depthwise_u8s8_blocked: X must be blocked (5-d) uint8 or int8 and Wd float32, got "
                        f"{X.dtype} of rank {X.ndim} and {Wd.dtype}")
    _, kh, kw, _ = static_shape(Wd)
    if kh * kw > MAX_EXACT_DEPTHWISE_TAPS:
        raise ExprError(f"depthwise_u8s8_blocked: {kh}x{kw} taps may not sum exactly in float32 (at most "
                        f"{MAX_EXACT_DEPTHWISE_TAPS})")
    n, cbn, h, w, b = _blocked_dims(X, "depthwise_u8s8_blocked", (1, 4))
    _check_epilogue(bias, multiplier, cbn * b, "depthwise_u8s8_blocked")
    centred = compute(X.shape, lambda *i: cast("float32", X[i]) - const(float(x_zero_point), "float32"),
                      name=name + ".centred", tag="elemwise")
    D = depthwise_blocked(centred, Wd, None, stride, padding, dilation, name=name)
    return _requantized(D, lambda idx: idx[1] * b + idx[4], bias, multiplier, y_zero_point, out_dtype, name,
                        int32_range)
