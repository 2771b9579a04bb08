"""Converters for BitwiseAnd/Or/Xor/Not and BitShift (integer tensors, numpy broadcasting)."""
from __future__ import annotations

from ..context import ImportContext, Unsupported, converter

_BINARY = {"BitwiseAnd": "bitwise_and", "BitwiseOr": "bitwise_or", "BitwiseXor": "bitwise_xor"}
_SHIFT = {"LEFT": "shift_left", "RIGHT": "shift_right"}


def _integer_inputs(ctx: ImportContext, node):
    """ONNX gives these ops integer inputs of one dtype; say so plainly for anything else."""
    found = {ctx.dtype(i) for i in node.input if i}
    if len(found) != 1 or not all(d.startswith(("int", "uint")) for d in found):
        raise Unsupported(f"inputs of dtype(s) {', '.join(sorted(found))}; one integer dtype is supported")


def _binary(kind: str):
    def convert(ctx: ImportContext, node):
        _integer_inputs(ctx, node)
        ctx.emit(kind, list(node.input), node.output[0], name=node.name)
    return convert


for _onnx, _ours in _BINARY.items():
    converter(_onnx, since=18)(_binary(_ours))


@converter("BitwiseNot", since=18)
def bitwise_not(ctx: ImportContext, node):
    _integer_inputs(ctx, node)
    ctx.emit("bitwise_not", [node.input[0]], node.output[0], name=node.name)


@converter("BitShift", since=11)
def bit_shift(ctx: ImportContext, node):
    """Unsigned types since opset 11, signed ones since 28; numpy's answer for any amount."""
    direction = ctx.attr(node, "direction")
    if direction not in _SHIFT:
        raise Unsupported(f"direction={direction!r} (LEFT or RIGHT)")
    _integer_inputs(ctx, node)
    ctx.emit(_SHIFT[direction], list(node.input), node.output[0], name=node.name)
