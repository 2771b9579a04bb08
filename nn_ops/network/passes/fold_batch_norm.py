"""fold_batch_norm: per-channel scale and shift after a conv2d or dense go into its weights.

The importer turns inference BatchNormalization into ``mul`` by a per-channel constant
then ``add`` of one.  When the ``mul``/``add`` input is a conv2d (or dense) output used
by nothing else, and the constant varies only along the output-channel axis, then
``conv(x, W, b) * s + t == conv(x, W * s, b * s + t)``: the weights are rescaled, the shift
becomes (part of) the bias, and the elementwise node disappears.
Accepts any graph; guarantees the result computes the same values.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..graph import Graph


def _per_channel(arr: np.ndarray, out_shape, channel_axis: int) -> Optional[np.ndarray]:
    """``arr`` as a vector over the channel axis if it broadcasts along that axis only."""
    nd = len(out_shape)
    if arr.ndim > nd:
        return None
    full = (1,) * (nd - arr.ndim) + arr.shape
    channels = out_shape[channel_axis]
    for k, d in enumerate(full):
        if k == channel_axis:
            if d not in (1, channels):
                return None
        elif d != 1:
            return None
    return np.broadcast_to(arr.reshape(-1), (channels,)) if arr.size in (1, channels) else None


def fold_batch_norm(g: Graph) -> Graph:
    changed = True
    while changed:
        changed = False
        producers = g.producer_map()
        users = g.consumer_map()
        for node in list(g.nodes):
            if node.op_type not in ("mul", "add") or len(node.inputs) != 2:
                continue
            for k in (0, 1):
                src, const = node.inputs[k], node.inputs[1 - k]
                anchor = producers.get(src)
                if anchor is None or const not in g.initializers or anchor.op_type not in ("conv2d", "dense"):
                    continue
                if len(users.get(src, [])) != 1 or src in g.outputs:
                    continue
                out_shape = g.shape(src)
                if g.shape(node.outputs[0]) != out_shape:
                    continue
                vec = _per_channel(g.initializers[const], out_shape, 1)
                if vec is None or anchor.inputs[1] not in g.initializers:
                    continue
                _fold(g, anchor, node, vec.astype(np.float32))
                changed = True
                break
            if changed:
                break
    return g


def _fold(g: Graph, anchor, node, vec: np.ndarray) -> None:
    w = g.initializers[anchor.inputs[1]]
    channels = vec.shape[0]
    bias = g.initializers[anchor.inputs[2]] if len(anchor.inputs) > 2 else np.zeros(channels, np.float32)
    if node.op_type == "mul":
        w = w * vec.reshape((-1,) + (1,) * (w.ndim - 1))
        bias = bias * vec
    else:
        bias = bias + vec
    w_name = g.fresh_name(anchor.inputs[1] + ".folded")
    g.add_initializer(w_name, w.astype(np.float32))
    b_name = g.fresh_name(anchor.name + ".bias")
    g.add_initializer(b_name, bias.astype(np.float32))
    anchor.inputs = [anchor.inputs[0], w_name, b_name]
    # the anchor now produces the elementwise node's output
    old = anchor.outputs[0]
    anchor.outputs = [node.outputs[0]]
    g.nodes.remove(node)
    g.values.pop(old, None)
