"""Converters for comparisons (bool results), boolean logic, Where, IsNaN and IsInf."""
from __future__ import annotations

from ..context import ImportContext, Unsupported, converter

_COMPARE = {"Equal": "equal", "Less": "less", "Greater": "greater", "LessOrEqual": "less_equal",
            "GreaterOrEqual": "greater_equal"}
_LOGICAL = {"And": "and", "Or": "or", "Xor": "xor"}


def _same_dtype(ctx: ImportContext, node):
    dtypes = {ctx.dtype(i) for i in node.input if i}
    if len(dtypes) != 1:
        raise Unsupported(f"inputs of different dtypes {sorted(dtypes)}")


def _binary(kind):
    def convert(ctx: ImportContext, node):
        _same_dtype(ctx, node)
        ctx.emit(kind, list(node.input), node.output[0], name=node.name)
    return convert


for _onnx, _ours in {**_COMPARE, **_LOGICAL}.items():
    converter(_onnx, since=7)(_binary(_ours))


@converter("Not", since=1)
def not_(ctx: ImportContext, node):
    ctx.emit("not", [node.input[0]], node.output[0], name=node.name)


@converter("Where", since=9)
def where(ctx: ImportContext, node):
    ctx.emit("where", list(node.input), node.output[0], name=node.name)


@converter("IsNaN", since=9)
def is_nan(ctx: ImportContext, node):
    ctx.emit("isnan", [node.input[0]], node.output[0], name=node.name)


@converter("IsInf", since=10)
def is_inf(ctx: ImportContext, node):
    ctx.emit("isinf", [node.input[0]], node.output[0],
             {"positive": bool(ctx.attr(node, "detect_positive", 1)),
              "negative": bool(ctx.attr(node, "detect_negative", 1))}, name=node.name)
