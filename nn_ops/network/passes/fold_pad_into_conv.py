"""fold_pad_into_conv: an explicit zero ``pad`` of H and W feeding only convolutions becomes their padding.

Exporters from frameworks with asymmetric "SAME" padding (TensorFlow) often emit
``Pad -> Conv(VALID)``; the conv pads exactly (guarded reads) at no extra pass.
Accepts any graph; guarantees the same values.
"""
from __future__ import annotations

from ..graph import Graph


def fold_pad_into_conv(g: Graph) -> Graph:
    users = g.consumer_map()
    removed = []
    for node in g.nodes:
        if node.op_type != "pad" or float(node.attrs.get("value", 0.0)) != 0.0:
            continue
        before, after = list(node.attrs["before"]), list(node.attrs["after"])
        if len(before) != 4 or any(before[:2]) or any(after[:2]):
            continue
        out = node.outputs[0]
        consumers = users.get(out, [])
        if not consumers or out in g.outputs or any(c.op_type != "conv2d" or c.inputs[0] != out for c in consumers):
            continue
        for conv in consumers:
            top, left, bottom, right = conv.attrs["padding"]
            conv.attrs = dict(conv.attrs, padding=(top + before[2], left + before[3], bottom + after[2],
                                                   right + after[3]))
            conv.inputs = [node.inputs[0]] + conv.inputs[1:]
        removed.append(node)
    for node in removed:
        g.nodes.remove(node)
        g.values.pop(node.outputs[0], None)
    return g
