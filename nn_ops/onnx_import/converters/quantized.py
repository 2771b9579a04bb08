"""Converters for integer matrix products: MatMulInteger and QLinearMatMul.

The product is exact in int32.  By a constant 2-d B (a quantized layer's weight) it is the int8
product over packed words (``ops/int8_matmul``: VNNI on x86) with the zero points applied after
it, as sums (``_packed_product`` says how; zero points per row of a 2-d A and per column of B are
allowed there); otherwise the operands are widened to int32 (zero points, one value each,
subtracted), multiplied and summed by the matmul op (by the einsum op where B is batched).
QLinearMatMul then requantizes as ONNX's reference does: ``round(C * (a_scale * b_scale / y_scale)
+ y_zero_point)`` in float64, saturated to the output type.  ConvInteger: the same int8 product
over the input's patches, or the widened int32 convolution.
"""
from __future__ import annotations

import numpy as np

from ...ops.int8_conv import rounds_in_int32
from ...ops.int8_matmul import pack_words, signed_bytes, unsigned_offset
from ..context import ImportContext, Unsupported, converter, optional_input
from .nn import _conv, _reshaped, _spatial_padding


def _widened(ctx: ImportContext, x: str, zero_point, out: str, tag: str) -> str:
    if ctx.dtype(x) not in ("int8", "uint8"):
        raise Unsupported(f"input {x!r} of dtype {ctx.dtype(x)} (int8 or uint8 expected)")
    wide = ctx.emit("cast", [x], ctx.temp(out, tag), {"to": "int32"})
    if zero_point:
        if int(np.prod(ctx.shape(zero_point))) != 1:
            raise Unsupported(f"zero point {zero_point!r} of shape {ctx.shape(zero_point)} (per-tensor only)")
        zp = ctx.emit("cast", [zero_point], ctx.temp(out, tag + "_zp"), {"to": "int32"})
        wide = ctx.emit("sub", [wide, zp], ctx.temp(out, tag + "_c"))
    return wide


def _int_matmul(ctx: ImportContext, a: str, b: str, out: str) -> str:
    """The int32 product: by a 2-d B (a quantized dense layer's weight) the matmul op over A's rows
    (its leading axes flattened; the einsum op, unscheduled, took 28.9 ms for 128 x 768 x 768, the
    matmul 0.49); batched Bs by the einsum op."""
    sa, sb = list(ctx.shape(a)), list(ctx.shape(b))
    if len(sa) < 2 or len(sb) < 2:
        raise Unsupported(f"operands of ranks {len(sa)} and {len(sb)} (2 or more expected)")
    if len(sb) > 2:
        return ctx.emit("einsum", [a, b], out, {"equation": "...ij,...jk->...ik"})
    if len(sa) == 2:
        return ctx.emit("matmul", [a, b], out)
    rows = _reshaped(ctx, a, [int(np.prod(sa[:-1])), sa[-1]])
    product = ctx.emit("matmul", [rows, b], ctx.temp(out, "rows"))
    return ctx.emit("reshape", [product], out, {"shape": tuple(sa[:-1]) + (sb[-1],)})


def _wrapped(values) -> np.ndarray:
    """int32 values with int32's wraparound (the product's arithmetic is modulo 2**32)."""
    return (np.asarray(values, np.int64) & 0xFFFFFFFF).astype(np.uint32).view(np.int32)


def _zero_point(ctx: ImportContext, zp, length: int, what: str):
    """A zero point's constant value (an int64 array: one value, or ``length`` per-row/column ones),
    or None where it is computed at run time (one value)."""
    if not zp:
        return np.zeros(1, np.int64)
    size = int(np.prod(ctx.shape(zp)))
    if size != 1 and (size != length or len(ctx.shape(zp)) != 1):
        raise Unsupported(f"zero point {zp!r} of shape {ctx.shape(zp)} (one value, or one per {what})")
    value = ctx.const(zp)
    if value is None and size != 1:
        raise Unsupported(f"zero point {zp!r} per {what} computed at run time")
    return None if value is None else value.astype(np.int64).reshape(-1)


