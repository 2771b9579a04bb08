"""Converters for casts, math activations, integer remainders, PRelu, variadic Sum/Mean,
and the reductions that are a reduce between two elementwise steps (ReduceL1, ReduceL2,
ReduceSumSquare, ReduceLogSum, ReduceLogSumExp, ReduceProd)."""
from __future__ import annotations

import numpy as np

from ....dsl.dtypes import ALL_DTYPES
from ..context import ImportContext, Unsupported, converter
from .reduce import reduce_axes


def _onnx_dtype(elem_type: int) -> str:
    from onnx import TensorProto, helper
    try:
        dtype = str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:  # noqa: BLE001 - onnx raises KeyError/ValueError for types numpy lacks
        dtype = None
    if dtype not in ALL_DTYPES:
        name = TensorProto.DataType.Name(elem_type) if elem_type in TensorProto.DataType.values() else elem_type
        raise Unsupported(f"element type {name} (loopweave supports {', '.join(ALL_DTYPES)})")
    return dtype


def _cast(ctx: ImportContext, node, to: str):
    if to == ctx.dtype(node.input[0]):
        ctx.emit("identity", [node.input[0]], node.output[0], name=node.name)
    else:
        ctx.emit("cast", [node.input[0]], node.output[0], {"to": to}, name=node.name)


@converter("Cast", since=6)
def cast(ctx: ImportContext, node):
    _cast(ctx, node, _onnx_dtype(ctx.attr(node, "to")))


@converter("CastLike", since=15)
def cast_like(ctx: ImportContext, node):
    _cast(ctx, node, ctx.dtype(node.input[1]))


#: ONNX op -> (the op of ``ops/math.py``, its float attributes with their defaults)
UNARY_MATH = {"Abs": ("abs", {}), "Sign": ("sign", {}), "Reciprocal": ("reciprocal", {}), "Floor": ("floor", {}),
          "Ceil": ("ceil", {}), "Round": ("round", {}), "Log": ("log", {}), "Softplus": ("softplus", {}),
          "Softsign": ("softsign", {}), "Mish": ("mish", {}), "Elu": ("elu", {"alpha": 1.0}),
          "Selu": ("selu", {"alpha": 1.67326319217681884765625, "gamma": 1.05070102214813232421875}),
          "Celu": ("celu", {"alpha": 1.0}), "ThresholdedRelu": ("thresholded_relu", {"alpha": 1.0}),
          "Shrink": ("shrink", {"lambd": 0.5, "bias": 0.0}), "Swish": ("swish", {"alpha": 1.0})}


UNARY_MATH.update({name.capitalize(): (name, {}) for name in
               ("sin", "cos", "tan", "asin", "acos", "atan", "sinh", "cosh", "asinh", "acosh", "atanh")})


def _unary(kind, defaults):
    def convert(ctx: ImportContext, node):
        attrs = {k: float(ctx.attr(node, k, v)) for k, v in defaults.items()}
        ctx.emit(kind, [node.input[0]], node.output[0], attrs, name=node.name)
    return convert


for _onnx, (_kind, _defaults) in UNARY_MATH.items():
    converter(_onnx, since=1)(_unary(_kind, _defaults))


@converter("Mod", since=10)
def mod(ctx: ImportContext, node):
    fmod = int(ctx.attr(node, "fmod", 0))
    ctx.emit("fmod" if fmod else "mod", list(node.input), node.output[0], name=node.name)


@converter("PRelu", since=9)
def prelu(ctx: ImportContext, node):
    ctx.emit("prelu", list(node.input), node.output[0], name=node.name)


def _variadic_sum(ctx: ImportContext, node, out: str) -> str:
    inputs = [i for i in node.input if i]
    if len(inputs) == 1:
        return ctx.emit("identity", inputs, out, name=node.name)
    acc = inputs[0]
    for k, other in enumerate(inputs[1:]):
        target = out if k == len(inputs) - 2 else ctx.graph.fresh_name(f"{out}.{k}")
        acc = ctx.emit("add", [acc, other], target, name=node.name if target == node.output[0] else target)
    return acc


@converter("Sum", since=8)
def sum_(ctx: ImportContext, node):
    _variadic_sum(ctx, node, node.output[0])


@converter("Mean", since=8)
def mean(ctx: ImportContext, node):
    inputs = [i for i in node.input if i]
    if not ctx.dtype(inputs[0]).startswith("float"):
        raise Unsupported(f"Mean of {ctx.dtype(inputs[0])} tensors")
    total = _variadic_sum(ctx, node, ctx.graph.fresh_name(node.output[0] + ".sum"))
    scale = ctx.add_constant(node.output[0] + ".n", np.array(1.0 / len(inputs), ctx.dtype(inputs[0])))
    ctx.emit("mul", [total, scale], node.output[0], name=node.name)


