"""fold_affine_requantization: a DequantizeLinear of an 8-bit value, float ops by constants that keep it
affine (``mul``, ``add``, ``sub``, ``div`` by a constant) and a QuantizeLinear to 8 bits become one
``rescale`` node, ``clamp(round(x * multiplier + offset))``, where that is proven equal on every input.

A quantized layer whose batch norm stayed apart from its conv (a QDQ model: conv, QuantizeLinear,
DequantizeLinear, the batch norm's ``mul`` and ``add``, QuantizeLinear) runs these per output value:
a conversion, a subtraction, three multiplies or adds and a division, where one multiply-add does.
The input has only 256 values, so the rewrite is checked on all of them, per channel (per element of
the constants), against the chain evaluated as ONNX's reference does (float32, one rounding per op):
with the multiply-add fused and unfused (``llvm.fmuladd`` may be either), the result must be the same
integer.  A channel that misses (an input the exact line puts on a half, which the chain's float32
steps round one way or the other) is given a multiplier and offset a few steps away, all of them
checked again; a chain where one still misses stays as it is (in MobileNetV2's QDQ model one channel
of its 52 chains needed it, none stayed).  So the rewritten model computes exactly ONNX's reference
values of the chain, which the chain's own kernel (its multiply and add contracted) need not.
Accepts any graph; guarantees the result computes the same values.
"""
from __future__ import annotations

import itertools
from typing import List, Optional, Tuple

import numpy as np

from ...ops.quantize import INT32_SAFE
from ..graph import Graph, Node

AFFINE = ("mul", "add", "sub", "div")
EIGHT_BITS = ("uint8", "int8")
#: steps tried around the multiplier (float32 steps) and the offset (quarters of a float32 step at the
#: result's largest value) of a channel the first guess misses
MULTIPLIER_STEPS, OFFSET_STEPS = 6, 16


def fold_affine_requantization(g: Graph) -> Graph:
    producers, users = g.producer_map(), g.consumer_map()
    for q in list(g.nodes):
        chain = _chain_ending_at(g, q, producers, users)
        if chain is None:
            continue
        params = _proven_multiplier_and_offset(g, chain)
        if params is None:
            continue
        multiplier, offset = params
        m_name = g.fresh_name(q.outputs[0] + ".multiplier")
        g.add_initializer(m_name, multiplier)
        o_name = g.fresh_name(q.outputs[0] + ".offset")
        g.add_initializer(o_name, offset)
        at = g.nodes.index(q)
        int32_range = bool(255 * np.abs(multiplier).max() + np.abs(offset).max() < INT32_SAFE)     # (|x| <= 255)
        g.nodes[at] = Node("rescale", [chain[0].inputs[0], m_name, o_name], list(q.outputs),
                           {"to": q.attrs["to"], "int32_range": int32_range}, q.name)
        for node in chain[:-1]:
            g.nodes.remove(node)
    return g


def _scalar(g: Graph, name: Optional[str]):
    """The value of a one-element initializer ``name`` (None: absent, as a missing zero point), or raise
    KeyError / ValueError where it is no such constant."""
    if not name:
        return None
    arr = g.initializers[name]
    if arr.size != 1:
        raise ValueError(name)
    return arr.reshape(())


def _zero_point(g: Graph, node: Node) -> float:
    """The zero point of a (de)quantize ``node``, 0 where it has none."""
    z = _scalar(g, node.inputs[2] if len(node.inputs) > 2 else None)
    return 0.0 if z is None else float(z)


def _chain_ending_at(g: Graph, q: Node, producers, users) -> Optional[List[Node]]:
    """[DequantizeLinear, affine ops..., ``q``] when ``q`` is a per-tensor QuantizeLinear to 8 bits
    reached that way, each value between them read by the next node alone; else None."""
    if q.op_type != "quantize" or q.attrs.get("to") not in EIGHT_BITS or q.attrs.get("block_size"):
        return None
    chain = [q]
    value = q.inputs[0]
    while True:
        node = producers.get(value)
        if node is None or len(users.get(value, [])) != 1 or value in g.outputs:
            return None
        chain.insert(0, node)
        if node.op_type == "dequantize":
            break
        if node.op_type not in AFFINE or _data_input(g, node) is None:
            return None
        value = node.inputs[_data_input(g, node)]
    dq = chain[0]
    if g.values[dq.inputs[0]].dtype not in EIGHT_BITS or dq.attrs.get("block_size") or \
            g.values[dq.outputs[0]].dtype != "float32":
        return None
    try:
        for node in (dq, q):
            if _scalar(g, node.inputs[1]) is None:
                return None
            _scalar(g, node.inputs[2] if len(node.inputs) > 2 else None)
    except (KeyError, ValueError):
        return None
    shape = g.shape(dq.inputs[0])
    for node in chain[1:-1]:
        c = g.initializers[node.inputs[1 - _data_input(g, node)]]
        if c.dtype != np.float32 or c.ndim > len(shape) or g.shape(node.outputs[0]) != shape:
            return None
    return chain


def _data_input(g: Graph, node: Node) -> Optional[int]:
    """Which input of a binary ``node`` is the chain's value (the other a float32 constant); a divisor or
    a minuend that is the value would not be affine in it."""
    if len(node.inputs) != 2:
        return None
    const = [i for i, name in enumerate(node.inputs) if name in g.initializers]
    if len(const) != 1:
        return None
    k = 1 - const[0]
    return k if k == 0 or node.op_type in ("mul", "add", "sub") else None


def _constants_axis(g: Graph, chain: List[Node], rank: int) -> Optional[int]:
    """An axis along which no constant of the chain varies (the inputs' 256 values are laid along it)."""
    for axis in reversed(range(rank)):
        if all(_aligned(g.initializers[n.inputs[1 - _data_input(g, n)]].shape, rank)[axis] == 1
               for n in chain[1:-1]):
            return axis
    return None


