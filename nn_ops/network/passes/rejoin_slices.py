"""rejoin_slices: a concat whose consecutive inputs are slices of one value that, in order, cover it
along the concat's axis reads that value instead.

YOLOv8's C2f block (and CSP blocks like it) Splits a conv's result in two halves, runs a bottleneck on
the second, then concatenates both halves with the bottleneck's outputs: ``concat(y[:h], y[h:], z...)``
is ``concat(y, z...)``.  Rejoined, the conv writes its result straight into its place in the concat
(``concats_in_place``) and the second half is a view of it; as slices, each half was
copied into the concat (0.4 MB at 80x80).  Accepts any graph; guarantees the same values (the slices
stay for their other readers; dead ones go with ``eliminate_dead_code``).
"""
from __future__ import annotations

from typing import Optional

from ..graph import Graph, Node


def _cut(g: Graph, node: Node, axis: int):
    """(source, start, stop) of a slice that cuts only ``axis``, with step 1, else None."""
    if node.op_type != "slice":
        return None
    shape = g.shape(node.inputs[0])
    begin, end, step = (tuple(node.attrs[k]) for k in ("begin", "end", "step"))
    if len(shape) != len(begin) or any(s != 1 for s in step) or any(
            (begin[k], end[k]) != (0, shape[k]) for k in range(len(shape)) if k != axis):
        return None
    return node.inputs[0], begin[axis], end[axis]


def _rejoined(g: Graph, inputs, axis: int, producers) -> Optional[list]:
    """``inputs`` with each run of slices covering their source in order replaced by the source."""
    out, k, changed = [], 0, False
    while k < len(inputs):
        cut = _cut(g, producers[inputs[k]], axis) if inputs[k] in producers else None
        if cut is not None and cut[1] == 0:
            source, _, stop = cut
            j = k + 1
            while stop < g.shape(source)[axis] and j < len(inputs) and inputs[j] in producers:
                nxt = _cut(g, producers[inputs[j]], axis)
                if nxt is None or nxt[0] != source or nxt[1] != stop:
                    break
                stop, j = nxt[2], j + 1
            if stop == g.shape(source)[axis] and j - k > 1:
                out.append(source)
                k, changed = j, True
                continue
        out.append(inputs[k])
        k += 1
    return out if changed else None


def rejoin_slices(g: Graph) -> Graph:
    producers = g.producer_map()
    for node in g.nodes:
        if node.op_type != "concat":
            continue
        axis = int(node.attrs["axis"]) % len(g.shape(node.outputs[0]))
        rejoined = _rejoined(g, list(node.inputs), axis, producers)
        if rejoined is not None:
            node.inputs = rejoined
    return g
