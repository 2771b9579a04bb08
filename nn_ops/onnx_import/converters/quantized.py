"""Converters for integer matrix products: MatMulInteger and QLinearMatMul.

The product is exact: operands widened to int32 (zero points subtracted), multiplied and
summed in int32 by the matmul op (by the einsum op where B is batched).  QLinearMatMul then
requantizes as ONNX's reference does: ``round(C * (a_scale * b_scale / y_scale) + y_zero_point)``
in float64, saturated to the output type.  Zero points must be one value each (per-tensor).
"""
from __future__ import annotations

import numpy as np

from ..context import ImportContext, Unsupported, converter, optional_input
from .nn import _reshaped



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


@converter("MatMulInteger", since=10)
def matmul_integer(ctx: ImportContext, node):
    out = node.output[0]
    a = _widened(ctx, node.input[0], optional_input(node, 2), out, "a")
    b = _widened(ctx, node.input[1], optional_input(node, 3), out, "b")
    _int_matmul(ctx, a, b, out)


@converter("QLinearMatMul", since=10)
def qlinear_matmul(ctx: ImportContext, node):
    out = node.output[0]
    a_scale, b_scale, y_scale, y_zp = node.input[1], node.input[4], node.input[6], optional_input(node, 7)
    for s in (a_scale, b_scale, y_scale):
        if int(np.prod(ctx.shape(s))) != 1:
            raise Unsupported(f"scale {s!r} of shape {ctx.shape(s)} (per-tensor only)")
    a = _widened(ctx, node.input[0], node.input[2], out, "a")
    b = _widened(ctx, node.input[3], node.input[5], out, "b")
    product = ctx.emit("cast", [_int_matmul(ctx, a, b, ctx.temp(out, "acc"))], ctx.temp(out, "acc64"),
                       {"to": "float64"})
    multiplier = ctx.emit("div", [ctx.emit("mul", [a_scale, b_scale], ctx.temp(out, "ab")), y_scale],
                          ctx.temp(out, "m"))
    scaled = ctx.emit("mul", [product, ctx.emit("cast", [multiplier], ctx.temp(out, "m64"), {"to": "float64"})],
                      ctx.temp(out, "scaled"))
    to = ctx.dtype(y_zp) if y_zp else ctx.dtype(node.input[0])
    if y_zp:
        scaled = ctx.emit("add", [scaled, ctx.emit("cast", [y_zp], ctx.temp(out, "zp64"), {"to": "float64"})],
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
