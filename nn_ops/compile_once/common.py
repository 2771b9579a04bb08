"""What the parts of the shape-polymorphic walk share (``builder.py``, ``cnn.py``):
ONNX elementwise nodes as DSL expressions, node attributes, and symbolic shapes compared and shown."""
from __future__ import annotations

import numpy as np

from ...dsl import intrinsics as lwi
from ...dsl.bitwise import bitwise_not, shift_left, shift_right
from ...dsl.expr import Const, binary, cast, const, logical_not, select
from ..network import symbolic as S
from ..network.op_table import pow_constant
from ..ops import bitwise
from ..ops import elementwise as ew
from ..ops import logic as logic_ops
from ..ops import math as math_ops
from ..ops.norm import gelu_value
from ..onnx_import.converters.math import UNARY_MATH

BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
          "Div": lambda a, b: a / b, "Max": lambda a, b: _max(a, b), "Min": lambda a, b: _min(a, b),
          "Pow": lambda a, b: _pow(a, b), "PRelu": math_ops.BINARY["prelu"]}
UNARY = {"Relu": lambda x: _max(x, const(0.0, x.dtype)), "Erf": lwi.erf, "Tanh": lwi.tanh,
         "Sigmoid": lwi.sigmoid, "Exp": lwi.exp, "Sqrt": lwi.sqrt, "Neg": lambda x: -x, "Abs": lwi.abs,
         "Identity": lambda x: x, "Log": lwi.log, "Floor": lwi.floor, "Ceil": lwi.ceil,
         "Reciprocal": lambda x: const(1.0, x.dtype) / x}
TERNARY = {"Where": select}      # (a causal mask's Where: its condition a constant)
#: elementwise ops with attributes: (their attribute values, read from the node; the value of the op
#: on its operands and those): MobileNetV3's hard swish and sigmoid, YOLO's leaky ReLU, the math
#: activations of ``ops/math.py`` (as the static path computes them), GELU, Mod
WITH_ATTRS = {
    "LeakyRelu": (lambda node: (float(_attr(node, "alpha", 0.01)),), ew.leaky_relu_value),
    "HardSigmoid": (lambda node: (float(_attr(node, "alpha", 0.2)), float(_attr(node, "beta", 0.5))),
                    ew.hard_sigmoid_value),
    "HardSwish": (lambda node: (), ew.hard_swish_value),
    "Gelu": (lambda node: (_attr(node, "approximate", "none"),), gelu_value),
    "Mod": (lambda node: (int(_attr(node, "fmod", 0)),),
            lambda a, b, fmod: math_ops.BINARY["fmod" if fmod else "mod"](a, b)),
    "IsInf": (lambda node: (bool(_attr(node, "detect_positive", 1)), bool(_attr(node, "detect_negative", 1))),
              math_ops.is_inf_value),
    "BitShift": (lambda node: (_attr(node, "direction", "LEFT"),),
                 lambda a, b, direction: (shift_left if direction == "LEFT" else shift_right)(a, b)),
    # a gated FFN's ``swish_alpha(gate) * value`` (the static converter's swish then mul)
    "SwiGLU": (lambda node: (float(_attr(node, "alpha", 1.0)),),
               lambda a, b, alpha: math_ops.UNARY["swish"][0](a, {"alpha": alpha}) * b),
}


def _math_unary(kind: str, defaults: dict):
    """A WITH_ATTRS entry for ``ops/math.py``'s op ``kind`` (its attributes' ONNX defaults)."""
    def read(node):
        return tuple(float(_attr(node, k, v)) for k, v in defaults.items())

    def value(v, *params):
        return math_ops.UNARY[kind][0](v, dict(zip(defaults, params)))
    return read, value


WITH_ATTRS.update((name, _math_unary(kind, defaults)) for name, (kind, defaults) in UNARY_MATH.items()
                  if name not in UNARY)
#: ops of float operands only (ONNX's type constraints; the static path refuses the others too)
FLOAT_ONLY = {name for name, (kind, _) in UNARY_MATH.items() if math_ops.UNARY[kind][1]} | {
    "Erf", "Tanh", "Sigmoid", "Exp", "Sqrt", "Gelu", "LeakyRelu", "HardSigmoid", "HardSwish", "IsNaN", "IsInf", "Mean",
    "SwiGLU"}
#: elementwise ops with a bool result, or of bool operands: in dense and elementwise kernels, not in a
#: convolution's epilogue (whose values are float blocks)
PREDICATES = {**{name: logic_ops.COMPARE[kind] for name, kind in
                 (("Equal", "equal"), ("Less", "less"), ("Greater", "greater"), ("LessOrEqual", "less_equal"),
                  ("GreaterOrEqual", "greater_equal"))},
              "And": logic_ops.LOGICAL["and"], "Or": logic_ops.LOGICAL["or"], "Xor": logic_ops.LOGICAL["xor"],
              "Not": logical_not, "IsNaN": math_ops.is_nan_value}