def _packed_product(ctx: ImportContext, a: str, b: str, a_zp, b_zp, out: str):
    """The int32 product of A and a constant 2-d B over packed bytes, or None where it does not apply.

    With ``a_u = a + ca`` read as uint8 (ca = 128 for an int8 A) and ``b_s = b - cb`` as int8 (cb = 128
    for a uint8 B), ``alpha = za + ca`` and ``beta = zb - cb``:
    ``sum_k (a - za)(b - zb) = D - alpha * (S_j - K beta_j) - beta_j * R_i`` where D is the product of
    ``a_u`` by ``b_s``, ``S_j`` B's column sums (constants) and ``R_i`` A's row sums (computed only
    where some beta is not 0: a symmetric int8 weight, onnxruntime's default, has none)."""
    bv, sa = ctx.const(b), list(ctx.shape(a))
    if bv is None or bv.ndim != 2 or len(sa) < 2 or ctx.dtype(a) not in ("int8", "uint8") \
            or bv.dtype not in (np.int8, np.uint8):
        return None
    depth, n = bv.shape
    m = int(np.prod(sa[:-1]))
    zb = _zero_point(ctx, b_zp, n, "column of B")
    za = _zero_point(ctx, a_zp, m if len(sa) == 2 else 1, "row of A")   # (per row: of a 2-d A only)
    if zb is None:
        return None         # a run-time zero point of the weight: the widened product
    b_s, cb = signed_bytes(bv)
    ca = 128 if ctx.dtype(a) == "int8" else 0
    beta = zb - cb
    offsets = b_s.astype(np.int64).sum(axis=0) - depth * beta          # S_j - K beta_j
    flat = _reshaped(ctx, a, [m, depth])
    rows = flat if depth % 4 == 0 else ctx.emit("pad", [flat], ctx.temp(out, "a_pad"),
                                                {"before": (0, 0), "after": (0, -depth % 4), "value": 0.0})
    words = ctx.add_constant(f"{b}.words", pack_words(b_s))
    shift = None if za is None else _wrapped((za + ca).reshape(-1, 1) * offsets if za.size > 1 else (za + ca) * offsets)
    stages = ["dot"] + (["offset"] if shift is None or shift.any() else []) + (["centred"] if beta.any() else [])
    result = out if len(sa) == 2 else ctx.temp(out, "rows")

    def name(stage):
        return result if stage == stages[-1] else ctx.temp(out, stage)
    product = ctx.emit("matmul_u8s8", [rows, words], name("dot"))
    if "offset" in stages:
        if shift is not None:
            correction = ctx.add_constant(f"{out}.offset", shift)
        else:       # a run-time zero point of A (DynamicQuantizeLinear's)
            alpha = ctx.emit("cast", [a_zp], ctx.temp(out, "za"), {"to": "int32"})
            if ca:
                alpha = ctx.emit("add", [alpha, ctx.add_constant(f"{out}.ca", np.array(ca, np.int32))],
                                 ctx.temp(out, "alpha"))
            correction = ctx.emit("mul", [alpha, ctx.add_constant(f"{out}.offsets", _wrapped(offsets))],
                                  ctx.temp(out, "alpha_s"))
        product = ctx.emit("sub", [product, correction], name("offset"))
    if "centred" in stages:
        wide = ctx.emit("cast", [flat], ctx.temp(out, "a32"), {"to": "int32"})
        row_sums = ctx.emit("reduce", [wide], ctx.temp(out, "row_sums"),
                            {"axes": (1,), "kind": "sum", "keepdims": True})
        if ca:
            row_sums = ctx.emit("add", [row_sums, ctx.add_constant(f"{out}.kca", np.array(depth * ca, np.int32))],
                                ctx.temp(out, "row_sums_u"))
        scaled = ctx.emit("mul", [row_sums, ctx.add_constant(f"{out}.beta", _wrapped(beta))], ctx.temp(out, "rb"))
        product = ctx.emit("sub", [product, scaled], name("centred"))
    if len(sa) > 2:
        ctx.emit("reshape", [product], out, {"shape": tuple(sa[:-1]) + (n,)})
    return out


