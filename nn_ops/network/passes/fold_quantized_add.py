"""fold_quantized_add: QuantizeLinear(DequantizeLinear(a) + DequantizeLinear(b)) of 8-bit values, one scale
each, becomes one ``rescale_add`` node, ``clamp(round(a * ma + (b * mb + offset)))``, where that is proven
equal on every pair of inputs.

A QDQ model's residual add otherwise dequantizes both operands to float32 maps (the conv's kernel writes
its result as float32, a kernel of its own dequantizes the other and adds) and quantizes the sum in a
third; as one node it joins the conv's kernel, whose result is the next layer's 8-bit map.  The operands
have 65,536 pairs of values, all checked against the chain as ONNX's reference computes it (float32, one
rounding per op), with each multiply-add fused and unfused (``llvm.fmuladd`` may be either); where the
first constants miss, nudged ones are tried, and an add none matches stays as written.
Accepts any graph; guarantees the result computes the same values.
"""
from __future__ import annotations

import itertools
from typing import Optional, Tuple

import numpy as np

from ..graph import Graph, Node
from .fold_affine_requantization import EIGHT_BITS, _quantized, _rescaled, _scalar, _stepped, _zero_point

#: float32 steps tried around each multiplier, and quarter float32 steps (at the result's largest value)
#: around the offset, where the first constants miss
MULTIPLIER_STEPS, OFFSET_STEPS = 2, 16


def fold_quantized_add(g: Graph) -> Graph:
    producers, users = g.producer_map(), g.consumer_map()
    for q in list(g.nodes):
        found = _add_between(g, q, producers, users)
        if found is None:
            continue
        add, dqs = found
        params = _proven_constants(g, dqs, q)
        if params is None:
            continue
        multipliers, offset = params
        g.nodes[g.nodes.index(q)] = Node("rescale_add", [dq.inputs[0] for dq in dqs], list(q.outputs),
                                         {"to": q.attrs["to"], "multipliers": multipliers, "offset": offset}, q.name)
        for node in (add, *dqs):
            g.nodes.remove(node)
    return g


def _per_tensor(g: Graph, node: Node) -> bool:
    """Whether a (de)quantize ``node`` has one scale and at most one zero point."""
    try:
        _scalar(g, node.inputs[2] if len(node.inputs) > 2 else None)
        return _scalar(g, node.inputs[1]) is not None
    except (KeyError, ValueError):
        return False


def _add_between(g: Graph, q: Node, producers, users) -> Optional[Tuple[Node, Tuple[Node, Node]]]:
    """(add, its two DequantizeLinear nodes) when ``q`` quantizes to 8 bits, per tensor, an elementwise
    ``add`` of two per-tensor dequantized 8-bit values, each value between them read by the next node
    alone; else None."""
    if q.op_type != "quantize" or q.attrs.get("to") not in EIGHT_BITS or q.attrs.get("block_size") or \
            not _per_tensor(g, q):
        return None
    add = producers.get(q.inputs[0])
    if add is None or add.op_type != "add" or len(add.inputs) != 2 or add.inputs[0] == add.inputs[1]:
        return None
    if len(users.get(q.inputs[0], [])) != 1 or q.inputs[0] in g.outputs:
        return None
    dqs = tuple(producers.get(v) for v in add.inputs)
    for v, dq in zip(add.inputs, dqs):
        if dq is None or dq.op_type != "dequantize" or dq.attrs.get("block_size") or not _per_tensor(g, dq) or \
                len(users.get(v, [])) != 1 or v in g.outputs or g.values[v].dtype != "float32" or \
                g.values[dq.inputs[0]].dtype not in EIGHT_BITS or g.shape(v) != g.shape(add.outputs[0]):
            return None
    return add, dqs


def _every_value(g: Graph, dq: Node) -> np.ndarray:
    info = np.iinfo(g.values[dq.inputs[0]].dtype)
    return np.arange(info.min, info.max + 1)


def _reference(g: Graph, dqs, q: Node) -> np.ndarray:
    """The chain on every pair (a down, b across) as ONNX's reference computes it, in float32."""
    f32 = np.float32
    a, b = (((_every_value(g, dq).astype(f32) - f32(_zero_point(g, dq))) * f32(_scalar(g, dq.inputs[1])))
            for dq in dqs)
    return _quantized(g, q, (a[:, None] + b[None, :]) / f32(_scalar(g, q.inputs[1])))


def _proven_constants(g: Graph, dqs, q: Node) -> Optional[Tuple[Tuple[float, float], float]]:
    """float32 ``(ma, mb)`` and ``offset`` with ``rescale_add`` equal to the chain on every pair, fused or
    not; None where none was found."""
    want = _reference(g, dqs, q)
    x, y = (_every_value(g, dq) for dq in dqs)
    sy = float(_scalar(g, q.inputs[1]))
    m = [float(_scalar(g, dq.inputs[1])) / sy for dq in dqs]
    o = _zero_point(g, q) - _zero_point(g, dqs[0]) * m[0] - _zero_point(g, dqs[1]) * m[1]
    m0, o0 = [np.float32(v) for v in m], np.float32(o)
    nudge = np.float64(np.spacing(np.float32(np.iinfo(q.attrs["to"]).max))) / 4
    steps = sorted(itertools.product(range(-MULTIPLIER_STEPS, MULTIPLIER_STEPS + 1), repeat=2),
                   key=lambda s: abs(s[0]) + abs(s[1]))
    offsets = sorted(range(-OFFSET_STEPS, OFFSET_STEPS + 1), key=abs)
    hard = np.zeros(want.shape, bool)       # pairs an earlier candidate missed: checked first, a few values
    for (da, db), do in sorted(itertools.product(steps, offsets), key=lambda s: abs(s[0][0]) + abs(s[0][1]) + abs(s[1])):
        ma, mb = _stepped(np.array(m0[0]), da), _stepped(np.array(m0[1]), db)
        offset = np.float32(o0 + do * nudge)
        ia, ib = np.nonzero(hard)
        if len(ia) and _misses(x[ia], y[ib], ma, mb, offset, want[ia, ib], q).any():
            continue
        missed = _misses(x[:, None], y[None, :], ma, mb, offset, want, q)
        if not missed.any():
            return (float(ma), float(mb)), float(offset)
        hard |= missed
    return None


def _misses(x, y, ma, mb, offset, want, q: Node) -> np.ndarray:
    """Where ``rescale_add`` of ``x`` and ``y`` (broadcast together) is not ``want``, either of its two
    multiply-adds fused or not."""
    info = np.iinfo(q.attrs["to"])
    missed = np.zeros(np.broadcast(x, y).shape, bool)
    for inner, outer in itertools.product((True, False), repeat=2):
        t = _rescaled(y, np.float32(mb), np.full(y.shape, offset, np.float32), inner)
        got = np.clip(np.rint(_rescaled(x, np.float32(ma), t, outer)), info.min, info.max)
        missed |= got != want
    return missed
