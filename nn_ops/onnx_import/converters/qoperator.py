"""onnxruntime's quantized operators of the ``com.microsoft`` domain, which its static quantizer writes in
the QOperator format beside ONNX's QLinearConv and QLinearMatMul: QLinearAdd, QLinearMul,
QLinearGlobalAveragePool, QLinearAveragePool, QLinearConcat, QLinearLeakyRelu, QLinearSigmoid and QGemm.

Each is what onnxruntime's documentation defines: the inputs dequantized (``(q - zero_point) *
scale``), the float operator, the result quantized with the output's scale and zero point (round half
to even, saturated), as dequantize / op / quantize nodes that the network compiler fuses into one
elementwise kernel.  onnxruntime computes some of them through lookup tables or fixed-point scales,
so a value on a rounding tie may differ from it by one step.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..context import ImportContext, Unsupported, converter
from .nn import _pool_common
from .quantized import _integer_product, _reshaped

DOMAIN = "com.microsoft"


def _input(node, k: int) -> str:
    return node.input[k] if len(node.input) > k else ""


def _dequantized(ctx: ImportContext, node, q: str, scale: str, zero: str, tag: str) -> str:
    if ctx.dtype(q) not in ("uint8", "int8"):
        raise Unsupported(f"input {q!r} of dtype {ctx.dtype(q)} (uint8 or int8 expected)")
    if int(np.prod(ctx.shape(scale))) != 1 or (zero and int(np.prod(ctx.shape(zero))) != 1):
        raise Unsupported(f"scale {scale!r} or zero point {zero!r} of more than one value")
    return ctx.emit("dequantize", [q, scale] + ([zero] if zero else []), ctx.temp(node.output[0], tag),
                    {"axis": 1, "block_size": 0})


def _quantized(ctx: ImportContext, node, x: str, scale: str, zero: str, like: str) -> None:
    """``x`` quantized into the node's output, of the zero point's type (else ``like``'s)."""
    to = ctx.dtype(zero) if zero else ctx.dtype(like)
    ctx.emit("quantize", [x, scale] + ([zero] if zero else []), node.output[0],
             {"to": to, "axis": 1, "block_size": 0}, name=node.name)


def _binary(op: str):
    def convert(ctx: ImportContext, node):
        a = _dequantized(ctx, node, node.input[0], node.input[1], _input(node, 2), "a")
        b = _dequantized(ctx, node, node.input[3], node.input[4], _input(node, 5), "b")
        value = ctx.emit(op, [a, b], ctx.temp(node.output[0], op))
        _quantized(ctx, node, value, node.input[6], _input(node, 7), node.input[0])
    return convert


converter(f"{DOMAIN}.QLinearAdd")(_binary("add"))
converter(f"{DOMAIN}.QLinearMul")(_binary("mul"))


@converter(f"{DOMAIN}.QLinearGlobalAveragePool")
def qlinear_global_average_pool(ctx: ImportContext, node):
    if int(ctx.attr(node, "channels_last", 0)):
        raise Unsupported("channels_last=1 (NHWC input)")
    x = _dequantized(ctx, node, node.input[0], node.input[1], _input(node, 2), "x")
    pooled = ctx.emit("global_avg_pool", [x], ctx.temp(node.output[0], "pool"))
    _quantized(ctx, node, pooled, node.input[3], _input(node, 4), node.input[0])


@converter(f"{DOMAIN}.QLinearAveragePool")
def qlinear_average_pool(ctx: ImportContext, node):
    if int(ctx.attr(node, "channels_last", 0)):
        raise Unsupported("channels_last=1 (NHWC input)")
    if len(ctx.shape(node.input[0])) != 4:
        raise Unsupported(f"input of rank {len(ctx.shape(node.input[0]))} (NCHW expected)")
    x = _dequantized(ctx, node, node.input[0], node.input[1], _input(node, 2), "x")
    attrs = _pool_common(ctx, node, "average pooling")
    attrs["count_include_pad"] = bool(ctx.attr(node, "count_include_pad", 0))
    pooled = ctx.emit("avg_pool2d", [x], ctx.temp(node.output[0], "pool"), attrs)
    _quantized(ctx, node, pooled, node.input[3], _input(node, 4), node.input[0])


@converter(f"{DOMAIN}.QLinearConcat")
def qlinear_concat(ctx: ImportContext, node):
    """Inputs: Y_scale, Y_zero_point, then (X, X_scale, X_zero_point) per piece."""
    pieces = list(node.input[2:])
    if not pieces or len(pieces) % 3:
        raise Unsupported(f"{len(pieces)} inputs after the output's scale and zero point (triples expected)")
    values = [_dequantized(ctx, node, pieces[k], pieces[k + 1], pieces[k + 2], f"x{k // 3}")
              for k in range(0, len(pieces), 3)]
    joined = ctx.emit("concat", values, ctx.temp(node.output[0], "concat"), {"axis": int(ctx.attr(node, "axis"))})
    _quantized(ctx, node, joined, node.input[0], node.input[1], pieces[0])


def _unary(build):
    def convert(ctx: ImportContext, node):
        x = _dequantized(ctx, node, node.input[0], node.input[1], _input(node, 2), "x")
        _quantized(ctx, node, build(ctx, node, x), node.input[3], _input(node, 4), node.input[0])
    return convert


def _leaky_relu(ctx: ImportContext, node, x: str) -> str:
    return ctx.emit("leaky_relu", [x], ctx.temp(node.output[0], "leaky"), {"alpha": float(ctx.attr(node, "alpha", 0.01))})


def _sigmoid(ctx: ImportContext, node, x: str) -> str:
    return ctx.emit("sigmoid", [x], ctx.temp(node.output[0], "sigmoid"))


converter(f"{DOMAIN}.QLinearLeakyRelu")(_unary(_leaky_relu))
converter(f"{DOMAIN}.QLinearSigmoid")(_unary(_sigmoid))


@converter(f"{DOMAIN}.QGemm")
def qgemm(ctx: ImportContext, node):
    """``alpha * (A - a_zp)(B - b_zp) * a_scale * b_scale`` (+ the int32 bias C, of scale
    ``a_scale * b_scale``), as the exact int32 product of ``quantized.py``; quantized with ``y_scale``
    where the node has one, float otherwise."""
    a, a_scale, a_zero, b, b_scale, b_zero = (list(node.input) + [""] * 6)[:6]
    bias, y_scale, y_zero = _input(node, 6), _input(node, 7), _input(node, 8)
    if int(ctx.attr(node, "transA", 0)):
        raise Unsupported("transA=1")
    if len(ctx.shape(a)) != 2 or len(ctx.shape(b)) != 2:
        raise Unsupported(f"A of rank {len(ctx.shape(a))} and B of rank {len(ctx.shape(b))} (2 and 2 expected)")
    columns = ctx.shape(b)[0 if int(ctx.attr(node, "transB", 0)) else 1]
    for s, allowed in [(a_scale, (1,)), (b_scale, (1, columns))] + ([(y_scale, (1,))] if y_scale else []):
        if int(np.prod(ctx.shape(s))) not in allowed:
            per_column = f", or one per output column ({columns})" if len(allowed) > 1 else ""
            raise Unsupported(f"scale {s!r} of shape {ctx.shape(s)} (one value{per_column})")
    out = node.output[0]
    if int(ctx.attr(node, "transB", 0)):
        weight = ctx.const(b)
        if weight is None:
            raise Unsupported("transB=1 with a B computed at run time")
        b = ctx.add_constant(f"{b}.t", np.ascontiguousarray(weight.T))
    acc = _integer_product(ctx, a, b, a_zero or None, b_zero or None, ctx.temp(out, "acc"))
    if bias:
        n = ctx.shape(b)[1]
        if ctx.dtype(bias) != "int32" or int(np.prod(ctx.shape(bias))) not in (1, n):
            raise Unsupported(f"bias {bias!r} of {ctx.dtype(bias)} {ctx.shape(bias)} (int32, one or {n} values)")
        acc = ctx.emit("add", [acc, _reshaped(ctx, bias, [1, int(np.prod(ctx.shape(bias)))])], ctx.temp(out, "biased"))
    alpha = ctx.add_constant(f"{out}.alpha", np.array(float(ctx.attr(node, "alpha", 1.0)), np.float32))
    b_scale = _reshaped(ctx, b_scale, [int(np.prod(ctx.shape(b_scale)))])
    scale = ctx.emit("mul", [ctx.emit("mul", [a_scale, b_scale], ctx.temp(out, "ab")), alpha], ctx.temp(out, "s"))
    value = ctx.emit("mul", [ctx.emit("cast", [acc], ctx.temp(out, "accf"), {"to": "float32"}), scale],
                     out if not y_scale else ctx.temp(out, "y"), name=node.name if not y_scale else "")
    if y_scale:
        _quantized(ctx, node, value, y_scale, y_zero, a)


def domain_op(node) -> Optional[str]:
    """The converter key of a node of this domain (``com.microsoft.QLinearAdd``), else None."""
    return f"{DOMAIN}.{node.op_type}" if node.domain == DOMAIN else None