def _integer_product(ctx: ImportContext, a: str, b: str, a_zp, b_zp, out: str) -> str:
    packed = _packed_product(ctx, a, b, a_zp, b_zp, out)
    if packed is not None:
        return packed
    return _int_matmul(ctx, _widened(ctx, a, a_zp, out, "a"), _widened(ctx, b, b_zp, out, "b"), out)


@converter("MatMulInteger", since=10)
def matmul_integer(ctx: ImportContext, node):
    _integer_product(ctx, node.input[0], node.input[1], optional_input(node, 2), optional_input(node, 3),
                     node.output[0])


@converter("ConvInteger", since=10)
def conv_integer(ctx: ImportContext, node):
    _integer_conv(ctx, node, node.input[0], node.input[1], optional_input(node, 2), optional_input(node, 3),
                  node.output[0])


def _integer_conv(ctx: ImportContext, node, x: str, w: str, x_zp, w_zp, out: str) -> str:
    """The exact int32 convolution of ``x - x_zero_point`` by ``w - w_zero_point`` (a zero point per
    output channel allowed for w), with ``node``'s attributes.  With a constant weight and one group,
    as the int8 product of the input's patches (channels last, padded with x's zero point) by the
    weight's columns; otherwise the int32 convolution of the widened operands."""
    for name, what in ((x, "input"), (w, "weight")):
        if ctx.dtype(name) not in ("int8", "uint8"):
            raise Unsupported(f"{what} {name!r} of dtype {ctx.dtype(name)} (int8 or uint8 expected)")
    if x_zp and int(np.prod(ctx.shape(x_zp))) != 1:
        raise Unsupported(f"input zero point {x_zp!r} of shape {ctx.shape(x_zp)} (one value expected)")
    for zp, of in ((x_zp, x), (w_zp, w)):
        if zp and ctx.dtype(zp) != ctx.dtype(of):
            raise Unsupported(f"zero point {zp!r} of dtype {ctx.dtype(zp)} for {of!r} of {ctx.dtype(of)} (the same "
                              f"type expected)")
    rank, group = len(ctx.shape(x)), int(ctx.attr(node, "group", 1))
    if rank == 4 and group == 1 and ctx.const(w) is not None and (not w_zp or ctx.const(w_zp) is not None):
        return _conv_as_product(ctx, node, x, w, x_zp, w_zp, out)
    wide_w = _widened(ctx, w, None, out, "w")
    if w_zp:
        channels = ctx.shape(w)[0]
        if int(np.prod(ctx.shape(w_zp))) not in (1, channels):
            raise Unsupported(f"weight zero point {w_zp!r} of shape {ctx.shape(w_zp)} (one value, or one per "
                              f"output channel: {channels})")
        zp = ctx.emit("cast", [w_zp], ctx.temp(out, "w_zp"), {"to": "int32"})
        zp = _reshaped(ctx, zp, [int(np.prod(ctx.shape(w_zp)))] + [1] * (rank - 1))
        wide_w = ctx.emit("sub", [wide_w, zp], ctx.temp(out, "w_c"))
    return _conv(ctx, node, [_widened(ctx, x, x_zp, out, "x"), wide_w], out)