def _reduce_between(pre, kind, post):
    """``post(reduce_kind(pre(x)))``; pre/post are graph op types (or None)."""
    def convert(ctx: ImportContext, node):
        x, out = node.input[0], node.output[0]
        axes = reduce_axes(ctx, node)
        keepdims = bool(ctx.attr(node, "keepdims", 1))
        if axes is None:
            raise Unsupported("noop_with_empty_axes=1 with no axes")
        if pre == "square":
            x = ctx.emit("mul", [x, x], ctx.graph.fresh_name(out + ".sq"))
        elif pre is not None:
            x = ctx.emit(pre, [x], ctx.graph.fresh_name(out + "." + pre))
        attrs = {"axes": tuple(axes), "kind": kind, "keepdims": keepdims}
        if post is None:
            ctx.emit("reduce", [x], out, attrs, name=node.name)
            return
        red = ctx.emit("reduce", [x], ctx.graph.fresh_name(out + ".red"), attrs)
        ctx.emit(post, [red], out, name=node.name)
    return convert


#: ONNX reduction -> (the step before it, the reduction, the step after it)
REDUCE_BETWEEN = {"ReduceL1": ("abs", "sum", None), "ReduceL2": ("square", "sum", "sqrt"),
                  "ReduceSumSquare": ("square", "sum", None), "ReduceLogSum": (None, "sum", "log"),
                  "ReduceProd": (None, "prod", None)}
for _onnx, (_pre, _kind, _post) in REDUCE_BETWEEN.items():
    converter(_onnx, since=1)(_reduce_between(_pre, _kind, _post))


@converter("ReduceLogSumExp", since=1)
def reduce_log_sum_exp(ctx: ImportContext, node):
    """``m + log(sum(exp(x - m)))`` with ``m`` the maximum: no overflow for large x."""
    x, out = node.input[0], node.output[0]
    axes = reduce_axes(ctx, node)
    if axes is None:
        raise Unsupported("noop_with_empty_axes=1 with no axes")
    if not ctx.dtype(x).startswith("float"):
        raise Unsupported(f"ReduceLogSumExp of {ctx.dtype(x)}")

    def tmp(tag):
        return ctx.graph.fresh_name(f"{out}.{tag}")

    m = ctx.emit("reduce", [x], tmp("max"), {"axes": tuple(axes), "kind": "max", "keepdims": True})
    e = ctx.emit("exp", [ctx.emit("sub", [x, m], tmp("shift"))], tmp("exp"))
    s = ctx.emit("reduce", [e], tmp("sum"), {"axes": tuple(axes), "kind": "sum", "keepdims": True})
    keepdims = bool(ctx.attr(node, "keepdims", 1))
    full = ctx.emit("add", [ctx.emit("log", [s], tmp("log")), m], out if keepdims else tmp("keep"),
                    name=node.name if keepdims else "")
    if not keepdims:
        nd = len(ctx.shape(x))
        drop = {a % nd for a in axes} if axes else set(range(nd))
        shape = tuple(d for k, d in enumerate(ctx.shape(x)) if k not in drop)
        ctx.emit("reshape", [full], out, {"shape": shape}, name=node.name)


def _quant_attrs(ctx: ImportContext, node):
    return {"axis": int(ctx.attr(node, "axis", 1)), "block_size": int(ctx.attr(node, "block_size", 0))}


@converter("DequantizeLinear", since=10)
def dequantize_linear(ctx: ImportContext, node):
    attrs = _quant_attrs(ctx, node)
    if ctx.attr(node, "output_dtype") and _onnx_dtype(ctx.attr(node, "output_dtype")) != ctx.dtype(node.input[1]):
        raise Unsupported("output_dtype other than the scale's type")
    ctx.emit("dequantize", [i for i in node.input[:3] if i], node.output[0], attrs, name=node.name)


@converter("QuantizeLinear", since=10)
def quantize_linear(ctx: ImportContext, node):
    attrs = _quant_attrs(ctx, node)
    zero_point = node.input[2] if len(node.input) > 2 and node.input[2] else None
    if ctx.attr(node, "output_dtype"):
        attrs["to"] = _onnx_dtype(ctx.attr(node, "output_dtype"))
    else:
        attrs["to"] = ctx.dtype(zero_point) if zero_point else "uint8"
    if not ctx.dtype(node.input[0]).startswith("float"):
        raise Unsupported(f"quantizing {ctx.dtype(node.input[0])} input")
    ctx.emit("quantize", [i for i in node.input[:3] if i], node.output[0], attrs, name=node.name)


@converter("SwiGLU", since=1)
def swiglu(ctx: ImportContext, node):
    """``swish_alpha(a) * b`` (a and b of one shape)."""
    a, b, out = node.input[0], node.input[1], node.output[0]
    if ctx.shape(a) != ctx.shape(b) or not ctx.dtype(a).startswith("float"):
        raise Unsupported(f"inputs of shapes {ctx.shape(a)} / {ctx.shape(b)} and dtype {ctx.dtype(a)}")
    gate = ctx.emit("swish", [a], ctx.graph.fresh_name(out + ".swish"), {"alpha": float(ctx.attr(node, "alpha", 1.0))})
    ctx.emit("mul", [gate, b], out, name=node.name)
