"""Converters for elementwise and broadcasting ops."""
from __future__ import annotations

import numpy as np

from ..context import ImportContext, Unsupported, check_size, converter

_BINARY = {"Add": "add", "Sub": "sub", "Mul": "mul", "Div": "div", "Max": "max", "Min": "min"}
_UNARY = {"Relu": "relu", "Sigmoid": "sigmoid", "Tanh": "tanh", "HardSwish": "hard_swish", "Exp": "exp",
          "Sqrt": "sqrt", "Neg": "neg"}


def _float_only(ctx, node):
    for i in node.input:
        if i and not ctx.dtype(i).startswith("float"):
            raise Unsupported(f"input {i!r} has dtype {ctx.dtype(i)}; only float tensors are supported")


def _numeric(ctx, node):
    """Float or integer inputs, all of one dtype (ONNX's arithmetic never mixes them)."""
    dtypes = {ctx.dtype(i) for i in node.input if i}
    if len(dtypes) != 1 or "bool" in dtypes:
        raise Unsupported(f"inputs of dtype(s) {', '.join(sorted(dtypes))}; one numeric dtype is supported")
    return dtypes.pop()


def _binary(op_type):
    def convert(ctx: ImportContext, node):
        dtype = _numeric(ctx, node)
        if op_type == "div" and not dtype.startswith("float"):
            op_type_here = "trunc_div"      # integer division truncates toward zero, as in numpy/ONNX
        else:
            op_type_here = op_type
        inputs = [i for i in node.input if i]
        if len(inputs) == 1 and op_type in ("max", "min"):     # variadic Max/Min of one input
            ctx.emit("identity", inputs, node.output[0], name=node.name)
            return
        if len(inputs) != 2 and op_type not in ("max", "min"):
            raise Unsupported(f"{len(inputs)} inputs (2 expected)")
        acc = inputs[0]
        for k, other in enumerate(inputs[1:]):
            out = node.output[0] if k == len(inputs) - 2 else ctx.graph.fresh_name(f"{node.output[0]}.{k}")
            ctx.emit(op_type_here, [acc, other], out, name=node.name if out == node.output[0] else out)
            acc = out
    return convert


def _unary(op_type):
    def convert(ctx: ImportContext, node):
        if op_type in ("relu", "neg"):
            _numeric(ctx, node)
        else:
            _float_only(ctx, node)
        ctx.emit(op_type, [node.input[0]], node.output[0], name=node.name)
    return convert


for _onnx, _ours in _BINARY.items():
    converter(_onnx, since=7)(_binary(_ours))
for _onnx, _ours in _UNARY.items():
    converter(_onnx, since=6)(_unary(_ours))


@converter("Clip", since=11)
def clip(ctx: ImportContext, node):
    _numeric(ctx, node)
    lo = ctx.require_const(node, 1, "min") if len(node.input) > 1 and node.input[1] else None
    hi = ctx.require_const(node, 2, "max") if len(node.input) > 2 and node.input[2] else None
    attrs = {"min": None if lo is None else float(lo.reshape(())),
             "max": None if hi is None else float(hi.reshape(()))}
    ctx.emit("clip", [node.input[0]], node.output[0], attrs, name=node.name)


@converter("LeakyRelu", since=6)
def leaky_relu(ctx: ImportContext, node):
    ctx.emit("leaky_relu", [node.input[0]], node.output[0], {"alpha": float(ctx.attr(node, "alpha", 0.01))},
             name=node.name)


@converter("HardSigmoid", since=6)
def hard_sigmoid(ctx: ImportContext, node):
    ctx.emit("hard_sigmoid", [node.input[0]], node.output[0],
             {"alpha": float(ctx.attr(node, "alpha", 0.2)), "beta": float(ctx.attr(node, "beta", 0.5))},
             name=node.name)


@converter("Identity", since=1)
def identity(ctx: ImportContext, node):
    ctx.emit("identity", [node.input[0]], node.output[0], name=node.name)


@converter("Dropout", since=12)
def dropout(ctx: ImportContext, node):
    """Inference (or a zero ratio): the output is the input and the mask all True."""
    # training_mode must be known (a run-time value makes the model specialise on it)
    training = ctx.require_const(node, 2, "training_mode") if len(node.input) > 2 and node.input[2] else None
    if training is not None and bool(np.asarray(training).reshape(())):
        ratio = ctx.require_const(node, 1, "ratio") if len(node.input) > 1 and node.input[1] else 0.5
        if float(np.asarray(ratio).reshape(())) != 0.0:
            raise Unsupported("training_mode=True with a nonzero ratio (random dropout)")
    ctx.emit("identity", [node.input[0]], node.output[0], name=node.name)
    if len(node.output) > 1 and node.output[1]:
        check_size(ctx.shape(node.input[0]), "bool", f"the mask {node.output[1]!r}")
        everywhere = ctx.add_constant(node.output[1] + ".kept", np.ones(ctx.shape(node.input[0]), bool))
        ctx.emit("identity", [everywhere], node.output[1], name=node.name + ".mask")