def _conv_as_product(ctx: ImportContext, node, x: str, w: str, x_zp, w_zp, out: str) -> str:
    """ConvInteger of one group by a constant weight: ``_packed_product`` of the NHWC patches (rows:
    output pixels; columns: taps x channels) by the weight's columns, transposed back to NCHW."""
    n, c, h, width = ctx.shape(x)
    weight = ctx.const(w)
    oc, _, kh, kw = weight.shape
    kernel = list(ctx.attr(node, "kernel_shape", [kh, kw]))
    stride = list(ctx.attr(node, "strides", [1, 1]))
    dilation = list(ctx.attr(node, "dilations", [1, 1]))
    padding = _spatial_padding(ctx, node, (h, width), kernel, stride, dilation)
    nhwc = ctx.emit("transpose", [x], ctx.temp(out, "nhwc"), {"perm": (0, 2, 3, 1)})
    # each tap's channels filled to a whole word with x's zero point (a value that contributes 0),
    # so the rows need no padding copy (MobileNetV2's RGB stem: a 0.21 ms pad of 12544 x 27 bytes)
    words = -(-c // 4) * 4
    cols = ctx.emit("patches", [nhwc] + ([x_zp] if x_zp else []), ctx.temp(out, "patches"),
                    {"kernel": (kh, kw), "stride": tuple(stride), "padding": tuple(padding),
                     "dilation": tuple(dilation), "channels": words})
    _, oh, ow = ctx.shape(cols)[:3]
    rows = _reshaped(ctx, cols, [n * oh * ow, kh * kw * words])
    # the weight's rows in the patches' order (ky, kx, c), its added channels B's zero (b_s = 0)
    filled = np.full((oc, words, kh, kw), unsigned_offset(weight.dtype), weight.dtype)
    filled[:, :c] = weight
    columns = ctx.add_constant(f"{w}.columns", np.ascontiguousarray(filled.transpose(2, 3, 1, 0).reshape(-1, oc)))
    product = _packed_product(ctx, rows, columns, x_zp, w_zp, ctx.temp(out, "product"))
    pixels = _reshaped(ctx, product, [n, oh, ow, oc])
    return ctx.emit("transpose", [pixels], out, {"perm": (0, 3, 1, 2)}, name=node.name)


@converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx: ImportContext, node):
    out = node.output[0]
    a_scale, b_scale, y_scale, y_zp = node.input[1], node.input[4], node.input[6], optional_input(node, 7)
    for s in (a_scale, b_scale, y_scale):
        if int(np.prod(ctx.shape(s))) != 1:
            raise Unsupported(f"scale {s!r} of shape {ctx.shape(s)} (per-tensor only)")
    acc = _integer_product(ctx, node.input[0], node.input[3], node.input[2], node.input[5], ctx.temp(out, "acc"))
    multiplier = ctx.emit("div", [ctx.emit("mul", [a_scale, b_scale], ctx.temp(out, "ab")), y_scale],
                          ctx.temp(out, "m"))
    _requantized(ctx, node, acc, multiplier, y_zp, ctx.dtype(y_zp) if y_zp else ctx.dtype(node.input[0]), out)


@converter("QLinearConv", since=10)
def qlinear_conv(ctx: ImportContext, node):
    """ConvInteger's exact int32 convolution, plus the int32 bias, requantized as QLinearMatMul is
    (the weight's scale one value or one per output channel)."""
    out = node.output[0]
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = (list(node.input) + [""] * 8)[:8]
    bias = optional_input(node, 8)
    channels = ctx.shape(w)[0]
    for s, allowed in ((x_scale, (1,)), (w_scale, (1, channels)), (y_scale, (1,))):
        if int(np.prod(ctx.shape(s))) not in allowed:
            per_channel = ", or one per output channel" if len(allowed) > 1 else ""
            raise Unsupported(f"scale {s!r} of shape {ctx.shape(s)} (one value{per_channel})")
    if _direct_qconv(ctx, node):
        return
    acc = _integer_conv(ctx, node, x, w, x_zp or None, w_zp or None, ctx.temp(out, "acc"))
    rank = len(ctx.shape(x))
    if bias:
        if ctx.dtype(bias) != "int32" or tuple(ctx.shape(bias)) != (channels,):
            raise Unsupported(f"bias {bias!r} of {ctx.dtype(bias)} {ctx.shape(bias)} (int32 of shape ({channels},) "
                              f"expected)")
        acc = ctx.emit("add", [acc, _reshaped(ctx, bias, [channels] + [1] * (rank - 2))], ctx.temp(out, "biased"))
    multiplier = ctx.emit("div", [ctx.emit("mul", [x_scale, w_scale], ctx.temp(out, "xw")), y_scale],
                          ctx.temp(out, "m"))
    if int(np.prod(ctx.shape(w_scale))) > 1:
        multiplier = _reshaped(ctx, multiplier, [channels] + [1] * (rank - 2))
    _requantized(ctx, node, acc, multiplier, y_zp or None, ctx.dtype(y_zp) if y_zp else ctx.dtype(x), out)


def _constant(ctx: ImportContext, name, sizes=(1,)):
    """``name``'s constant value, or None where it is absent, computed at run time or not of one of ``sizes``
    elements."""
    value = ctx.const(name) if name else None
    return value if value is not None and value.size in sizes else None


