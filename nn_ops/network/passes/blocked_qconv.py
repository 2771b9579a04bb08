"""The int8 convolution's part of ``choose_conv_layout``: a ``qconv2d`` (the importer's direct
QLinearConv) becomes ``qconv2d_blocked`` on the CPU's blocked layout, its weight packed here, once, in
words of four input channels (``vpdpbusd``) or, on x86 without VNNI, of two widened to int16
(``pmaddwd``); a ``qdepthwise`` becomes ``qdepthwise_blocked``; and per-tensor QuantizeLinear / DequantizeLinear follow a blocked input as elementwise
ops do, so a quantized network's activations stay uint8 blocks from one conv to the next (the float ops
between a DequantizeLinear and a QuantizeLinear, a batch norm's scale and shift, a residual add, a pool,
a depthwise conv, stay blocked with them)."""
from __future__ import annotations

import numpy as np

from ...ops.int8_conv import pack_conv_words
from ...ops.int8_matmul import int8_pairs
from ...ops.nchwc import pack_depthwise_weight
from ..graph import Graph, Node

QUANTIZERS = ("quantize", "dequantize")
QCONVS = ("qconv2d", "qdepthwise")


def qconv_goes_blocked(g: Graph, node: Node, block, padded, channel_block) -> bool:
    """Whether ``qconv2d`` / ``qdepthwise`` ``node`` runs blocked: its output channels make whole blocks,
    and its input is blocked (without padding channels; a ``qconv2d``'s in blocks of whole words) or can
    be (one ``to_blocked`` of it, in blocks of one word where the channels make no vector's block)."""
    x = node.inputs[0]
    oc, c = g.shape(node.outputs[0])[1], g.shape(x)[1]
    if channel_block(oc) is None:
        return False
    if block.get(x):
        return x not in padded and (node.op_type == "qdepthwise" or block[x] % 4 == 0)
    return channel_block(c) is not None or (node.op_type == "qconv2d" and c % 4 == 0)


def input_block(node: Node, channels: int, channel_block) -> int:
    """The block of a ``to_blocked`` copy of a plain input: the channels' own, else (an RGB stem's four
    channels) one word."""
    return channel_block(channels) or 4


def follows_blocked(g: Graph, node: Node, block, padded) -> bool:
    """Whether a QuantizeLinear / DequantizeLinear ``node`` follows its blocked input: one scale and zero
    point for the whole tensor (they index no channel), an input without padding channels."""
    x = node.inputs[0]
    return bool(block.get(x)) and x not in padded and all(
        i in g.initializers and g.initializers[i].size == 1 for i in node.inputs[1:] if i)


def blocked_qconv(g: Graph, node: Node, out: str, x_blocked: str, in_block: int, out_block: int,
                  target=None) -> Node:
    """``qconv2d_blocked`` (``qdepthwise_blocked``) computing ``out`` (the blocked twin of ``node``'s result)
    from ``x_blocked``."""
    if node.op_type == "qdepthwise":
        w_name = g.fresh_name(node.inputs[1] + ".blocked")
        weight = g.initializers[node.inputs[1]].astype(np.float32)        # exact: int8 values
        g.add_initializer(w_name, pack_depthwise_weight(weight, out_block))
        return Node("qdepthwise_blocked", [x_blocked, w_name] + list(node.inputs[2:4]), [out], dict(node.attrs),
                    node.name)
    if target is None:
        from ....target import resolve_target
        target = resolve_target("llvm")
    pairs = int8_pairs(target)
    w_name = g.fresh_name(node.inputs[1] + (".pairs" if pairs else ".words"))
    g.add_initializer(w_name, pack_conv_words(g.initializers[node.inputs[1]], in_block, out_block, pairs=pairs))
    return Node("qconv2d_blocked", [x_blocked, w_name] + list(node.inputs[2:4]), [out],
                dict(node.attrs, pairs=pairs), node.name)


def is_quantizer_constant(node: Node, k: int) -> bool:
    """Whether input ``k`` of ``node`` is a QuantizeLinear's or DequantizeLinear's scale or zero point."""
    return node.op_type in QUANTIZERS and k > 0
