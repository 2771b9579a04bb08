"""Winograd F(2x2, 3x3) on blocked maps of symbolic height and width (shape-polymorphic networks).

The same three stages as ``winograd.py`` (input transform, 16 matmuls, output transform, with the
weight transformed once by ``winograd_weight``), laid out for sizes known only at run time:

* tiles are indexed by (tile row, tile column), never by one flat index (taking a flat index
  apart would divide by the run-time tile count per access);
* an odd output height or width gets a last, partial tile: the input is padded by one more zero
  row and column at the bottom and right, and the output transform writes only the pixels inside;
* the schedule always runs the fused form of ``schedule_winograd_output``: per pair of output rows
  (and part of the output channels), that row's input transform and its 16 matmuls, then the
  output transform and the epilogue, all in one parallel iteration; the matmuls keep register
  blocks of ``tile_block`` tiles (the caller picks one that divides the row where it can; where the
  width is known to give at least a block, the row's last block overlaps the one before, else a
  partial last block keeps its accumulators in registers too, ``pad_tails``).

Tags: ``conv2d_winograd_rows.input``, ``.gemm`` and ``conv2d_winograd_rows`` (the output).
"""
from __future__ import annotations

from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .conv2d import _output_hw, _padded
from .elementwise import static_shape
from .nchwc import _blocked_dims, _schedule_blocked_padding, _with_bias
from .registry import accumulate_in_registers, fused_output, register_schedule
from .winograd import input_transform, output_transform

#: register block of the matmuls, in tiles, where the caller gives none
TILE_BLOCK = 8