#: output channels of a direct int8 conv come in whole blocks of this many (the blocked layout's least)
DIRECT_CHANNELS = 8


def _direct_qconv(ctx: ImportContext, node) -> bool:
    """QLinearConv as one ``qconv2d`` node (``ops/int8_conv``: the product and the requantization in one
    kernel, on the blocked layout on CPUs), where its operands allow: a 2-d conv of one group (its input
    channels padded to whole words of four), or a depthwise one (``qdepthwise``), of ``DIRECT_CHANNELS``
    output channels or a multiple; constant weight, scales, zero
    points and bias; float32 scales; a weight zero point that is 0 for an int8 weight (128 for a uint8 one).
    The input's zero point goes into the padding and, for ``qconv2d``, into the bias (``sum (x - zx) w = D -
    zx sum w``; the depthwise conv takes it off each value); the multiplier is computed as the
    general path's graph computes it (float32 ``x_scale * w_scale / y_scale``), so the two agree to the bit;
    float32 for a conv that stands for a QDQ pattern (``ctx.qdq_outputs``: its reference is float32
    arithmetic), whose requantization then runs in float32 (``int8_conv``: within one step, and QDQ
    MobileNetV2's int8 build 1.24x faster with AVX-512, 1.13x as AVX2 code).
    Returns whether it was emitted."""
    x, x_scale, x_zp, w, w_scale, w_zp, y_scale, y_zp = (list(node.input) + [""] * 8)[:8]
    bias_name = optional_input(node, 8)
    weight = ctx.const(w)
    shape = ctx.shape(x)
    if weight is None or weight.ndim != 4 or weight.dtype not in (np.int8, np.uint8) or len(shape) != 4 or \
            ctx.dtype(x) not in ("int8", "uint8"):
        return False
    group, oc = int(ctx.attr(node, "group", 1)), weight.shape[0]
    depthwise = group == shape[1] == oc and weight.shape[1] == 1
    if (not depthwise and group != 1) or oc % DIRECT_CHANNELS:
        return False            # (the direct kernel runs on blocks of 8 or 16 channels)
    scales = [_constant(ctx, s, (1, oc) if s == w_scale else (1,)) for s in (x_scale, w_scale, y_scale)]
    zx = _constant(ctx, x_zp) if x_zp else np.zeros(1, ctx.dtype(x))
    zw = _constant(ctx, w_zp, (1, oc)) if w_zp else np.zeros(1, weight.dtype)
    zy = _constant(ctx, y_zp) if y_zp else np.zeros(1, np.int64)
    bias = _constant(ctx, bias_name, (oc,)) if bias_name else np.zeros(oc, np.int32)
    if any(v is None for v in scales + [zx, zw, zy, bias]) or any(v.dtype != np.float32 for v in scales) or \
            bias.dtype != np.int32 or bool((zw.astype(np.int64) != unsigned_offset(weight.dtype)).any()):
        return False
    w_s, _ = signed_bytes(weight)
    alpha = int(zx.reshape(())) + (128 if ctx.dtype(x) == "int8" else 0)
    folded = bias if depthwise else _wrapped(bias.astype(np.int64) - alpha * w_s.astype(np.int64).sum(axis=(1, 2, 3)))
    x_s, w_sc, y_s = scales
    multiplier = np.broadcast_to((x_s.reshape(-1) * w_sc.reshape(-1)) / y_s.reshape(-1), (oc,)).astype(
        np.float32 if node.output[0] in ctx.qdq_outputs else np.float64)
    kh, kw = weight.shape[2:]
    kernel = list(ctx.attr(node, "kernel_shape", [kh, kw]))
    stride = list(ctx.attr(node, "strides", [1, 1]))
    dilation = list(ctx.attr(node, "dilations", [1, 1]))
    padding = _spatial_padding(ctx, node, tuple(shape[2:]), kernel, stride, dilation)
    out = node.output[0]
    if not depthwise and shape[1] % 4:      # (an RGB stem) channels up to whole words: zero weights read them
        extra = -shape[1] % 4
        x = ctx.emit("pad", [x], ctx.temp(out, "words"), {"before": (0, 0, 0, 0), "after": (0, extra, 0, 0),
                                                         "value": 0.0})
        w_s = np.concatenate([w_s, np.zeros((oc, extra) + w_s.shape[2:], np.int8)], axis=1)
    inputs = [x, ctx.add_constant(f"{w}.signed", w_s), ctx.add_constant(f"{out}.bias_folded", folded),
              ctx.add_constant(f"{out}.multiplier", np.ascontiguousarray(multiplier))]
    ctx.emit("qdepthwise" if depthwise else "qconv2d", inputs, out, {"stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation),
                                      "pad_value": int(zx.reshape(())), "y_zero_point": int(zy.reshape(())),
                                      "to": ctx.dtype(y_zp) if y_zp else ctx.dtype(x),
                                      "int32_range": rounds_in_int32(multiplier, int(zy.reshape(())))}, name=node.name)
    return True


