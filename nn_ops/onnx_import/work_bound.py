"""How much compute one node may ask for, checked at import from its inputs' static shapes.

A node whose cost grows faster than its output (a matrix product: output x the reduced length; an
einsum: the product of all its index sizes; CumSum / CumProd and TopK: each line's length squared,
as loopweave computes them data-parallel; a recurrent layer: steps x gates x hidden x (input +
hidden); LRN: output x window, at most twice the channels) can ask for hours of work from inputs of a modest size.  Past
``MAX_NODE_WORK`` operations (about a minute on one core; the windowed ops' bound too,
``validate.MAX_WINDOW_WORK``) it is refused with an ``Unsupported`` naming the shapes, which
``validate.check_attributes`` raises before anything is built.  Symbolic sizes are not bounded here
(they are known at run time).
"""
from __future__ import annotations

from typing import List, Optional, Sequence

import numpy as np

from .context import ImportContext, Unsupported, onnx_attrs

# operations one node may cost: about a minute on one core; the largest layers of common models are
# 10-100x below it
MAX_NODE_WORK = 2 ** 42


def input_shape(ctx: ImportContext, node, k: int = 0):
    """The shape of ``node``'s input ``k`` where the graph or a constant knows it, else None."""
    if len(node.input) <= k or not node.input[k]:
        return None
    value = ctx.graph.values.get(node.input[k])
    if value is not None:
        return tuple(value.shape)
    const = ctx.const(node.input[k])
    return None if const is None else tuple(const.shape)


def _int_attr(attrs: dict, name: str, default: int) -> int:
    value = attrs.get(name, default)
    return int(value) if isinstance(value, (int, np.integer)) else default


def _static(shape) -> Optional[List[int]]:
    if shape is None or not all(isinstance(d, (int, np.integer)) for d in shape):
        return None
    return [int(d) for d in shape]


def _product(values: Sequence[int]) -> int:
    out = 1
    for v in values:
        out *= int(v)
    return out


def _matmul_work(a, b) -> Optional[int]:
    if not a or not b:
        return None
    a2 = [1] + a if len(a) == 1 else a
    b2 = b + [1] if len(b) == 1 else b
    try:
        batch = np.broadcast_shapes(tuple(a2[:-2]), tuple(b2[:-2]))
    except ValueError:
        return None         # validate says what is wrong
    return _product(batch) * a2[-2] * b2[-1] * a2[-1]


def _einsum_work(equation: str, shapes) -> Optional[int]:
    """The product of every index's size (what a loop over all of them costs); None when the
    equation has an ellipsis or does not match the shapes (the converter says why)."""
    lhs = equation.replace(" ", "").split("->")[0]
    terms = lhs.split(",")
    if "." in lhs or len(terms) != len(shapes):
        return None
    sizes = {}
    for term, shape in zip(terms, shapes):
        if shape is None or len(term) != len(shape):
            return None
        for letter, d in zip(term, shape):
            sizes[letter] = max(sizes.get(letter, 1), d)
    return _product(sizes.values())


def node_work(ctx: ImportContext, node) -> Optional[int]:
    """The multiply-adds (or comparisons) ``node`` costs as loopweave computes it, when its inputs'
    shapes are static; None when unknown or not bounded here."""
    op = node.op_type
    attrs = onnx_attrs(node)
    shapes = [_static(input_shape(ctx, node, k)) for k in range(len(node.input))]
    first = shapes[0] if shapes else None
    if op in ("MatMul", "MatMulInteger") and len(shapes) >= 2:
        return _matmul_work(shapes[0], shapes[1])
    if op == "QLinearMatMul" and len(shapes) >= 4:
        return _matmul_work(shapes[0], shapes[3])
    if op == "Gemm" and len(shapes) >= 2 and shapes[0] and shapes[1] and len(shapes[0]) == len(shapes[1]) == 2:
        m, k = shapes[0][::-1] if _int_attr(attrs, "transA", 0) else shapes[0]
        n = shapes[1][0] if _int_attr(attrs, "transB", 0) else shapes[1][1]
        return m * n * k
    if op == "Einsum":
        equation = attrs.get("equation")
        if isinstance(equation, bytes):
            equation = equation.decode("utf-8", "replace")
        return _einsum_work(equation, shapes) if isinstance(equation, str) else None
    if op in ("CumSum", "CumProd", "TopK") and first:
        axis = None
        if op == "TopK":
            axis = _int_attr(attrs, "axis", -1)
        else:
            const = ctx.const(node.input[1]) if len(node.input) > 1 else None
            axis = int(np.asarray(const).reshape(-1)[0]) if const is not None and np.asarray(const).size else None
        if axis is None or not -len(first) <= axis < len(first):
            return None
        return _product(first) * first[axis]
    if op in ("LSTM", "GRU", "RNN") and first and len(shapes) > 1 and shapes[1] and len(first) == 3 \
            and len(shapes[1]) == 3:
        steps, batch, inputs = first
        directions, gates_hidden, _ = shapes[1]
        hidden = gates_hidden // {"LSTM": 4, "GRU": 3, "RNN": 1}[op]
        return steps * batch * directions * gates_hidden * (inputs + hidden)
    if op == "LRN" and first and len(first) >= 2:
        size = _int_attr(attrs, "size", 1)       # the kernel's window stops at twice the channels
        return _product(first) * max(1, min(size, 2 * first[1]))
    return None


def check_work(ctx: ImportContext, node) -> None:
    """Refuse (``Unsupported``) a node whose ``node_work`` exceeds ``MAX_NODE_WORK``."""
    work = node_work(ctx, node)
    if work is not None and work > MAX_NODE_WORK:
        shapes = [input_shape(ctx, node, k) for k in range(len(node.input))]
        described = ", ".join(f"{name!r} {list(s)}" for name, s in zip(node.input, shapes) if s is not None)
        raise Unsupported(f"over inputs {described} it asks for {work:.3g} operations, more than the limit of "
                           f"{MAX_NODE_WORK:.3g} (about a minute of compute); such sizes are almost certainly a "
                           f"mistake")
