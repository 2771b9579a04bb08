"""choose_dense_layout: dense layers with constant weights get the weight transposed once.

``dense(X, W[N, K], b)`` packs W's transpose on every call; with W constant the
transpose is done here, at compile time, and the node becomes ``dense_kn(X, W.T, b)``:
a streaming product for few rows (batch-1 classifiers), the blocked matmul otherwise.
Accepts any graph; guarantees the same values.  Run after fold_batch_norm (which
rewrites dense weights).
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph


def choose_dense_layout(g: Graph) -> Graph:
    for node in g.nodes:
        if node.op_type != "dense" or node.inputs[1] not in g.initializers:
            continue
        wt = np.ascontiguousarray(g.initializers[node.inputs[1]].T)
        name = g.fresh_name(node.inputs[1] + ".kn")
        g.add_initializer(name, wt)
        node.op_type = "dense_kn"
        node.inputs = [node.inputs[0], name] + node.inputs[2:]
    return g