def _requantized(ctx: ImportContext, node, acc: str, multiplier: str, y_zp, to: str, out: str) -> None:
    """``saturate(round(acc * multiplier + y_zero_point))`` in float64 (ONNX's reference), as ``to``; in
    float32 for an operator that stands for a QDQ pattern (``ctx.qdq_outputs``: within one step, as
    ``ops/int8_conv`` says)."""
    work = "float32" if node.output[0] in ctx.qdq_outputs else "float64"
    product = ctx.emit("cast", [acc], ctx.temp(out, "acc_f"), {"to": work})
    scaled = ctx.emit("mul", [product, ctx.emit("cast", [multiplier], ctx.temp(out, "m_f"), {"to": work})],
                      ctx.temp(out, "scaled"))
    if y_zp:
        scaled = ctx.emit("add", [scaled, ctx.emit("cast", [y_zp], ctx.temp(out, "zp_f"), {"to": work})],
                          ctx.temp(out, "shifted"))
    info = np.iinfo(to)
    rounded = ctx.emit("round", [scaled], ctx.temp(out, "round"))
    clipped = ctx.emit("clip", [rounded], ctx.temp(out, "clip"), {"min": float(info.min), "max": float(info.max)})
    ctx.emit("cast", [clipped], out, {"to": to}, name=node.name)


@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx: ImportContext, node):
    """uint8 quantization with a scale and zero point from the input's range (including 0)."""
    x = node.input[0]
    if ctx.dtype(x) != "float32":
        raise Unsupported(f"input of dtype {ctx.dtype(x)}")
    y, scale_out, zp_out = (list(node.output) + ["", ""])[:3]
    base = y or scale_out or zp_out
    everything = {"axes": tuple(range(len(ctx.shape(x)))), "keepdims": False}

    def const(tag, value):
        return ctx.add_constant(f"{base}.{tag}", np.array(value, np.float32))

    lo = ctx.emit("min", [ctx.emit("reduce", [x], ctx.temp(base, "min"), {**everything, "kind": "min"}),
                          const("zero", 0.0)], ctx.temp(base, "lo"))
    hi = ctx.emit("max", [ctx.emit("reduce", [x], ctx.temp(base, "max"), {**everything, "kind": "max"}),
                          const("zero2", 0.0)], ctx.temp(base, "hi"))
    span = ctx.emit("sub", [hi, lo], ctx.temp(base, "span"))
    flat = ctx.emit("equal", [hi, lo], ctx.temp(base, "flat"))
    span = ctx.emit("where", [flat, const("one", 1.0), span], ctx.temp(base, "span1"))
    scale = ctx.emit("div", [span, const("levels", 255.0)], scale_out or ctx.temp(base, "scale"))
    zp_f = ctx.emit("sub", [const("qmin", 0.0), ctx.emit("div", [lo, scale], ctx.temp(base, "lo_s"))],
                    ctx.temp(base, "zp_f"))
    zp_r = ctx.emit("round", [ctx.emit("clip", [zp_f], ctx.temp(base, "zp_c"), {"min": 0.0, "max": 255.0})],
                    ctx.temp(base, "zp_r"))
    zp = ctx.emit("cast", [zp_r], zp_out or ctx.temp(base, "zp"), {"to": "uint8"})
    if y:
        ctx.emit("quantize", [x, scale, zp], y, {"to": "uint8", "axis": 1, "block_size": 0}, name=node.name)
