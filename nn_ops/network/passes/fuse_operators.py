"""fuse_operators: partition the graph's nodes into kernels (fused groups).

Accepts a graph whose nodes are topologically ordered.  Guarantees every node is in
exactly one group, each group computes one value (its last node's output) that may be
used outside it, and every other value computed inside a group is used only inside it.

Groups are returned in an order they can run in (by their last node).

Rules: an ``injective`` node (elementwise, broadcast, data movement) joins the group
that produces one of its inputs when that input is the group's result, has the same
shape as the node's output (it is read elementwise, not broadcast) and a dtype of the same
width (any dtype after the blocked anchors of ``CHANNEL_VECTOR_ANCHORS``), is used by nothing else
and is not a graph output, and the group is an ``anchor`` (conv2d, dense, matmul) or ``injective``
group.  So ``conv -> add(bias) -> add(residual) -> relu`` is one kernel.
``reduce`` ops (pools, softmax) start their own kernel; ``alias`` ops (reshape,
identity) are no kernel at all: their output is their input's memory.

A ``matmul`` takes in the transposes that make its operands, with the reshapes around them (an
attention head split: [S, H*D] -> [1, S, H, D] -> [1, H, S, D] -> [H, S, D]), when each is used by
the next alone (``_transposed_operand``): inlined, the matmul reads the projection's result where it
lies (a K^T operand packed per panel by register transposes, ``matmul._pack_transposed``), and the
copies are gone (the encoder: 3 of its 4 transposes a layer, 2 % of its run; ViT-Tiny 1.7 %, one run).
Over symbolic sizes a reshape whose index would divide by a run-time size (``batch*seq`` split into
``batch`` and ``seq``, ``symbolic_reshape.reshape_runs``) ends the chain: the kernel reads its source,
a value in memory, with the reshape's shape (a view), so the encoder's head splits join its attention
matmuls at every binding.

One anchor joins another: a 1x1 stride-1 ``conv2d_blocked`` joins the ``depthwise_blocked``
group that produces its input (MobileNetV2's depthwise -> project) under the same conditions,
when the maps have a constant ``MIN_FUSED_ROWS`` rows or more (of a symbolic height they stay
two kernels, as the compile-once path keeps them); its schedule computes the depthwise
rows inside its own (``nchwc.fused_depthwise``), so the depthwise result never goes
through memory (14-48 % less time for the pair).  With fewer rows the kernel, parallel over
rows only, leaves a core idle part of the time: on MobileNetV2's 7x7 maps the fused kernels
took 53 / 81 / 156 us against 48 / 76 / 138 us for the two kernels apart.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import List

from ....dsl import dtypes
from ..graph import Graph, Node
from .. import symbolic as S
from ..op_table import OPS
from ..symbolic_reshape import reshape_runs
from ...ops.nchwc import runs_unblocked
from ....target import resolve_target

MAX_GROUP_NODES = 8
#: blocked anchors whose epilogue runs over one channel block's vector whatever its dtypes, so a
#: quantized layer's DequantizeLinear -> float ops -> QuantizeLinear joins the kernel (the int8 conv's
#: and depthwise conv's uint8 results)
CHANNEL_VECTOR_ANCHORS = ("qconv2d_blocked", "qdepthwise_blocked")
MIN_FUSED_ROWS = 14


@dataclass
class FusedGroup:
    nodes: List[Node]
    kind: str
    output: str = ""
    inputs: List[str] = field(default_factory=list)

    def find_inputs(self) -> "FusedGroup":
        """Set ``inputs``: the values its nodes read that none of them computes, in first-use order."""
        inside = {n.outputs[0] for n in self.nodes}
        self.inputs = list(dict.fromkeys(i for n in self.nodes for i in n.inputs if i not in inside))
        return self

    @property
    def name(self) -> str:
        return "_".join(dict.fromkeys(n.op_type for n in self.nodes))[:60]


def _may_join(g: Graph, users, grp: FusedGroup, value: str) -> bool:
    """Whether a node reading ``value`` may join ``grp``: it is the group's result, read by that node
    only, not a graph output, and the group has room."""
    return (grp.output == value and len(users.get(value, [])) == 1 and value not in g.outputs
            and len(grp.nodes) < MAX_GROUP_NODES)


def _same_width(a: str, b: str) -> bool:
    """Whether a value of dtype ``a`` read into ``b`` keeps the group's vector width: an int32 product's
    Cast to float32 (a quantized layer's epilogue) joins it; a float32 -> float16 one would not."""
    return a == b or (a != "bool" and b != "bool" and dtypes.itemsize(a) == dtypes.itemsize(b))


def _is_pointwise_conv(g: Graph, node: Node) -> bool:
    """A 1x1 stride-1 unpadded ``conv2d_blocked`` on a blocked input."""
    if node.op_type != "conv2d_blocked" or len(g.shape(node.inputs[0])) != 5:
        return False
    attrs = node.attrs
    return (tuple(g.shape(node.inputs[1])[2:4]) == (1, 1) and tuple(attrs["stride"]) == (1, 1)
            and not any(attrs["padding"]) and tuple(attrs["dilation"]) == (1, 1))


def _unblocks_conv(g: Graph, grp: FusedGroup, node: Node) -> bool:
    """Whether ``node`` is the ``from_blocked`` of a static blocked conv's group (its epilogue
    elementwise), keeping every channel, where the conv's kernel stores NCHW rows itself on the
    target compiled for (``nchwc.runs_unblocked``)."""
    conv = grp.nodes[0]
    if node.op_type != "from_blocked" or conv.op_type != "conv2d_blocked" or conv.attrs.get("groups", 1) != 1 or \
            any(OPS[n.op_type].kind != "injective" for n in grp.nodes[1:]):
        return False
    shape = g.shape(node.inputs[0])
    return all(S.is_static(d) for d in shape) and g.shape(node.outputs[0])[1] == shape[1] * shape[4] and \
        runs_unblocked(shape, g.shape(conv.inputs[1]), resolve_target("llvm"))


def _transposed_operand(g: Graph, users, producer_group, value: str) -> List[FusedGroup]:
    """The groups that make matmul operand ``value`` as a transpose of a value in memory, maybe between
    reshapes (an attention head split: [S, H*D] -> [1, S, H, D] -> [1, H, S, D] -> [H, S, D]), in order,
    when each is that one node and its result is read by the next alone; else []."""
    chain, transposes = [], 0
    while True:
        grp = producer_group.get(value)
        if grp is None or len(grp.nodes) != 1 or value in g.outputs or len(users.get(value, [])) != 1:
            break
        op = grp.nodes[0].op_type
        if op not in ("reshape", "transpose") or (op == "transpose" and transposes):
            break
        transposes += op == "transpose"
        chain.append(grp)
        source, value = value, grp.nodes[0].inputs[0]
        if op == "reshape" and not all(isinstance(d, int) for d in g.shape(source)) and \
                reshape_runs(g.shape(value), g.shape(source)) is None:
            break       # its index needs a size apart: the kernel reads its source in memory with its shape
    return chain[::-1] if transposes else []


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
                if grp is None or grp.kind not in ("anchor", "injective") or not _may_join(g, users, grp, i):
                    continue
                if _unblocks_conv(g, grp, node):
                    target = grp
                    break
                if g.shape(i) != g.shape(node.outputs[0]) or not (
                        _same_width(g.values[i].dtype, g.values[node.outputs[0]].dtype)
                        or grp.nodes[0].op_type in CHANNEL_VECTOR_ANCHORS):
                    continue
                target = grp
                break
        elif _is_pointwise_conv(g, node):
            grp = producer_group.get(node.inputs[0])
            if grp is not None and grp.nodes[0].op_type == "depthwise_blocked" and \
                    all(OPS[n.op_type].kind == "injective" for n in grp.nodes[1:]) and \
                    _may_join(g, users, grp, node.inputs[0]) and S.is_static(rows := g.shape(node.inputs[0])[2]) and \
                    rows >= MIN_FUSED_ROWS:
                target = grp
        if target is None:
            target = FusedGroup([], kind)
            groups.append(target)
            if node.op_type == "matmul":
                for i in node.inputs:
                    prologue = _transposed_operand(g, users, producer_group, i)
                    for grp in prologue:
                        groups.remove(grp)
                        target.nodes.extend(grp.nodes)
        target.nodes.append(node)
        target.output = node.outputs[0]
        producer_group[node.outputs[0]] = target
    # a group runs when its last node can: after the producers of all its inputs
    position = {id(n): k for k, n in enumerate(g.nodes)}
    groups.sort(key=lambda grp: position[id(grp.nodes[-1])])
    for grp in groups:
        grp.find_inputs()
    return groups