def conv2d_winograd_rows(X: Tensor, U: Tensor, bias=None, padding=(1, 1, 1, 1), name: str = "conv2d",
                         tile_block: int = TILE_BLOCK, whole_blocks: bool = False) -> Tensor:
    """Y [N, OC/b, OH, OW, b]: the 3x3 stride-1 convolution of blocked X [N, C/cb, H, W, cb] (any of
    N, H, W symbolic) by the weight whose Winograd transform is U [16, OC/b, C/cb, cb, b], (+ bias).
    ``whole_blocks``: the kernel runs only where blocks of ``tile_block`` tiles divide a row's tiles
    (a variant chosen per binding): no padded copy of a partial last block in registers."""
    n, cbn, h, w, cb = _blocked_dims(X, "conv2d_winograd_rows", (1, 4))
    sixteen, obn, ucbn, ucb, b = static_shape(U)
    if sixteen != 16 or (ucbn, ucb) != (cbn, cb):
        raise ExprError(f"conv2d_winograd_rows: the transformed weight {static_shape(U)} does not match the "
                        f"input's channel blocks ({cbn} x {cb}); make it with winograd_weight")
    oh, ow = _output_hw(h, w, (3, 3), (1, 1), padding, (1, 1))
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    pt, pl, pb, pr = padding
    Xp = _padded(X, (pt, pl, pb + 1, pr + 1), name)      # a partial last tile reads zeros
    attrs = dict(tile_block=int(tile_block), out_blocks=obn, whole_blocks=bool(whole_blocks))

    def transform_in(nn, cbi, ty, tx, e, ci):
        return input_transform(lambda a, bb: Xp[nn, cbi, ty * 2 + a, tx * 2 + bb, ci], e)

    V = compute((n, cbn, th, tw, 16, cb), transform_in, name=name + ".wino_in", tag="conv2d_winograd_rows.input",
                attrs=attrs)
    rco = reduce_axis((0, cbn), name="rco")
    rci = reduce_axis((0, cb), name="rci")
    M = compute((n, obn, th, tw, 16, b),
                lambda nn, ob, ty, tx, e, oi: lw_sum(V[nn, rco, ty, tx, e, rci] * U[e, ob, rco, rci, oi],
                                                     axis=[rco, rci]),
                name=name + ".wino_gemm", tag="conv2d_winograd_rows.gemm", attrs=attrs)

    def transform_out(nn, ob, yy, xx, oi):
        return output_transform([M[nn, ob, yy // 2, xx // 2, e, oi] for e in range(16)], (yy % 2) * 2 + xx % 2)

    Y = compute((n, obn, oh, ow, b), transform_out, name=name, tag="conv2d_winograd_rows",
                attrs=dict(kernel=(3, 3), stride=(1, 1), block=b, winograd=(2, 3)))
    return _with_bias(Y, bias, name)


#: output channel blocks from which the output channels run in two parts (below it, two parts would
#: transform each row's input twice); re-measure: ``python -m benchmarks.dynamic --model resnet18``
TWO_PARTS_FROM_BLOCKS = 16


def _channel_parts(obn: int, nv: int) -> int:
    """The output channels in two parts (each transforming the row's input again) where there are
    at least ``TWO_PARTS_FROM_BLOCKS`` channel blocks of whole register tiles, else one.  The
    number of rows is known only at run time; in a CNN the maps shrink as the channels grow, and
    the part's second input transform costs in proportion to 1 / the output channels: with 64
    channels two parts made ResNet-18's 56x56 layers 1.1x slower than the static Winograd (one part:
    equal), with 256 at 14x14 (7 row pairs for 2 threads) one part left a thread idle."""
    return 2 if obn >= TWO_PARTS_FROM_BLOCKS and obn % (2 * nv) == 0 else 1


@register_schedule("conv2d_winograd_rows.input", "llvm")
def schedule_winograd_rows_input(s, op, target):
    """Placed by the output transform's schedule (``schedule_winograd_rows_output``)."""
    _schedule_blocked_padding(s, op.input_tensors[0], target.lanes(op.outputs[0].dtype))


@register_schedule("conv2d_winograd_rows.gemm", "llvm")
def schedule_winograd_rows_gemm(s, op, target):
    """Placed by the output transform's schedule (``schedule_winograd_rows_output``)."""


@register_schedule("conv2d_winograd_rows", "llvm")
def schedule_winograd_rows_output(s, op, target):
    """Per pair of output rows and part of the output channels, in parallel: the row's input
    transform (16 values a tile, unrolled; the channel vector innermost), its 16 matmuls (register
    blocks of ``tile_block`` tiles x ``nv`` channel vectors over the input channels), then the
    output transform with its epilogue (2x2 tiles unrolled, channels vectorized).  The images run
    as a serial loop outside (only constant-extent axes are fused)."""
    final = fused_output(s, op)
    if final is not s[op]:
        s[op].compute_inline()
    M = op.input_tensors[0].op
    V = M.input_tensors[0].op
    obn, tb = int(M.attrs["out_blocks"]), int(M.attrs["tile_block"])
    # two channel vectors where their block fits the registers with its weights and a broadcast
    # (AVX2's 16 do not hold 2 x 7 tiles: one vector then, 7 accumulators in registers)
    nv = 2 if obn % 2 == 0 and 2 * tb + 3 <= target.vector_registers else 1
    parts = _channel_parts(obn, nv)
    n, ob, y, x, oi = final.op.axis
    yo, yi = final.split(y, factor=2)
    xo, xi = final.split(x, factor=2)
    part, ob = final.split(ob, nparts=parts)
    final.reorder(n, yo, part, ob, xo, yi, xi, oi)
    rows = final.fuse(yo, part)
    final.parallel(rows)
    final.unroll(yi)
    final.unroll(xi)
    final.vectorize(oi)
    # the matmuls of the row: (position, channel-vector pair, tile block) around a register block
    Ms = s[M]
    acc = s.cache_write(M.outputs[0], "local")
    mn, mob, mty, mtx, me, moi = Ms.op.axis
    obo, obi = Ms.split(mob, factor=nv)
    # a row of at least one block (a kernel built over such sizes): its last block moved inwards,
    # overlapping the one before (those tiles computed again, the same values), so every block whole
    txo, txi = Ms.split(mtx, factor=tb, tail="guard" if M.attrs["whole_blocks"] else "shift")
    Ms.reorder(mn, mty, me, obo, txo, obi, txi, moi)
    Ms.vectorize(moi)
    Ms.compute_at(final, rows)
    if not M.attrs["whole_blocks"]:     # a row's partial last block of tiles in registers
        Ms.pragma(txo, "pad_tails")
    cn, cob, cty, ctx, ce, coi = s[acc].op.axis
    rco, rci = s[acc].op.reduce_axis
    accumulate_in_registers(s, acc, Ms, txo, (cn, cty, ce, rco, rci, ctx, cob, coi), (ctx, cob))
    Vs = s[V]
    Vs.compute_at(final, rows)
    Vs.unroll(Vs.op.axis[4])
    Vs.vectorize(Vs.op.axis[5])