def _aligned(shape, rank: int) -> Tuple[int, ...]:
    return (1,) * (rank - len(shape)) + tuple(shape)


def _evaluate(g: Graph, chain: List[Node], x: np.ndarray, dtype) -> np.ndarray:
    """The chain on ``x`` in ``dtype`` (float32: ONNX's reference, one rounding per op) before its
    final rounding: ``x`` dequantized, the affine ops, divided by the quantizer's scale."""
    dq, q = chain[0], chain[-1]
    v = x.astype(dtype) - dtype(_zero_point(g, dq))
    v = v * dtype(_scalar(g, dq.inputs[1]))
    rank = x.ndim
    for node in chain[1:-1]:
        k = _data_input(g, node)
        c = g.initializers[node.inputs[1 - k]].astype(dtype).reshape(_aligned(g.initializers[node.inputs[1 - k]].shape,
                                                                              rank))
        a, b = (v, c) if k == 0 else (c, v)
        v = {"mul": np.multiply, "add": np.add, "sub": np.subtract, "div": np.divide}[node.op_type](a, b)
    return v / dtype(_scalar(g, q.inputs[1]))


def _quantized(g: Graph, q: Node, v: np.ndarray) -> np.ndarray:
    """QuantizeLinear's last steps on ``v`` (already divided by its scale): round half to even, the
    zero point, saturation."""
    info = np.iinfo(q.attrs["to"])
    out = np.rint(v) + v.dtype.type(_zero_point(g, q))
    return np.clip(out, info.min, info.max)


def _rescaled(x: np.ndarray, multiplier: np.ndarray, offset: np.ndarray, fused: bool) -> np.ndarray:
    """``x * multiplier + offset`` in float32, its one rounding (fused: float64 holds the exact sum of
    an 8-bit integer's product and a float32 where the spread of their bits fits it, checked by the
    sum's error, else NaN: a miss) or two."""
    if not fused:
        return x.astype(np.float32) * multiplier + offset
    p = x.astype(np.float64) * multiplier.astype(np.float64)             # exact: 8 x 24 bits
    o = offset.astype(np.float64)
    s = p + o
    back = s - p
    err = (p - (s - back)) + (o - back)                                  # (Knuth's two-sum)
    return np.where(err == 0, s, np.nan).astype(np.float32)


def _proven_multiplier_and_offset(g: Graph, chain: List[Node]) -> Optional[Tuple[np.ndarray, np.ndarray]]:
    """float32 ``multiplier`` and ``offset`` shaped to broadcast to the input, with ``rescale`` equal to the
    chain on every input value, fused or not; None where no such pair was found."""
    dq, q = chain[0], chain[-1]
    shape = g.shape(dq.inputs[0])
    axis = _constants_axis(g, chain, len(shape))
    if axis is None:
        return None
    info = np.iinfo(g.values[dq.inputs[0]].dtype)
    x = np.arange(info.min, info.max + 1).reshape([-1 if k == axis else 1 for k in range(len(shape))])
    want = _quantized(g, q, _evaluate(g, chain, x, np.float32))
    at0, at1 = (_evaluate(g, chain, np.full([1] * len(shape), v), np.float64) for v in (0, 1))
    multiplier = np.ascontiguousarray((at1 - at0).astype(np.float32))
    offset = np.ascontiguousarray((at0 + _zero_point(g, q)).astype(np.float32))
    ok = _equal_on_all(x, multiplier, offset, want, axis, q)
    if ok.all():
        return multiplier, offset
    # the channels that miss, one column each: 256 input values down, nudged pairs tried until one hits
    columns = np.flatnonzero(~ok.reshape(-1))
    values = np.moveaxis(want, axis, 0).reshape(want.shape[axis], -1)[:, columns]
    inputs = x.reshape(-1, 1)
    flat_m, flat_o = multiplier.reshape(-1), offset.reshape(-1)
    m0, o0 = flat_m[columns], flat_o[columns]
    found = np.zeros(len(columns), bool)
    steps = sorted(itertools.product(range(-MULTIPLIER_STEPS, MULTIPLIER_STEPS + 1),
                                     range(-OFFSET_STEPS, OFFSET_STEPS + 1)), key=lambda s: abs(s[0]) + abs(s[1]))
    nudge = np.float64(np.spacing(np.float32(np.iinfo(q.attrs["to"]).max))) / 4      # (in the result's units)
    for dm, do in steps[1:]:
        m, o = _stepped(m0, dm), (o0 + do * nudge).astype(np.float32)
        hit = ~found & _equal_on_all(inputs, m[None], o[None], values, 0, q).reshape(-1)
        flat_m[columns[hit]], flat_o[columns[hit]] = m[hit], o[hit]
        found |= hit
        if found.all():
            return multiplier, offset
    return None


def _stepped(a: np.ndarray, steps: int) -> np.ndarray:
    """``a`` moved ``steps`` float32 steps (towards +inf for a positive count)."""
    out = a.copy()
    for _ in range(abs(steps)):
        out = np.nextafter(out, np.float32(np.inf if steps > 0 else -np.inf))
    return out


def _equal_on_all(x, multiplier, offset, want, axis: int, q: Node) -> np.ndarray:
    """Per element of the constants: whether ``rescale`` gives ``want`` for every input value, fused and
    not."""
    info = np.iinfo(q.attrs["to"])
    ok = True
    for fused in (True, False):
        got = np.clip(np.rint(_rescaled(x, multiplier, offset, fused)), info.min, info.max)
        ok = ok & np.all(got == want, axis=axis, keepdims=True)
    return ok
