"""Local response normalization across channels (ONNX LRN, as in AlexNet/GoogLeNet):
``y = x / (bias + alpha / size * sum of x^2 over the size-wide channel window) ** beta``.

The window sum is a ``"reduce"`` stage over ``size`` neighbours, guarded at the channel
edges, parallel over the output; the division is an injective stage after it.
"""
from __future__ import annotations

import math

from ...dsl.expr import const
from ...dsl.intrinsics import elementwise_max, elementwise_min, pow as lw_pow
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .elementwise import extents


def lrn(x: Tensor, size: int, alpha: float = 1e-4, beta: float = 0.75, bias: float = 1.0,
        name: str = "lrn") -> Tensor:
    shape = extents(x)          # the sizes after the channels may be symbolic (shape-polymorphic kernels)
    if len(shape) < 3 or not isinstance(shape[1], int):
        raise ExprError(f"lrn needs an input of rank >= 3 with a static channel count, got {shape}")
    channels = shape[1]
    before = math.floor((size - 1) / 2)
    # window positions that can fall on a channel for some output channel: a window far wider than the
    # channels (a size of 2^31 - 1) costs no more than one twice as wide as them
    j = reduce_axis((max(0, before - channels + 1), min(size, before + channels)), name="j")

    def window_sum(*p):
        c = p[1] - before + j
        inside = (c >= 0) & (c < channels)
        at = (p[0], elementwise_min(elementwise_max(c, 0), channels - 1)) + tuple(p[2:])
        v = x[at]
        return lw_sum(v * v, axis=j, where=inside)

    squares = compute(shape, window_sum, name=name + ".sum", tag="reduce")

    def body(*p):
        scale = const(bias, x.dtype) + const(alpha / size, x.dtype) * squares[p]
        return x[p] / lw_pow(scale, const(beta, x.dtype))

    return compute(shape, body, name=name, tag="injective")
