"""lone_1x1_stays_plain: whether a lone stride-1 1x1 conv on an NCHW value is cheaper as it lies.

Blocked (``conv2d_blocked`` reading the plain input, then one ``from_blocked``) it pays a pass
over its output; plain (``nn_ops.conv2d``'s pixels matmul: output channels broadcast, pixel
vectors of each channel plane) it pays for pixel tiles that do not fill the plane and for
channel planes that do not start on a cache line.  Both are estimated from the target's lanes
and registers, with the register blocks each form's schedule takes, as work per useful
multiply-add; the cheaper form wins.  Against MobileNetV2's 19 distinct 1x1 layers alone, each
timed both ways (one thread, CPU time, interleaved in one process, AVX-512 and AVX2 code on
Zen 5), it picks the faster form of every one with AVX-512; as AVX2 code it misses three by
3-6 % (144->24 at 56x56 runs faster blocked, 384->96 and 576->96 at 14x14 plain); re-measure:
``python -m benchmarks.conv2d --only "mv2 1x1" --cpu-time --lone-1x1 both [--target "llvm -mcpu=x86-64-v3"]``.
"""
from __future__ import annotations

import math

from ...ops.conv2d import MIN_ACCUMULATORS, _channel_rows, matmul_channel_rows, pixels_matmul_vectors, \
    pixels_per_block, static_row_block
from ...ops.nchwc import _register_limited_vectors, _vectors_for
from .. import symbolic as S

def from_blocked_cost(lanes: int) -> float:
    """The from_blocked pass after a blocked conv, in multiply-adds per output vector: measured 9 at 16
    lanes and 5 at 8 (its register transposes take more shuffles a vector the wider it is), so with
    AVX-512 the transform costs 9/64 of a 64-input-channel 1x1's products.  Measured as a kernel of its
    own: in the conv's kernel (``ops/conv_unblocked.py``, 32 registers) it costs less, and MobileNetV2's
    32->192 at 28x28, picked plain, ran 1.08x faster blocked."""
    return lanes / 2 + 1


#: the plain form's extra cost per pixel vector split across cache lines (``CACHE_LINE`` bytes), where
#: its channel planes do not start on one (planes of 14x14 or 7x7 floats): with AVX-512, where 3 in 4
#: of a 14x14 map's vectors are split, its 64-input-channel layers ran 1.06-1.11x slower than blocked
#: where the tiles alone predicted a tie
SPLIT_VECTOR_COST = 0.1
#: bytes of a cache line (x86-64's and the AArch64 cores')
CACHE_LINE = 64


#: the plain form's cost where its register block has no more than ``MIN_ACCUMULATORS`` (AVX2's 4
#: channel rows x 2 pixel vectors for 16, 32 or 64 output channels): no FMA latency to spare and a
#: load for every 1.3 FMAs; blocked ran 64 output channels at 14x14 and 32 at 28x28 1.03-1.10x faster
FEW_ACCUMULATORS = 1.15


def lone_1x1_stays_plain(channels: int, out_channels: int, out_shape, stride, target) -> bool:
    """Whether a stride-1 1x1 conv of ``channels`` -> ``out_channels`` onto ``out_shape`` [N, OC, OH, OW]
    costs less plain than blocked with its from_blocked on ``target``.  A strided one never does
    (NCHW copies the pixels it reads first: ResNet-18's downsamples ran 1.13-1.17x faster blocked).
    A map of symbolic size is taken as a large one (whole tiles, planes on cache lines)."""
    if tuple(stride) != (1, 1):
        return False
    lanes, registers = target.lanes("float32"), target.vector_registers
    oh, ow = out_shape[2:]
    pixels = oh * ow if S.is_static(oh) and S.is_static(ow) else None
    return _plain_cost(out_channels, pixels, lanes, registers) <= \
        _blocked_cost(channels, out_channels, ow if S.is_static(ow) else None, lanes, registers)


def _plain_cost(oc: int, pixels, lanes: int, registers: int) -> float:
    """The pixels matmul's work per useful multiply-add (``conv2d.schedule_conv2d_1x1``'s blocks)."""
    npv = pixels_matmul_vectors(pixels if pixels is not None else 2 * lanes, lanes)
    rows, _ = _channel_rows(oc, matmul_channel_rows(npv, registers))
    cost = math.ceil(oc / rows) * rows / oc
    if pixels is not None:
        tile = npv * lanes
        cost *= math.ceil(pixels / tile) * tile / pixels
        cost *= 1 + SPLIT_VECTOR_COST * _split_share(pixels, lanes)
    if rows * npv <= MIN_ACCUMULATORS:
        cost *= FEW_ACCUMULATORS
    return cost


def _split_share(pixels: int, lanes: int) -> float:
    """The share of pixel vectors of channel planes of ``pixels`` floats that straddle two cache lines
    (the tensor starting on one; the planes' offsets repeat every ``CACHE_LINE`` planes)."""
    size = 4 * lanes
    starts = [(plane * pixels * 4 + k * size) % CACHE_LINE for plane in range(CACHE_LINE)
              for k in range(max(1, CACHE_LINE // size))]
    return sum(start + size > CACHE_LINE for start in starts) / len(starts)


def _blocked_cost(channels: int, oc: int, ow, lanes: int, registers: int) -> float:
    """A blocked 1x1's work per useful multiply-add, its from_blocked included: channel blocks as
    ``choose_conv_layout`` takes them (padded to whole vectors above one vector's width; 8-channel
    blocks of a wider vector at half its rate), rows in register blocks as
    ``nchwc.schedule_conv2d_blocked`` takes them."""
    block = lanes if oc % lanes == 0 or oc > lanes else min(8, lanes)
    padded = -(-oc // block) * block
    cost = (1 + from_blocked_cost(lanes) / channels) * padded / oc * lanes / block
    if ow is not None:
        nv = _register_limited_vectors(_vectors_for(padded // block, channels, ow), registers)
        owb, _ = static_row_block(ow, pixels_per_block(nv, registers), vectors=nv)
        cost *= math.ceil(ow / owb) * owb / ow
    return cost