#: integer-only ops (not in a convolution's epilogue either): bitwise logic and shifts, as the static
#: path computes them (``ops/bitwise.py``: numpy's answer for any shift amount)
INTEGER = {"BitwiseAnd": bitwise.BINARY["bitwise_and"], "BitwiseOr": bitwise.BINARY["bitwise_or"],
           "BitwiseXor": bitwise.BINARY["bitwise_xor"], "BitwiseNot": bitwise_not}
#: ops of any number of operands (folded left to right, as onnxruntime adds them)
VARIADIC = ("Sum", "Mean")


def _pow(a, b):
    """A constant exponent as the static path computes it (``x ** 3`` of GPT-2's tanh GELU as two
    products, not a libm ``powf`` per element: the polymorphic FFN kernel took 2.5x the static one)."""
    return pow_constant(a, float(b.value), a.dtype) if isinstance(b, Const) else lwi.pow(a, b)


def _max(a, b):
    return binary("max", a, b)


def _min(a, b):
    return binary("min", a, b)


def _elementwise(node) -> bool:
    return (node.op_type in BINARY or node.op_type in UNARY or node.op_type in TERNARY or node.op_type in WITH_ATTRS
            or node.op_type in PREDICATES or node.op_type in VARIADIC or node.op_type in INTEGER
            or node.op_type in ("Cast", "CastLike", "Clip"))


def node_params(node):
    """What of an elementwise node besides its type and operands its kernel depends on (a Cast's
    dtype, a LeakyRelu's slope, an opset-6 Clip's bounds): part of the kernel's structural key."""
    if node.op_type in WITH_ATTRS:
        return WITH_ATTRS[node.op_type][0](node)
    if node.op_type == "Clip":
        return (_attr(node, "min", None), _attr(node, "max", None))
    return _attr(node, "to", None)


def clip_value(v, low, high):
    """``v`` clipped to ``low`` and ``high`` (expressions or numbers; None: that side open)."""
    if high is not None:
        v = binary("min", v, high if hasattr(high, "dtype") else const(high, v.dtype))
    if low is not None:
        v = binary("max", v, low if hasattr(low, "dtype") else const(low, v.dtype))
    return v


def _apply(node, args):
    """The DSL expression of elementwise ``node`` on ``args`` (one per input, None for an input left out)."""
    op = node.op_type
    if op == "Cast":
        from onnx import helper
        return cast(str(np.dtype(helper.tensor_dtype_to_np_dtype(_attr(node, "to", 1)))), args[0])
    if op == "CastLike":    # to the type of its second operand (a value: see _Builder.computes)
        return cast(args[1].dtype, args[0])
    if op == "Clip":        # bounds as inputs (opset 11 on) or attributes (opset 6)
        bounds = [args[pos] if len(args) > pos and args[pos] is not None else _attr(node, name, None)
                  for pos, name in ((1, "min"), (2, "max"))]
        return clip_value(args[0], *bounds)
    args = [a for a in args if a is not None]
    if op in VARIADIC:
        total = args[0]
        for a in args[1:]:
            total = total + a
        return total * const(1.0 / len(args), total.dtype) if op == "Mean" and len(args) > 1 else total
    if op in TERNARY:
        return TERNARY[op](*args)
    if op in PREDICATES:
        return PREDICATES[op](*args)
    if op in INTEGER:
        return INTEGER[op](*args)
    if op in WITH_ATTRS:
        read, value = WITH_ATTRS[op]
        return value(*args, *read(node))
    return BINARY[op](*args) if op in BINARY else UNARY[op](args[0])


def _same(a, b) -> bool:
    return a is not None and len(a) == len(b) and all(S.equal(x, y) is True for x, y in zip(a, b))


def _show(shape) -> str:
    return "[" + ", ".join(S.show(d) for d in shape) + "]"


def _attr(node, name, default):
    """Attribute ``name`` of ``node`` (a string one as ``str``), else ``default``."""
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return value.decode() if isinstance(value, bytes) else value
    return default


def conv_transpose_attrs(node):
    """(stride, dilation, pads as top, left, bottom, right, output padding, groups) of a 2-d
    ConvTranspose, or None where its output_shape or auto_pad would decide the padding."""
    if _attr(node, "output_shape", None) or _attr(node, "auto_pad", "NOTSET") != "NOTSET":
        return None
    return (tuple(_attr(node, "strides", None) or (1, 1)), tuple(_attr(node, "dilations", None) or (1, 1)),
            tuple(_attr(node, "pads", None) or (0, 0, 0, 0)), tuple(_attr(node, "output_padding", None) or (0, 0)),
            int(_attr(node, "group", 1)))
