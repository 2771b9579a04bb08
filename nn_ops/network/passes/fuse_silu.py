"""fuse_silu: ``x * Sigmoid(x)`` (SiLU / swish, as torch exports ``nn.SiLU``) becomes one ``swish`` node.

``x`` is read twice, so the conv or matmul producing it cannot take the two nodes as its
epilogue (fuse_operators needs a single reader): EfficientNet-style networks paid a kernel
and a pass over memory per activation (49 ``sigmoid_mul`` kernels, a quarter of the run).
As one node it fuses into the conv before it.

Matches ``Mul(x, Sigmoid(x))`` in either operand order, when the Sigmoid's result is read by
that Mul only and is not a graph output.  Accepts any graph; guarantees the same values;
leaves the Sigmoid to eliminate_dead_code.
"""
from __future__ import annotations

from ..graph import Graph, Node


def fuse_silu(g: Graph) -> Graph:
    producers = g.producer_map()
    users = g.consumer_map()
    for index, node in enumerate(g.nodes):
        if node.op_type != "mul" or len(node.inputs) != 2:
            continue
        for x, gate in (node.inputs, node.inputs[::-1]):
            sig = producers.get(gate)
            if sig is not None and sig.op_type == "sigmoid" and sig.inputs == [x] and gate not in g.outputs \
                    and len(users.get(gate, [])) == 1 and g.values[x].dtype.startswith("float"):
                g.nodes[index] = Node("swish", [x], list(node.outputs), {"alpha": 1.0}, node.name)
                break
    return g
