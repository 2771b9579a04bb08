"""The blocked activation layout NCHW[x]c for CPU convolution networks: ops and schedules.

A tensor [N, C, H, W] is stored as [N, C/b, H, W, b]: ``b`` channels (one vector
register) innermost.  The per-layer NCHW convolution (``conv2d.py``) computes in this
layout internally and transposes its result back to NCHW; a whole network instead keeps
its activations blocked from the first convolution to the global pool (the
``choose_conv_layout`` graph pass), so no layer transposes, and depthwise convolutions
and pools vectorize over channels even where the image is 7 pixels wide.

Ops (``b`` is the block, the vector width; channel counts, blocks and kernels are constants, the
batch and the image's height and width may be symbolic sizes, as shape-polymorphic networks have):

* ``to_blocked(X, b)`` / ``from_blocked(X)``: the layout transforms (injective);
* ``conv2d_blocked(X, Wp, bias, ...)``: X blocked (or plain NCHW, for the first layer),
  Wp packed [OC/b, C/cb, KH, KW, cb, b], result blocked (tag ``conv2d_blocked``);
* ``depthwise_blocked(X, Wd, bias, ...)``: Wd packed [C/b, KH, KW, b];
* ``pool2d_blocked``, ``global_pool_blocked`` (``global_avg_pool_blocked``: its mean).
"""
from __future__ import annotations

import math
from typing import Optional

import numpy as np

from ...dsl import dtypes
from ...dsl.expr import Const, cast, const, if_then_else, logical_and
from ...dsl.reduction import max as lw_max, sum as lw_sum
from ...dsl.tensor import ComputeOp, Tensor, compute, reduce_axis
from ...errors import ExprError
from ...target import resolve_target
from .conv2d import _divisor_at_most, _output_hw, _padded, _schedule_input_copy, pixels_per_block, static_row_block
from .conv_unblocked import MIN_UNBLOCKED_WIDTH, UNBLOCKED_MIN_REGISTERS, schedule_conv2d_unblocked, unblocking_output
from .elementwise import extents, static_shape
from .pooling import ceil_mode_is_plain, pool_output_size, window_reciprocal
from .registry import (INJECTIVE_TAGS, accumulate_in_registers, accumulator_and_tile, parallel_planes_and_rows,
                       register_schedule, unroll_long_epilogue)


