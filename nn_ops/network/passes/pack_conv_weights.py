"""pack_conv_weights: constant conv2d weights are packed into the kernel's layout once.

The NCHWc path of ``nn_ops.conv2d`` reads W as [OC/bn, C/cb, KH, KW, cb, bn]; given a
plain W it repacks it on every call (for ResNet-18, 45 MB read and written per run).
With W an initializer, the packing is done here, at compile time, and the node gets the
packed initializer (conv2d recognises a 6-d weight).  A conv of symbolic sizes keeps its
weight as it is: its kernel is the row path (``conv2d_rows``), which reads it so.  Accepts any
graph; guarantees the same values.  Run after fold_batch_norm, which rewrites conv weights.
"""
from __future__ import annotations

from ...ops.conv2d import conv2d_weight_blocks, pack_conv2d_weight
from .. import symbolic as S
from ..graph import Graph


def pack_conv_weights(g: Graph) -> Graph:
    for node in g.nodes:
        if node.op_type != "conv2d" or node.inputs[1] not in g.initializers:
            continue
        weight = g.initializers[node.inputs[1]]
        if weight.ndim != 4 or not all(S.is_static(d) for d in g.shape(node.inputs[0])):
            continue
        blocks = conv2d_weight_blocks(g.shape(node.inputs[0]), weight.shape, tuple(node.attrs["stride"]),
                                      tuple(node.attrs["padding"]), int(node.attrs["groups"]), str(weight.dtype),
                                      dilation=tuple(node.attrs["dilation"]))
        if blocks is None:
            continue
        name = g.fresh_name(node.inputs[1] + ".packed")
        g.add_initializer(name, pack_conv2d_weight(weight, blocks))
        node.inputs = [node.inputs[0], name] + node.inputs[2:]
    return g
