"""flatten_row_ops: a softmax or layer norm over the last axis of a value whose leading sizes are
symbolic runs on a ``(rows, n)`` view of it.

Over several symbolic leading extents (``[batch, seq, 256]``) the row kernel's loops cannot be fused
(a fused symbolic index divides, and bound inference then computes a stage whole at every
iteration): the zoo encoder's layer norm at 4 x 64 took 1.46 ms against 0.013 ms over
``[batch*seq, 256]`` (``profile``, 2 threads, under load; the network: ``python -m
benchmarks.graph_pipeline``).  So
``y = op(x)`` becomes ``y = reshape(op(reshape(x, [rows, n])), shape)``; ``collapse_reshapes`` then
joins the views with their neighbours.  Static shapes are left alone (their loops fuse).  Accepts
any graph; guarantees the same values.
"""
from __future__ import annotations

from ..graph import Graph
from .. import symbolic as S

_ROW_OPS = ("softmax", "layer_norm")


def flatten_row_ops(g: Graph) -> Graph:
    nodes, g.nodes = g.nodes, []
    for node in nodes:
        shape = g.shape(node.inputs[0]) if node.op_type in _ROW_OPS else ()
        if len(shape) <= 2 or all(S.is_static(d) for d in shape[:-1]) or \
                node.attrs.get("axis", -1) not in (-1, len(shape) - 1) or \
                any(len(g.shape(i)) != 1 for i in node.inputs[1:]):
            g.nodes.append(node)
            continue
        rows = (S.simplify(S.product(shape[:-1])), shape[-1])
        x, y = node.inputs[0], node.outputs[0]
        x_rows, y_rows = g.fresh_name(x + ".rows"), g.fresh_name(y + ".rows")
        g.add_value(x_rows, rows, g.values[x].dtype)
        g.add_value(y_rows, rows, g.values[y].dtype)
        g.add_node("reshape", [x], [x_rows], {"shape": rows}, x_rows)
        g.add_node(node.op_type, [x_rows] + node.inputs[1:], [y_rows], dict(node.attrs, axis=-1), node.name)
        g.add_node("reshape", [y_rows], [y], {"shape": tuple(shape)}, y + ".shape")
    return g
