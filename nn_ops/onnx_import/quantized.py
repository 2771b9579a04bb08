"""Converters for integer matrix products: MatMulInteger and QLinearMatMul.

The product is exact: operands widened to int32 (zero points subtracted), multiplied and
summed in int32 by the einsum op.  QLinearMatMul then requantizes as ONNX's reference does:
``round(C * (a_scale * b_scale / y_scale) + y_zero_point)`` in float64, saturated to the
output type.  Zero points must be one value each (per-tensor).
"""
from __future__ import annotations

import numpy as np

from .context import ImportContext, Unsupported, converter, optional_input


def _tmp(ctx, out, tag):
    return ctx.graph.fresh_name(f"{out}.{tag}")


def _widened(ctx: ImportContext, x: str, zero_point, out: str, tag: str) -> str:
    if ctx.dtype(x) not in ("int8", "uint8"):
        raise Unsupported(f"input {x!r} of dtype {ctx.dtype(x)} (int8 or uint8 expected)")
    wide = ctx.emit("cast", [x], _tmp(ctx, out, tag), {"to": "int32"})
    if zero_point:
        if int(np.prod(ctx.shape(zero_point))) != 1:
            raise Unsupported(f"zero point {zero_point!r} of shape {ctx.shape(zero_point)} (per-tensor only)")
        zp = ctx.emit("cast", [zero_point], _tmp(ctx, out, tag + "_zp"), {"to": "int32"})
        wide = ctx.emit("sub", [wide, zp], _tmp(ctx, out, tag + "_c"))
    return wide


def _int_matmul(ctx: ImportContext, a: str, b: str, out: str) -> str:
    ra, rb = len(ctx.shape(a)), len(ctx.shape(b))
    if ra < 2 or rb < 2:
        raise Unsupported(f"operands of ranks {ra} and {rb} (2 or more expected)")
    return ctx.emit("einsum", [a, b], out, {"equation": "...ij,...jk->...ik"})


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
    product = ctx.emit("cast", [_int_matmul(ctx, a, b, _tmp(ctx, out, "acc"))], _tmp(ctx, out, "acc64"),
                       {"to": "float64"})
    multiplier = ctx.emit("div", [ctx.emit("mul", [a_scale, b_scale], _tmp(ctx, out, "ab")), y_scale],
                          _tmp(ctx, out, "m"))
    scaled = ctx.emit("mul", [product, ctx.emit("cast", [multiplier], _tmp(ctx, out, "m64"), {"to": "float64"})],
                      _tmp(ctx, out, "scaled"))
    to = ctx.dtype(y_zp) if y_zp else ctx.dtype(node.input[0])
    if y_zp:
        scaled = ctx.emit("add", [scaled, ctx.emit("cast", [y_zp], _tmp(ctx, out, "zp64"), {"to": "float64"})],
                          _tmp(ctx, out, "shifted"))
    info = np.iinfo(to)
    rounded = ctx.emit("round", [scaled], _tmp(ctx, out, "round"))
    clipped = ctx.emit("clip", [rounded], _tmp(ctx, out, "clip"), {"min": float(info.min), "max": float(info.max)})
    ctx.emit("cast", [clipped], out, {"to": to}, name=node.name)
