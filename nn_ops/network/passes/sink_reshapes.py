"""sink_reshapes: elementwise ops move above a reshape that keeps the last axis.

ONNX exporters compute a 3-d Linear layer as ``MatMul`` on [B, S, K] (the importer makes
it a 2-d dense between reshapes) and then ``Add(bias)``; attention adds ``Div(scale)``
after a batched matmul.  A reshape is an alias, not a kernel, so the elementwise op
after it could not join the anchor's kernel.  Here ``f(reshape(y), other)`` becomes
``reshape(f(y, other'))``, repeated down a chain, so ``dense + bias + residual`` and
``matmul / scale`` fuse again.

Applies when the reshape's input comes from a kernel the op can join (an anchor or
injective op), the reshape keeps the last axis and every other operand is a scalar
constant, broadcasts along the last axis only, or has the full output shape (it is
viewed in the reshape's input shape; such views are never moved themselves, so every
step moves a reshape strictly down and the pass ends).  Accepts any graph; guarantees
the same values.  Symbolic sizes (sympy) are compared as expressions: two that are not the same
expression count as different, so where the pass cannot tell, nothing moves.
"""
from __future__ import annotations

import math

from ....errors import InternalError
from ..graph import Graph, Node
from ..op_table import OPS

ELEMENTWISE = {"add", "sub", "mul", "div", "max", "min", "relu", "clip", "sigmoid", "tanh", "leaky_relu",
               "hard_sigmoid", "hard_swish", "exp", "sqrt", "neg", "erf", "pow_const", "gelu", "swish", "cast"}


def _operand_for(g: Graph, name: str, out_shape, new_shape):
    """How ``name`` is read in the rewritten node: itself, a view of it, or None (cannot move)."""
    shape = g.shape(name)
    if tuple(shape) == tuple(out_shape):
        return None, tuple(new_shape)               # view it in the reshape's input shape
    if len(shape) > len(new_shape):
        # read as it is, it would broadcast the result to its own rank: (1, 64) + (1, 1, 64) is
        # (1, 1, 64), not the (1, 64) the rewritten node must have (a sequence of 1 token)
        return None, None
    if math.prod(shape) == 1 or (len(shape) <= 1 and (not shape or shape[0] == out_shape[-1])):
        return name, None
    if all(d == 1 for d in shape[:-1]) and shape[-1] == out_shape[-1]:
        return name, None
    return None, None


def sink_reshapes(g: Graph) -> Graph:
    made_views = set()  # reshapes this pass made of other operands: never sunk (that could undo a sink forever)
    budget = 4 * len(g.nodes) + 16      # each step moves a reshape down past one node
    changed = True
    while changed:
        changed = False
        budget -= 1
        if budget < 0:
            raise InternalError("sink_reshapes did not settle: a reshape keeps moving (a bug in the pass)")
        producers = g.producer_map()
        for index, node in enumerate(g.nodes):
            if node.op_type not in ELEMENTWISE or OPS[node.op_type].kind != "injective":
                continue
            out_shape = g.shape(node.outputs[0])
            src = next((i for i in node.inputs if i in producers and producers[i].op_type == "reshape"
                        and g.shape(i) == out_shape and i not in made_views), None)
            if src is None:
                continue
            y = producers[src].inputs[0]
            if y not in producers or OPS[producers[y].op_type].kind not in ("anchor", "injective"):
                continue        # only worth it (and only terminating) when y's kernel can take the op
            y_shape = g.shape(y)
            if not y_shape or not out_shape or y_shape[-1] != out_shape[-1] or y_shape == out_shape:
                continue
            new_inputs, views = [], []
            for i in node.inputs:
                if i == src:
                    new_inputs.append(y)
                    continue
                same, view = _operand_for(g, i, out_shape, y_shape)
                if same is None and view is None:
                    break
                if view is not None:
                    viewed = g.fresh_name(i + ".view")
                    made_views.add(viewed)
                    g.add_value(viewed, view, g.values[i].dtype)
                    views.append(Node("reshape", [i], [viewed], {"shape": view}, viewed))
                    new_inputs.append(viewed)
                else:
                    new_inputs.append(same)
            else:
                out = node.outputs[0]
                moved = g.fresh_name(out + ".pre")
                g.add_value(moved, y_shape, g.values[out].dtype)
                rewritten = Node(node.op_type, new_inputs, [moved], dict(node.attrs), node.name)
                back = Node("reshape", [moved], [out], {"shape": tuple(out_shape)}, out + ".reshape")
                g.nodes[index:index + 1] = views + [rewritten, back]
                changed = True
                break
    return g
