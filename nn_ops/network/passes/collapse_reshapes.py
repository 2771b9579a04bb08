"""collapse_reshapes: a reshape of a reshape reads the first one's input; a reshape (or identity) to
its input's own shape is dropped, its readers reading the input.

A 1-d convolution runs as a 2-d one on rows of height 1 between reshapes (``converters/nn.py``), so
a stack of them read ``conv -> [N, C, L] -> relu -> [N, C, 1, L] -> conv``; after ``sink_reshapes``
moved the relu up, the two reshapes stood back to back and ``choose_conv_layout`` saw an NCHW value
between every two convs: a ``from_blocked`` and a ``to_blocked`` per layer (40 us of a 420-us layer
of 64 channels over 8000 samples).  Accepts any graph; guarantees the same values (a graph output
keeps its producer).  A reshape is dropped only where its shape is its input's, size for size as
expressions (symbolic sizes that may be equal but are written otherwise keep it).
"""
from __future__ import annotations

from ..graph import Graph

_VIEWS = ("reshape", "identity")


def collapse_reshapes(g: Graph) -> Graph:
    producers = g.producer_map()
    outputs = set(g.outputs)
    for node in g.nodes:
        if node.op_type == "reshape":
            source = producers.get(node.inputs[0])
            while source is not None and source.op_type in _VIEWS:
                node.inputs = [source.inputs[0]]
                source = producers.get(node.inputs[0])
    renamed = {}
    kept = []
    for node in g.nodes:
        node.inputs = [renamed.get(i, i) for i in node.inputs]
        out = node.outputs[0]
        if node.op_type in _VIEWS and out not in outputs and tuple(g.shape(node.inputs[0])) == tuple(g.shape(out)) \
                and g.values[node.inputs[0]].dtype == g.values[out].dtype:
            renamed[out] = node.inputs[0]
            continue
        kept.append(node)
    g.nodes = kept
    return g