# ------------------------------------------------------------------ layout transforms
def to_blocked(X: Tensor, block: int, name: str = "to_blocked") -> Tensor:
    n, c, h, w = _blocked_dims(X, "to_blocked", (1,))
    if c % block:
        raise ExprError(f"to_blocked: {c} channels are not a multiple of the block {block}")
    return compute((n, c // block, h, w, block), lambda nn, cb, y, x, ci: X[nn, cb * block + ci, y, x],
                   name=name, tag="injective", attrs=dict(blocks=block))


def from_blocked(X: Tensor, channels: int = None, name: str = "from_blocked") -> Tensor:
    """NCHW[b]c -> NCHW; ``channels`` (at most the blocks' channels) drops padding channels at the end."""
    n, cb, h, w, b = _blocked_dims(X, "from_blocked", (1, 4))
    channels = cb * b if channels is None else channels
    if not cb * b - b < channels <= cb * b:
        raise ExprError(f"from_blocked: {channels} channels from {cb} blocks of {b}")
    return compute((n, channels, h, w), lambda nn, c, y, x: X[nn, c // b, y, x, c % b], name=name,
                   tag="injective", attrs=dict(unblocks=b))


def _blocked_dims(X: Tensor, op: str, constant_axes) -> tuple:
    """``X``'s extents (ints, or expressions for symbolic sizes); the channel axes ``constant_axes``
    must be constants (the blocks and the weights are laid out for them)."""
    dims = extents(X)
    for axis in constant_axes:
        if not isinstance(dims[axis], int):
            raise ExprError(f"{op}: {X.name}'s axis {axis} (channels) has the symbolic size {dims[axis]}; "
                            f"only the batch, height and width may be symbolic")
    return dims


def pack_blocked_weight(weight: np.ndarray, block: int, in_block: int) -> np.ndarray:
    """W [OC, C, KH, KW] -> [OC/block, C/in_block, KH, KW, in_block, block]."""
    oc, c, kh, kw = weight.shape
    w = weight.reshape(oc // block, block, c // in_block, in_block, kh, kw).transpose(0, 2, 4, 5, 3, 1)
    return np.ascontiguousarray(w)


def pack_depthwise_weight(weight: np.ndarray, block: int) -> np.ndarray:
    """W [C, 1, KH, KW] -> [C/block, KH, KW, block]."""
    c, _, kh, kw = weight.shape
    return np.ascontiguousarray(weight.reshape(c // block, block, kh, kw).transpose(0, 2, 3, 1))


def _with_bias(Y: Tensor, bias, name: str) -> Tensor:
    """``Y`` (blocked) plus a per-channel ``bias`` [C], as an elementwise stage (a fusable epilogue)."""
    if bias is None:
        return Y
    b = extents(Y)[4]
    return compute(Y.shape, lambda nn, cb, yy, xx, ci: Y[nn, cb, yy, xx, ci] + bias[cb * b + ci],
                   name=name + ".bias", tag="elemwise")


# ------------------------------------------------------------------ convolutions
def conv2d_blocked(X: Tensor, Wp: Tensor, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                   name: str = "conv2d", row_block: int = None, groups: int = 1, whole_blocks: bool = False) -> Tensor:
    """Y [N, OC/b, OH, OW, b] = conv(X, W) (+ bias [OC]); X blocked [N, C/cb, H, W, cb] or NCHW.
    ``row_block``: output pixels per register block on a row of symbolic width (the schedule's
    choice otherwise, ``symbolic_row_block``); ``whole_blocks``: the kernel runs only where they
    divide the row (a variant chosen per binding), so a row's partial last block gets no padded
    copy in registers (``pad_tails``: compile time for code that would never run).  ``groups``: a
    grouped convolution whose groups are whole channel blocks on both sides (blocked input; the
    weight packed from [OC, C/groups, KH, KW]): output block ``ob`` reads the input blocks of its
    group only."""
    xs = _blocked_dims(X, "conv2d_blocked", (1, 4) if X.ndim == 5 else (1,))
    ob_n, cob_n, kh, kw, cb, b = static_shape(Wp)
    blocked_in = len(xs) == 5
    if blocked_in:
        n, xcb, h, w, xb = xs
        if xb != cb:
            raise ExprError(f"conv2d_blocked: the input's channel block {xb} differs from the weight's {cb}")
        c = xcb * xb
    else:
        n, c, h, w = xs
    if groups != 1 and not (blocked_in and ob_n % groups == 0 and (c // cb) % groups == 0):
        raise ExprError(f"conv2d_blocked: {groups} groups need a blocked input and whole channel blocks per group "
                        f"({c // cb if blocked_in else c} input, {ob_n} output blocks)")
    if c != cob_n * cb * groups:
        raise ExprError(f"conv2d_blocked: the input has {c} channels, the weight {cob_n * cb * groups}"
                        + (f" ({groups} groups)" if groups != 1 else ""))
    sh, sw = stride
    dh, dw = dilation
    oh, ow = _output_hw(h, w, (kh, kw), stride, padding, dilation)
    Xp = _padded(X, padding, name)
    rco = reduce_axis((0, cob_n), name="rco")
    ry = reduce_axis((0, kh), name="ry")
    rx = reduce_axis((0, kw), name="rx")
    rci = reduce_axis((0, cb), name="rci")

    def read(nn, ob, yy, xx):
        if blocked_in:
            block = rco if groups == 1 else ob // (ob_n // groups) * cob_n + rco
            return Xp[nn, block, yy * sh + ry * dh, xx * sw + rx * dw, rci]
        return Xp[nn, rco * cb + rci, yy * sh + ry * dh, xx * sw + rx * dw]

    attrs = _row_attrs(dict(kernel=(kh, kw), stride=(sh, sw), block=b, blocked_input=blocked_in), row_block,
                       whole_blocks)
    if groups != 1:
        attrs["groups"] = int(groups)
    Y = compute((n, ob_n, oh, ow, b),
                lambda nn, ob, yy, xx, oi: lw_sum(read(nn, ob, yy, xx) * Wp[ob, rco, ry, rx, rci, oi],
                                                  axis=[rco, ry, rx, rci]),
                name=name, tag="conv2d_blocked", attrs=attrs)
    return _with_bias(Y, bias, name)


def _row_attrs(attrs: dict, row_block, whole_blocks: bool) -> dict:
    """``attrs`` with a symbolic row's register block and ``whole_blocks`` where given."""
    if row_block is not None:
        attrs["row_block"] = int(row_block)
    if whole_blocks:
        attrs["whole_blocks"] = True
    return attrs


#: the most extra multiplies ``merged_groups`` accepts (ResNeXt's 2-channel groups: 8x in 16-channel blocks)
MAX_GROUP_MERGE = 8


def group_merge(weight_shape, groups: int, in_block: int, out_block: int):
    """How many consecutive groups ``merged_groups`` makes one (1: they are whole blocks already), or
    None where that takes more than ``MAX_GROUP_MERGE`` times the multiplies; from the shape alone."""
    oc, per_in = weight_shape[:2]
    k = math.lcm(in_block // math.gcd(in_block, per_in), out_block // math.gcd(out_block, oc // groups))
    if groups % k:
        k = groups          # no whole-block groups: all of them one dense conv (padded to whole blocks)
    return None if k > MAX_GROUP_MERGE else k


def merged_groups(weight: np.ndarray, groups: int, in_block: int, out_block: int):
    """(weight, groups) of a grouped conv as groups of whole channel blocks on both sides (``in_block``
    input channels, ``out_block`` output channels a block), for ``conv2d_blocked(groups=...)``, or None
    where that takes more than ``MAX_GROUP_MERGE`` times the multiplies.  ``k`` consecutive groups (the
    fewest whose input and output channels are both whole blocks) become one, its weight
    [OC, k * C/groups, KH, KW] zero between the small groups inside it: output channel o reads its own
    group's channels only.  Groups already of whole blocks stay as they are (k = 1); where one merged
    group is all the channels (or whole blocks cannot be had: 8 -> 16 in 2 groups) it is a dense
    conv.  Each multiply is a whole vector: a conv of 4-channel groups does 4 multiply-adds per
    output and tap, too few to keep the FMA units busy in any layout."""
    k = group_merge(weight.shape, groups, in_block, out_block)
    if k is None:
        return None
    if k == 1:
        return weight, groups
    oc, per_in, kh, kw = weight.shape
    per_out = oc // groups
    out = np.zeros((oc, k * per_in, kh, kw), weight.dtype)
    for o in range(oc):
        start = (o // per_out) % k * per_in         # its group's first channel within the merged group
        out[o, start:start + per_in] = weight[o]
    return out, groups // k


def depthwise_blocked(X: Tensor, Wd: Tensor, bias=None, stride=(1, 1), padding=(0, 0, 0, 0), dilation=(1, 1),
                      name: str = "depthwise", row_block: int = None, whole_blocks: bool = False) -> Tensor:
    """Y [N, C/b, OH, OW, b]: each channel convolved with its own KH x KW filter (Wd [C/b, KH, KW, b]).
    ``row_block``: pixels per register block on a row of symbolic width (else ``SYMBOLIC_ROW_BLOCK``);
    ``whole_blocks`` as ``conv2d_blocked``'s."""
    n, cbn, h, w, b = _blocked_dims(X, "depthwise_blocked", (1, 4))
    wcb, kh, kw, wb = static_shape(Wd)
    if (wcb, wb) != (cbn, b):
        raise ExprError(f"depthwise_blocked: weight blocks {(wcb, wb)} do not match the input's {(cbn, b)}")
    sh, sw = stride
    dh, dw = dilation
    oh, ow = _output_hw(h, w, (kh, kw), stride, padding, dilation)
    Xp = _padded(X, padding, name)
    ry = reduce_axis((0, kh), name="ry")
    rx = reduce_axis((0, kw), name="rx")
    Y = compute((n, cbn, oh, ow, b),
                lambda nn, cb, yy, xx, ci: lw_sum(Xp[nn, cb, yy * sh + ry * dh, xx * sw + rx * dw, ci] *
                                                  Wd[cb, ry, rx, ci], axis=[ry, rx]),
                name=name, tag="depthwise_blocked", attrs=_row_attrs(dict(block=b), row_block, whole_blocks))
    return _with_bias(Y, bias, name)


# ------------------------------------------------------------------ pools
def pool2d_blocked(X: Tensor, kernel, stride, padding, dilation=(1, 1), pool_type: str = "max",
                   ceil_mode: bool = False, count_include_pad: bool = False, name: str = "pool") -> Tensor:
    """Max / average pooling of a blocked tensor (the channel block stays innermost, vectorized)."""
    n, cbn, h, w, b = _blocked_dims(X, "pool2d_blocked", (1, 4))
    kh, kw = kernel
    sh, sw = stride
    pt, pl, pb, pr = padding
    dh, dw = dilation
    if ceil_mode and not (isinstance(h, int) and isinstance(w, int)) and not (
            ceil_mode_is_plain(kh, sh, pb, dh) and ceil_mode_is_plain(kw, sw, pr, dw)):
        raise ExprError("pool2d_blocked: ceil_mode on a map of symbolic size whose last window may start in the "
                        "right padding is not supported")
    oh = pool_output_size(h, kh, sh, pt, pb, dh, ceil_mode)
    ow = pool_output_size(w, kw, sw, pl, pr, dw, ceil_mode)
    rh = reduce_axis((0, kh), name="rh")
    rw = reduce_axis((0, kw), name="rw")
    lowest = float("-inf") if dtypes.is_float(X.dtype) else int(np.iinfo(X.dtype).min)   # (a uint8 max pool)
    fill = lowest if pool_type == "max" else 0.0

    def read(nn, cb, yy, xx, ci):
        hh, ww = yy * sh - pt + rh * dh, xx * sw - pl + rw * dw
        if not (pt or pl or pb or pr or ceil_mode):
            return X[nn, cb, hh, ww, ci]
        inside = logical_and(logical_and(hh >= 0, hh < h), logical_and(ww >= 0, ww < w))
        return if_then_else(inside, X[nn, cb, hh, ww, ci], const(fill, X.dtype))

    if pool_type == "max":
        body = lambda nn, cb, yy, xx, ci: lw_max(read(nn, cb, yy, xx, ci), axis=[rh, rw])  # noqa: E731
    else:
        def body(nn, cb, yy, xx, ci):
            inv = window_reciprocal(yy, xx, (h, w), kernel, stride, padding, dilation, count_include_pad, ceil_mode,
                                    X.dtype)
            return lw_sum(read(nn, cb, yy, xx, ci) * inv, axis=[rh, rw])
    return compute((n, cbn, oh, ow, b), body, name=name, tag="pool_blocked")


def global_avg_pool_blocked(X: Tensor, name: str = "global_pool") -> Tensor:
    """Mean over H and W of a blocked tensor: [N, C/b, 1, 1, b]."""
    return global_pool_blocked(X, "avg", name)


def global_pool_blocked(X: Tensor, kind: str, name: str = "global_pool") -> Tensor:
    """Mean (``kind="avg"``) or maximum (``"max"``) over H and W of a blocked tensor: [N, C/b, 1, 1, b]."""
    n, cbn, h, w, b = _blocked_dims(X, f"global_{kind}_pool_blocked", (1, 4))
    ry = reduce_axis((0, h), name="ry")
    rx = reduce_axis((0, w), name="rx")
    if kind == "max":
        return compute((n, cbn, 1, 1, b), lambda nn, cb, y, x, ci: lw_max(X[nn, cb, ry, rx, ci], axis=[ry, rx]),
                       name=name, tag="pool_blocked")
    if isinstance(h, int) and isinstance(w, int):
        inv = const(1.0 / (h * w), X.dtype)
    else:       # a symbolic map: the reciprocal of its size, computed once per call (loop-invariant)
        inv = const(1.0, X.dtype) / cast(X.dtype, h * w)
    return compute((n, cbn, 1, 1, b), lambda nn, cb, y, x, ci: lw_sum(X[nn, cb, ry, rx, ci] * inv, axis=[ry, rx]),
                   name=name, tag="pool_blocked")


# ------------------------------------------------------------------ schedules
@register_schedule("conv2d_blocked", "llvm")
def schedule_conv2d_blocked(s, op, target, stream_weights: bool = True):
    """Register block of ``owb`` output pixels x ``nv`` channel vectors, accumulated in registers;
    the reduction (input channel blocks, ky, kx, channel in block) runs outside the block; channel
    blocks (or rows, when there are few) in parallel; the block is stored as whole vectors.

    On a map of symbolic batch, height or width (a shape-polymorphic network): blocks of the op's
    ``row_block`` pixels (or ``symbolic_row_block``; a row's tail runs a partial block); channel
    blocks in parallel where there are enough for the threads, else (row, channel block): only
    constant-extent axes are fused inside, as taking a fused index of symbolic extents apart would
    divide by a run-time size.  ``stream_weights=False``: register blocks of each row on small maps
    too (int16 pairs, whose accumulators in memory cost more than reading their weights per row)."""
    out = op.outputs[0]
    obn = int(out.shape[1].value)
    symbolic = not all(isinstance(d, int) for d in extents(out))
    depthwise = None if symbolic else fused_depthwise(s, op)
    if symbolic:
        wshape = static_shape(next(t for t in op.input_tensors if len(t.shape) == 6))
        nv = _symbolic_channel_vectors(wshape, bool(op.attrs.get("blocked_input")))
    else:
        n_, _, oh_, ow_, _ = [int(d.value) for d in out.shape]
        nv = _channel_vectors(op, obn, ow_) if depthwise is None else (2 if obn % 2 == 0 else 1)
    if int(op.attrs.get("groups", 1)) == obn:
        # each output block its own group: two vectors of a block would read different inputs, a
        # broadcast each; one vector and more pixels share each broadcast and weight load instead
        nv = 1
    registers = target.vector_registers
    rows_inside = False         # (image, channel block) pairs in parallel, the rows inside each
    streams = False             # the whole map's accumulators in memory as the weights stream by (below)
    if symbolic:
        owb, tail = op.attrs.get("row_block") or symbolic_row_block_for(nv, registers), "guard"
    else:
        nv = _register_limited_vectors(nv, registers)
        rows_inside = depthwise is None and n_ * (obn // nv) >= 4 * max(1, target.num_threads)
        streams = stream_weights and rows_inside and oh_ * ow_ <= STREAMED_WEIGHT_PIXELS \
            and ow_ <= pixels_per_block(nv, registers=32)
        if streams:
            owb, tail = ow_, "guard"
        else:
            owb, tail = static_row_block(ow_, pixels_per_block(nv, registers), vectors=nv)
        if depthwise is None and int(op.attrs.get("groups", 1)) == 1 and obn % nv == 0 and not streams and \
                registers >= UNBLOCKED_MIN_REGISTERS and unblocking_output(s, op) is not None:
            # its from_blocked in the same kernel: each row's register blocks stored to NCHW rows
            schedule_conv2d_unblocked(s, op, target, nv, rows_inside,
                                      *static_row_block(ow_, pixels_per_block(nv, registers), vectors=nv))
            for t in op.input_tensors:
                _schedule_blocked_padding(s, t, target.lanes(op.outputs[0].dtype))
            return
    acc, Y = accumulator_and_tile(s, op)
    n, ob, y, x, oi = Y.op.axis
    obo, obi = Y.split(ob, factor=nv)
    xo, xi = Y.split(x, factor=owb, tail=tail)
    if depthwise is not None:
        # the input row of every channel block is computed inside the row: rows in parallel
        Y.reorder(n, y, obo, xo, obi, xi, oi)
        fused = Y.fuse(n, y)
    elif symbolic and obn // nv < 2 * max(1, target.num_threads):
        Y.reorder(n, y, obo, xo, obi, xi, oi)
        fused = Y.fuse(y, obo)
    else:
        Y.reorder(n, obo, y, xo, obi, xi, oi)
        if symbolic:
            fused = obo
        else:
            fused = Y.fuse(n, obo) if rows_inside else Y.fuse(n, obo, y)
    Y.vectorize(oi)
    unroll_long_epilogue(s, op, Y, [obi, xi])
    Y.parallel(fused)
    if symbolic and not op.attrs.get("whole_blocks"):     # a row's partial last block in registers too
        Y.pragma(xo, "pad_tails")                           # (lowering/passes/pad_tail_tiles.py)
    cn, cob, cy, cx, coi = s[acc].op.axis
    rco, ry, rx, rci = s[acc].op.reduce_axis
    if streams:
        # the whole map's accumulators per channel-block pair (in memory, 6 KB at 7x7), each weight
        # vector read once for all rows as it streams in
        A = s[acc]
        A.compute_at(Y, fused)
        A.reorder(cn, rco, ry, rx, cy, rci, cx, cob, coi)
        A.unroll(cx)
        A.unroll(cob)
        A.vectorize(coi)
    else:
        accumulate_in_registers(s, acc, Y, xo, (cn, cy, rco, ry, rx, rci, cx, cob, coi), (cob, cx))
    if depthwise is not None:
        _schedule_depthwise_rows(s, depthwise, op.input_tensors[0], Y, fused)
    for t in op.input_tensors:
        _schedule_blocked_padding(s, t, target.lanes(op.outputs[0].dtype))


#: a map of at most this many output pixels (7x7), each row one register block, with the channel-block
#: pairs shared by the threads (rows inside) computes the whole map per pair, the reduction outermost:
#: each weight vector is read once, in order, and used for every row while it is in L1.  Row by row,
#: the first row read the pair's weights (590 KB for ResNet-18's 512 -> 512 3x3) from memory in a
#: burst the others then found in L2; a network's weights never stay cached from one run to the next.
#: ResNet-18's three 512 -> 512 convs in a network run: 593-600 -> 492-507 us (``exe.profile``, one call
#: each); measure in a network, not alone: ``python -m benchmarks.against_saved --model resnet18 ...``.
#: Its accumulators live in memory, so a row takes it up to a 32-register block's pixels on any target:
#: as AVX2 code (16 registers) register blocks ran the 7x7 layers of ResNet-18 and MobileNetV2 at
#: 0.76-0.85x of it (Zen 5, one thread, CPU time).
STREAMED_WEIGHT_PIXELS = 49


#: output pixels of a register block on a row of symbolic width, at most (a row's partial last block
#: runs padded to a whole one in registers, ``pad_tails``, its reads clamped)
SYMBOLIC_ROW_BLOCK = 8


def symbolic_row_block(weight_shape, blocked_input: bool) -> int:
    """The row block of a conv on rows of symbolic width where no variant applies: the largest power
    of two up to ``SYMBOLIC_ROW_BLOCK`` that fits the registers (``pixels_per_block``)."""
    return symbolic_row_block_for(_symbolic_channel_vectors(weight_shape, blocked_input))


def symbolic_row_block_for(nv: int, registers: Optional[int] = None) -> int:
    """``symbolic_row_block`` for a register block of ``nv`` channel vectors."""
    limit = min(SYMBOLIC_ROW_BLOCK, pixels_per_block(nv, registers))
    return 1 << (limit.bit_length() - 1)


def row_block_fits(weight_shape, blocked_input: bool, pixels: int) -> bool:
    """Whether a register block of ``pixels`` fits the registers of this conv's symbolic schedule."""
    return pixels <= pixels_per_block(_symbolic_channel_vectors(weight_shape, blocked_input))


def _symbolic_channel_vectors(weight_shape, blocked_input: bool) -> int:
    """``_channel_vectors`` for a row of unknown width: a first layer's (plain input) taken as wide
    as a stem's, any other as a wide row; as many as the registers of the CPU compiled for allow."""
    obn, cob, kh, kw, cb, _ = weight_shape
    nv = _vectors_for(obn, cob * kh * kw * cb, WIDE_ROW if blocked_input else STEM_ROW)
    return _register_limited_vectors(nv, resolve_target("llvm").vector_registers)


def _register_limited_vectors(nv: int, registers: int) -> int:
    """Channel vectors per block where the registers allow them: with 16, four vectors leave two
    pixels a block (eight weight and broadcast loads for eight FMAs), so two vectors take six."""
    return 2 if nv == 4 and pixels_per_block(nv, registers) < 4 else nv


#: a reduction (input channels x kernel taps) at most this long is short: see ``_channel_vectors``;
#: re-measure: ``python -m benchmarks.conv2d``
SHORT_REDUCTION = 32
#: a row at least this wide takes more channel vectors per register block when its reduction is short
WIDE_ROW = 27
#: a first layer's rows (this wide, with a reduction up to STEM_REDUCTION) take them too
STEM_ROW, STEM_REDUCTION = 100, 160


def _channel_vectors(op, obn: int, ow: int) -> int:
    """Output channel vectors per register block: 4 (else 3) where each input value feeds little
    work (a short reduction on a wide map, or a first layer's map of 100+ pixels a row), 3 for an
    odd count of blocks divisible by 3 on a wide map, else 2 (1 for an odd count).  With few input
    channels the kernel is bound by reading its input, once per block of channels: more vectors
    read it less often.  Measured against the two-vector (or one-vector) block (Zen 4, 2 threads,
    interleaved): 4 vectors: SqueezeNet's first conv (3 channels, 111x111) 1.40x, its 1x1 16->64 at
    55x55 1.28x and 32->128 at 27x27 1.18x, ResNet-18's 7x7 stem 1.16x, but 0.81-0.95x on ResNet's
    layers at 28x28 and below and 0.45-0.5x on 13x13 maps (a one-pixel block); 3 vectors:
    MobileNetV2's 1x1 16->96 at 112x112 1.34x, 24->144 at 56x56 1.06x, EfficientNet-Lite's
    96/144->24 at 56x56 (three blocks of 8) 1.14-1.18x."""
    weight = next(t for t in op.input_tensors if len(t.shape) == 6)
    _, cob, kh, kw, cb, _ = (int(d.value) for d in weight.shape)
    return _vectors_for(obn, cob * kh * kw * cb, ow)


def _vectors_for(obn: int, reduction: int, ow: int) -> int:
    input_bound = (reduction <= SHORT_REDUCTION and ow >= WIDE_ROW) or (ow >= STEM_ROW and reduction <= STEM_REDUCTION)
    if input_bound and obn % 4 == 0:
        return 4
    if (input_bound or obn % 2) and obn % 3 == 0 and ow >= WIDE_ROW:
        return 3
    return 2 if obn % 2 == 0 else 1


def _schedule_blocked_padding(s, tensor, lanes: int) -> None:
    """A padding stage at root: (image, channel block) planes in parallel, the channel vector innermost."""
    if getattr(tensor.op, "tag", "") != "conv2d.pad":
        return
    if len(tensor.shape) == 4:
        _schedule_input_copy(s, tensor, lanes)
        return
    P = s[tensor]
    pn, pcb, _, _, pci = P.op.axis
    P.parallel(P.fuse(pn, pcb))
    P.vectorize(pci)


def fused_depthwise(s, conv_op):
    """The ``depthwise_blocked`` op whose result (through inlined elementwise stages: bias, clip)
    is the input of the 1x1 stride-1 ``conv_op`` in the same schedule, or None.

    Such a pair (MobileNetV2's depthwise -> project, one kernel from ``fuse_operators``) is
    scheduled by the 1x1 convolution: each of its output rows first computes the depthwise row
    of every channel block, so that row never leaves the cache.
    """
    _, _, kh, kw, _, _ = static_shape(conv_op.input_tensors[1])
    if (kh, kw) != (1, 1) or conv_op.attrs.get("stride") != (1, 1) or not conv_op.attrs.get("blocked_input"):
        return None
    producer = conv_op.input_tensors[0].op
    while isinstance(producer, ComputeOp) and producer.tag in INJECTIVE_TAGS and s[producer].attach_type == "inline":
        data = [t for t in producer.input_tensors if isinstance(t.op, ComputeOp)]
        if len(data) != 1:
            return None
        producer = data[0].op
    if getattr(producer, "tag", "") != "depthwise_blocked" or len(s.consumers_of(s[producer])) != 1:
        return None         # (a second reader would need the whole result, not one row at a time)
    return producer


def _depthwise_consumer(s, op):
    """The 1x1 convolution that schedules ``op`` inside its rows (``fused_depthwise``), or None."""
    for stage in s.stages:
        if getattr(stage.op, "tag", "") == "conv2d_blocked" and fused_depthwise(s, stage.op) is op:
            return stage.op
    return None


def _schedule_depthwise_rows(s, op, result, host, at) -> None:
    """Compute the depthwise ``op`` (its ``result``: itself or the elementwise stage after it)
    inside ``host``'s row loop ``at``: every channel block of the row, a segment of pixels x one
    channel vector accumulating its taps in registers, the padded input rows per channel block."""
    if result.op is op:
        acc = s.cache_write(op.outputs[0], "local")
        D = s[op]
    else:
        acc = op.outputs[0]
        D = s[result.op]
        D.compute_root()
    D.compute_at(host, at)
    n, cb, y, x, ci = D.op.axis
    xo, xi = D.split(x, factor=_divisor_at_most(int(result.shape[3].value), 8))
    D.reorder(n, cb, y, xo, xi, ci)
    D.vectorize(ci)
    unroll_long_epilogue(s, op, D, [xi])
    an, acb, ay, ax, aci = s[acc].op.axis
    ry, rx = s[acc].op.reduce_axis
    accumulate_in_registers(s, acc, D, xo, (an, acb, ay, ry, rx, ax, aci), (ax,))
    _pad_at(s, op, D, cb)


def _pad_at(s, op, host, at) -> None:
    """The padded input rows ``op`` reads, computed inside ``host``'s loop ``at`` (a memory-bound
    op cannot afford a padded copy of its whole input: 1.5-2.9x faster on MobileNetV2's layers)."""
    for t in op.input_tensors:
        if getattr(t.op, "tag", "") == "conv2d.pad":
            P = s[t]
            P.compute_at(host, at)
            P.vectorize(P.op.axis[-1])


@register_schedule("depthwise_blocked", "llvm")
def schedule_depthwise_blocked(s, op, target):
    """(image, channel block, row) in parallel; a row segment of pixels x one channel vector
    accumulates its taps in registers.  Feeding a 1x1 convolution in the same kernel, the
    convolution schedules it (``fused_depthwise``)."""
    if _depthwise_consumer(s, op) is not None:
        return
    out = op.outputs[0]
    width = out.shape[3]
    owb = _divisor_at_most(int(width.value), 8) if isinstance(width, Const) else \
        op.attrs.get("row_block", SYMBOLIC_ROW_BLOCK)           # symbolic: the row's tail a partial block
    acc, Y = accumulator_and_tile(s, op)
    n, cb, y, x, ci = Y.op.axis
    xo, xi = Y.split(x, factor=owb)
    row = parallel_planes_and_rows(Y, n, cb, y, [xo, xi, ci], threads=max(1, target.num_threads))
    Y.vectorize(ci)
    unroll_long_epilogue(s, op, Y, [xi])
    if not isinstance(width, Const) and not op.attrs.get("whole_blocks"):     # a partial last block in registers
        Y.pragma(xo, "pad_tails")
    an, acb, ay, ax, aci = s[acc].op.axis
    ry, rx = s[acc].op.reduce_axis
    accumulate_in_registers(s, acc, Y, xo, (an, acb, ay, ry, rx, ax, aci), (ax,))
    _pad_at(s, op, Y, row)


@register_schedule("pool_blocked", "llvm")
def schedule_pool_blocked(s, op, target):
    """(image, channel block, row) in parallel (of symbolic height: each plane's rows in order where
    the blocks suffice, as a depthwise conv's); the channel vector innermost."""
    Y = s[op]
    n, cb, y, x, ci = Y.op.axis
    parallel_planes_and_rows(Y, n, cb, y, [x, *Y.op.reduce_axis, ci], threads=max(1, target.num_threads))
    Y.vectorize(ci)


def blocked_shape(shape, block: int):
    n, c, h, w = shape
    return (n, c // block, h, w, block)


def runs_unblocked(shape, weight_shape, target) -> bool:
    """Whether a static blocked conv of result ``shape`` [N, OC/b, OH, OW, b] and packed weight
    ``weight_shape`` takes this form on ``target`` (as ``schedule_conv2d_blocked`` decides it):
    rows of ``MIN_UNBLOCKED_WIDTH`` pixels or more, ``UNBLOCKED_MIN_REGISTERS`` registers, and a map
    whose weights do not stream past the whole map's accumulators.  Elsewhere the conv's own kernel
    and a from_blocked after it are faster than one kernel running both stages one after the other."""
    n, obn, oh, ow, _ = shape
    _, cob, kh, kw, cb, _ = weight_shape
    registers = target.vector_registers
    if ow < MIN_UNBLOCKED_WIDTH or registers < UNBLOCKED_MIN_REGISTERS:
        return False
    nv = _register_limited_vectors(_vectors_for(obn, cob * kh * kw * cb, ow), registers)
    rows_inside = n * (obn // nv) >= 4 * max(1, target.num_threads)
    streams = rows_inside and oh * ow <= STREAMED_WEIGHT_PIXELS and ow <= pixels_per_block(nv, registers=32)
    return obn % nv == 0 and not streams
