"""fold_constants: evaluate nodes whose inputs are all constants, in numpy.

Accepts any graph; guarantees no remaining node of a foldable op type has only
constant inputs (their outputs become initializers, the nodes are removed).
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph

_NUMPY = {
    "add": lambda x, a: x[0] + x[1], "sub": lambda x, a: x[0] - x[1], "mul": lambda x, a: x[0] * x[1],
    "div": lambda x, a: x[0] / x[1], "max": lambda x, a: np.maximum(x[0], x[1]),
    "min": lambda x, a: np.minimum(x[0], x[1]), "relu": lambda x, a: np.maximum(x[0], 0),
    "clip": lambda x, a: np.clip(x[0], a.get("min"), a.get("max")), "neg": lambda x, a: -x[0],
    "sqrt": lambda x, a: np.sqrt(x[0]), "exp": lambda x, a: np.exp(x[0]),
    "reshape": lambda x, a: x[0].reshape(a["shape"]), "identity": lambda x, a: x[0], "copy": lambda x, a: x[0],
    "transpose": lambda x, a: np.transpose(x[0], a["perm"]),
    "concat": lambda x, a: np.concatenate(x, axis=a["axis"]),
    "cast": lambda x, a: x[0],      # to the output's dtype below; integer and bool sources only (_foldable)
}


def _foldable(node, values) -> bool:
    """A cast from a float is left to the kernel: numpy and LLVM differ on NaN and out-of-range values.
    (A cast of an integer constant: an int8 depthwise ConvInteger widened its weight on every run.)"""
    return node.op_type != "cast" or values[0].dtype.kind in "iub"


def fold_constants(g: Graph) -> Graph:
    kept = []
    for node in g.nodes:
        fn = _NUMPY.get(node.op_type)
        if fn is not None and node.inputs and all(i in g.initializers for i in node.inputs) \
                and node.outputs[0] not in g.outputs and _foldable(node, [g.initializers[i] for i in node.inputs]):
            value = fn([g.initializers[i] for i in node.inputs], node.attrs)
            dtype = g.values[node.outputs[0]].dtype
            g.add_initializer(node.outputs[0], np.asarray(value, dtype=dtype))
            continue
        kept.append(node)
    g.nodes = kept
    return g
