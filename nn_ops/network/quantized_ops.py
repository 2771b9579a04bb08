"""The graph's int8 convolution ops (registered in ``op_table.OPS`` when the network package loads).

* ``qconv2d``: inputs [x (uint8/int8 NCHW), w (int8 [OC, C, KH, KW]), bias (int32 [OC], the zero points
  folded in), multiplier (float64 [OC]; float32 for a QDQ conv, requantized in float32)], attrs stride,
  padding, dilation, ``pad_value`` (x's zero point), ``y_zero_point``, ``to`` (the output type),
  ``int32_range`` (every sum's requantization rounds into int32: ``int8_conv.rounds_in_int32``): what the
  importer writes for a QLinearConv it can run directly (``converters/quantized.py``);
* ``qconv2d_blocked``: the same on the blocked layout, w packed in words (``int8_conv.pack_conv_words``,
  ``pairs`` on x86 without VNNI): what ``choose_conv_layout`` makes of it on CPUs;
* ``qdepthwise`` / ``qdepthwise_blocked``: a depthwise QLinearConv, w int8 [C, 1, KH, KW] (blocked: its
  values as float32 [C/b, KH, KW, b]), the bias QLinearConv's own (the input's zero point is taken off
  each value).
"""
from __future__ import annotations

from ..ops.int8_conv import conv2d_u8s8, conv2d_u8s8_blocked, depthwise_u8s8, depthwise_u8s8_blocked
from .op_table import op


def _common(attrs) -> dict:
    return dict(stride=tuple(attrs["stride"]), padding=tuple(attrs["padding"]), dilation=tuple(attrs["dilation"]),
                pad_value=int(attrs["pad_value"]), y_zero_point=int(attrs["y_zero_point"]), out_dtype=attrs["to"],
                int32_range=bool(attrs.get("int32_range")))


@op("qconv2d", "anchor")
def _qconv2d(inputs, attrs):
    return conv2d_u8s8(*inputs[:4], **_common(attrs))


@op("qconv2d_blocked", "anchor")
def _qconv2d_blocked(inputs, attrs):
    return conv2d_u8s8_blocked(*inputs[:4], pairs=bool(attrs.get("pairs")), **_common(attrs))


@op("qdepthwise", "anchor")
def _qdepthwise(inputs, attrs):
    return depthwise_u8s8(*inputs[:4], **_common(attrs))


@op("qdepthwise_blocked", "anchor")
def _qdepthwise_blocked(inputs, attrs):
    common = _common(attrs)
    return depthwise_u8s8_blocked(*inputs[:4], x_zero_point=common.pop("pad_value"), **common)
