"""materialize_output_copies: every graph output is written by a kernel of its own.

The executable hands each output's memory to the caller, so an output cannot be a view of another
value, a graph input, a constant, or the same value as an earlier output.  Accepts an optimised
graph (after ``optimize``, before ``fuse_operators``); guarantees, in place, that each non-empty
output is produced by a node that is not an alias (a reshape becomes ``reshape_copy``, the same
index arithmetic computed into the output; an input, a constant or a repeated output gets a
``copy`` node and the output is renamed to its result).  An empty output needs none: there is
nothing to write (the importer made every empty result a constant).
"""
from __future__ import annotations

from ..graph import Graph
from ..op_table import OPS


def materialize_output_copies(g: Graph) -> Graph:
    producers = g.producer_map()
    seen = set()
    for k, out in enumerate(list(g.outputs)):
        if 0 in g.values[out].shape:
            continue
        node = producers.get(out)
        if node is not None and OPS[node.op_type].kind == "alias" and out not in seen:
            node.op_type = "reshape_copy"
        elif node is None or out in seen:
            new = g.fresh_name(out + ".out")
            g.add_value(new, g.values[out].shape, g.values[out].dtype)
            g.add_node("copy", [out], [new], name=new)
            g.outputs[k] = new
        seen.add(g.outputs[k])
    return g
