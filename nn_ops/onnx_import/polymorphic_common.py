"""What the parts of the shape-polymorphic walk share (``polymorphic.py``, ``polymorphic_cnn.py``):
ONNX elementwise nodes as DSL expressions, node attributes, and symbolic shapes compared and shown."""
from __future__ import annotations

from typing import Callable, Dict, NamedTuple, Optional, Tuple

import numpy as np

from ...dsl import intrinsics as lwi
from ...dsl.expr import Const, binary, cast, const, select
from ..network import symbolic as S
from ..network.op_table import pow_constant
from ..ops import elementwise as ew

class KernelVariant(NamedTuple):
    """A second kernel of a call (``_Builder.kernel``'s ``variants``): built by ``make`` with the same
    arguments, run at bindings where the sympy ``size`` is at most ``at_most``; ``key`` tells it apart
    in the kernel table, ``what`` names its module; ``multiples`` {sympy size of an input: k} builds
    it over that size as ``k`` times a size var of its own (where the condition says ``k`` divides it);
    ``units``: sympy sizes that are the constant 1 in this kernel (where the condition says so)."""
    size: object
    at_most: int
    make: Callable
    key: str
    what: str
    multiples: Optional[Dict[object, int]] = None
    units: Tuple = ()


BINARY = {"Add": lambda a, b: a + b, "Sub": lambda a, b: a - b, "Mul": lambda a, b: a * b,
          "Div": lambda a, b: a / b, "Max": lambda a, b: _max(a, b), "Min": lambda a, b: _min(a, b),
          "Pow": lambda a, b: _pow(a, b)}
UNARY = {"Relu": lambda x: _max(x, const(0.0, x.dtype)), "Erf": lwi.erf, "Tanh": lwi.tanh,
         "Sigmoid": lwi.sigmoid, "Exp": lwi.exp, "Sqrt": lwi.sqrt, "Neg": lambda x: -x, "Abs": lwi.abs,
         "Identity": lambda x: x, "Log": lwi.log, "Floor": lwi.floor, "Ceil": lwi.ceil,
         "Reciprocal": lambda x: const(1.0, x.dtype) / x}
TERNARY = {"Where": select}      # (a causal mask's Where: its condition a constant)
#: elementwise ops with attributes: (their attribute values, read from the node; the value of the op
#: on an operand and those): MobileNetV3's hard swish and sigmoid, YOLO's leaky ReLU
WITH_ATTRS = {
    "LeakyRelu": (lambda node: (float(_attr(node, "alpha", 0.01)),), ew.leaky_relu_value),
    "HardSigmoid": (lambda node: (float(_attr(node, "alpha", 0.2)), float(_attr(node, "beta", 0.5))),
                    ew.hard_sigmoid_value),
    "HardSwish": (lambda node: (), ew.hard_swish_value),
}


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
            or node.op_type == "Cast")


def node_params(node):
    """What of an elementwise node besides its type and operands its kernel depends on (a Cast's
    dtype, a LeakyRelu's slope): part of the kernel's structural key."""
    if node.op_type in WITH_ATTRS:
        return WITH_ATTRS[node.op_type][0](node)
    return _attr(node, "to", None)


def _apply(node, args):
    """The DSL expression of elementwise ``node`` on ``args``."""
    if node.op_type == "Cast":
        from onnx import helper
        return cast(str(np.dtype(helper.tensor_dtype_to_np_dtype(_attr(node, "to", 1)))), args[0])
    if node.op_type in TERNARY:
        return TERNARY[node.op_type](*args)
    if node.op_type in WITH_ATTRS:
        read, value = WITH_ATTRS[node.op_type]
        return value(args[0], *read(node))
    return BINARY[node.op_type](*args) if node.op_type in BINARY else UNARY[node.op_type](args[0])


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
