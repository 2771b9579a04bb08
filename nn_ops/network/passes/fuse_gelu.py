"""fuse_gelu: GELU as exporters write it (the erf form, and the tanh form) becomes one ``gelu`` node.

torch and Hugging Face export ``x * 0.5 * (1 + erf(x / sqrt(2)))`` as five or six
elementwise nodes in which ``x`` is read twice.  An anchor whose output has two readers
cannot take them as its epilogue (fuse_operators needs a single reader), so the GELU
cost a kernel and a pass over memory; as one node it fuses into the matmul before it.

Matches (constants within 1e-4): ``Div(x, sqrt2) | Mul(x, 1/sqrt2)`` -> ``Erf`` ->
``Add(1)`` -> ``Mul(x, .) -> Mul(., 0.5)`` or ``Mul(Mul(x, 0.5), .)``; and GPT-2's tanh form
(``gelu_new``, HF's export) ``Mul(sqrt(2/pi), Add(x, Mul(Pow(x, 3), 0.044715)))`` -> ``Tanh``
-> the same tail, as ``gelu`` with ``approximate="tanh"``.  Accepts any graph;
guarantees the same values (up to float rounding); leaves the old nodes to
eliminate_dead_code.
"""
from __future__ import annotations

import math
from typing import Optional

from ..graph import Graph, Node

SQRT2 = math.sqrt(2.0)
SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _scalar(g: Graph, name: str) -> Optional[float]:
    arr = g.initializers.get(name)
    return float(arr.reshape(())) if arr is not None and arr.size == 1 else None


def _near(value: Optional[float], target: float) -> bool:
    return value is not None and abs(value - target) <= 1e-4 * abs(target)


def _other(node: Node, name: str) -> Optional[str]:
    """The other input of a binary node one of whose inputs is ``name``."""
    if len(node.inputs) != 2 or name not in node.inputs:
        return None
    return node.inputs[1] if node.inputs[0] == name else node.inputs[0]


def _scaled_input(g: Graph, node: Node) -> Optional[str]:
    """x when ``node`` is x / sqrt(2) or x * (1/sqrt(2))."""
    if node.op_type == "div" and _near(_scalar(g, node.inputs[1]), SQRT2):
        return node.inputs[0]
    if node.op_type == "mul":
        for x, c in (node.inputs, reversed(node.inputs)):
            if _near(_scalar(g, c), 1 / SQRT2):
                return x
    return None


def _cubic_inner(g: Graph, producers, node: Node) -> Optional[str]:
    """x when ``node`` is sqrt(2/pi) * (x + 0.044715 * x^3), the tanh GELU's argument (either operand
    order; x^3 as Pow(x, 3), i.e. ``pow_const``)."""
    if node.op_type != "mul":
        return None
    for s, c in (node.inputs, node.inputs[::-1]):
        if not _near(_scalar(g, c), SQRT_2_OVER_PI):
            continue
        add = producers.get(s)
        if add is None or add.op_type != "add" or len(add.inputs) != 2:
            continue
        for x, m in (add.inputs, add.inputs[::-1]):
            cube = producers.get(m)
            if cube is None or cube.op_type != "mul" or len(cube.inputs) != 2:
                continue
            for p, k in (cube.inputs, cube.inputs[::-1]):
                power = producers.get(p)
                if _near(_scalar(g, k), 0.044715) and power is not None and power.op_type == "pow_const" \
                        and power.inputs == [x] and _near(float(power.attrs.get("exponent", 0.0)), 3.0):
                    return x
    return None


def fuse_gelu(g: Graph) -> Graph:
    producers = g.producer_map()
    users = g.consumer_map()

    def sole_user(name: str) -> Optional[Node]:
        found = users.get(name, [])
        return found[0] if len(found) == 1 and name not in g.outputs else None

    for fn in [n for n in g.nodes if n.op_type in ("erf", "tanh")]:
        scale = producers.get(fn.inputs[0])
        if fn.op_type == "erf":
            x = _scaled_input(g, scale) if scale is not None else None
        else:
            x = _cubic_inner(g, producers, scale) if scale is not None else None
        add = sole_user(fn.outputs[0])
        if x is None or add is None or add.op_type != "add" or not _near(_scalar(g, _other(add, fn.outputs[0]) or ""), 1.0):
            continue
        mul = sole_user(add.outputs[0])
        if mul is None or mul.op_type != "mul":
            continue
        other = _other(mul, add.outputs[0])
        result = None
        if other == x:                                  # (x * (1 + erf)) * 0.5
            half = sole_user(mul.outputs[0])
            if half is not None and half.op_type == "mul" and _near(_scalar(g, _other(half, mul.outputs[0]) or ""), 0.5):
                result = half
        else:                                           # (x * 0.5) * (1 + erf)
            pre = producers.get(other)
            if pre is not None and pre.op_type == "mul" and x in pre.inputs and sole_user(other) is mul \
                    and _near(_scalar(g, _other(pre, x) or ""), 0.5):
                result = mul
        if result is None:
            continue
        index = g.nodes.index(result)
        g.nodes[index] = Node("gelu", [x], list(result.outputs),
                              {"approximate": "none" if fn.op_type == "erf" else "tanh"}, result.name)
    return g
