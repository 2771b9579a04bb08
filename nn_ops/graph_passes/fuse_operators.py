"""fuse_operators: partition the graph's nodes into kernels (fused groups).

Accepts a graph whose nodes are topologically ordered.  Guarantees every node is in
exactly one group, each group computes one value (its last node's output) that may be
used outside it, and every other value computed inside a group is used only inside it.

Groups are returned in an order they can run in (by their last node).

Rules: an ``injective`` node (elementwise, broadcast, data movement) joins the group
that produces one of its inputs when that input is the group's result, has the same
shape as the node's output (it is read elementwise, not broadcast), is used by nothing
else and is not a graph output, and the group is an ``anchor`` (conv2d, dense, matmul)
or ``injective`` group.  So ``conv -> add(bias) -> add(residual) -> relu`` is one kernel.
``reduce`` ops (pools, softmax) start their own kernel; ``alias`` ops (reshape,
identity) are no kernel at all: their output is their input's memory.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from ..graph import Graph, Node
from ..graph_ops import OPS

MAX_GROUP_NODES = 8


@dataclass
class FusedGroup:
    nodes: List[Node]
    kind: str
    output: str = ""
    inputs: List[str] = field(default_factory=list)

    @property
    def name(self) -> str:
        return "_".join(dict.fromkeys(n.op_type for n in self.nodes))[:60]


def fuse_operators(g: Graph) -> List[FusedGroup]:
    users = g.consumer_map()
    producer_group = {}
    groups: List[FusedGroup] = []
    for node in g.nodes:
        kind = OPS[node.op_type].kind
        target = None
        if kind == "injective":
            for i in node.inputs:
                grp = producer_group.get(i)
                if grp is None or grp.kind not in ("anchor", "injective") or grp.output != i:
                    continue
                if len(users.get(i, [])) != 1 or i in g.outputs or len(grp.nodes) >= MAX_GROUP_NODES:
                    continue
                if g.shape(i) != g.shape(node.outputs[0]) or g.values[i].dtype != g.values[node.outputs[0]].dtype:
                    continue
                target = grp
                break
        if target is None:
            target = FusedGroup([], kind)
            groups.append(target)
        target.nodes.append(node)
        target.output = node.outputs[0]
        producer_group[node.outputs[0]] = target
    # a group runs when its last node can: after the producers of all its inputs
    position = {id(n): k for k, n in enumerate(g.nodes)}
    groups.sort(key=lambda grp: position[id(grp.nodes[-1])])
    for grp in groups:
        inside = {n.outputs[0] for n in grp.nodes}
        grp.inputs = list(dict.fromkeys(i for n in grp.nodes for i in n.inputs if i not in inside))
    return groups
