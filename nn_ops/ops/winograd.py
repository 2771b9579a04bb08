"""Winograd F(2x2, 3x3) convolution in the blocked layout: 2.25x fewer multiplies.

A 3x3, stride-1 convolution computes each 2x2 output tile from a 4x4 input patch ``d``
as ``A^T [(G g G^T) . (B^T d B)] A`` (Lavin & Gray, 2015).  The weight transform
``U = G g G^T`` is done once, when the network is compiled (``winograd_weight``); at run
time three stages remain:

* ``<name>.wino_in`` V[n, C/cb, tile, e, cb]: the input transform ``B^T d B`` of every
  tile, for each of the 16 positions ``e`` of the 4x4 patch (adds and subtracts only);
* ``<name>.wino_gemm`` M[n, OC/b, tile, e, b] = sum over input channels of V * U: 16
  independent matmuls (tiles x C by C x OC), register-blocked like ``conv2d_blocked``;
* ``<name>`` Y[n, OC/b, OH, OW, b]: the output transform ``A^T M A`` (tag
  ``conv2d_winograd``), pointwise per output pixel, so a fused epilogue (bias, residual
  add, relu) takes it inline.

Shapes: blocked input [N, C/cb, H, W, cb] (``nchwc.py``), any output height and width: an odd
one's last row (column) of 2x2 tiles reads one more zero row (column) of input, and the output
transform writes only the pixels that exist (SqueezeNet's 55x55 and 27x27 fire modules: 1.32x and
1.48x the direct kernel, the network 1.07x).  The position ``e`` sits next to the channel vector in V and M, so the
input transform writes, and the output transform reads, a tile's 16 values as one
contiguous kilobyte (with ``e`` outermost the 16 planes of a 56x56x64 layer lie 49 x 4 KiB
apart; that layout was not timed once the workspace fix in ``backends/llvm/codegen.py``
removed the page faults that first dominated both).  F(2x2, 3x3) keeps the rounding error
near the direct convolution's (transform coefficients are 0, +-1 and 1/2); larger tiles
(F(4x4, 3x3)) save more multiplies but lose about two digits.  ``choose_conv_layout`` picks this form for the
layers where it pays (see ``winograd_pays``).
"""
from __future__ import annotations

from functools import lru_cache
from typing import Optional

import numpy as np

from ...dsl.expr import if_then_else
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from ...target import Target, resolve_target
from ...backends.llvm.cpu_facts import core_facts
from .conv2d import _divisor_at_most, _output_hw, _padded
from .elementwise import static_shape
from .nchwc import _schedule_blocked_padding, _with_bias
from .registry import accumulate_in_registers, fused_output, register_schedule

# Y = A^T [(G g G^T) . (B^T d B)] A for a 2x2 output tile, a 3x3 filter and a 4x4 input patch
_BT = np.array([[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]], dtype=np.float64)
_G = np.array([[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]], dtype=np.float64)
_AT = np.array([[1, 1, 1, 0], [0, 1, -1, -1]], dtype=np.float64)


def winograd_pays(kernel, stride, dilation, out_hw, channels: int, out_channels: int, target=None) -> bool:
    """Whether a blocked conv runs faster as Winograd F(2x2, 3x3) on ``target`` (see
    ``winograd_largest_map``; default the CPU ``"llvm"`` means).

    Only 3x3, stride 1, undilated (odd maps too: their last tiles are half outside), on maps from
    ``MIN_WINOGRAD_PIXELS`` to ``winograd_largest_map(target)``.  Smaller maps have few tiles per
    matmul and transformed weights 16/9 of the direct ones' bytes.  Re-measure:
    ``python -m benchmarks.conv2d`` and ``python -m benchmarks.network``."""
    oh, ow = out_hw
    return (tuple(kernel) == (3, 3) and tuple(stride) == (1, 1) and tuple(dilation) == (1, 1)
            and MIN_WINOGRAD_PIXELS <= oh * ow <= winograd_largest_map(target)
            and min(channels, out_channels) >= 16)


#: the smallest map (pixels) where Winograd is used: at 13x13 it was faster alone but slower in a
#: network (SqueezeNet, ``python -m benchmarks.network --models squeezenet1_1``)
MIN_WINOGRAD_PIXELS = 14 * 14
#: the largest map (pixels) where Winograd is used, by how many of the two facts that favour it a
#: target has (``winograd_map_limit``): none 16x16, one 56x56, both 256x256
WINOGRAD_MAP_LIMITS = (16 * 16, 56 * 56, 256 * 256)
#: the limit where the target's facts are not known (a CPU model outside ``cpu_facts.CPU_CORES``)
MAX_WINOGRAD_PIXELS = WINOGRAD_MAP_LIMITS[1]
#: the L2 per core from which the fused form's transformed tile rows stay in it
WINOGRAD_L2_BYTES = 1 << 20


def winograd_map_limit(fma_per_cycle: Optional[float], l2_bytes: Optional[int]) -> int:
    """The largest map (pixels) where Winograd pays on a core issuing ``fma_per_cycle`` vector FMA
    instructions per cycle at the build's width, with ``l2_bytes`` of L2.

    Winograd does 2.25x fewer FMAs and moves the transformed input and products (4x the map's
    bytes each) through the caches; two facts make that trade pay on larger maps.  Two FMA
    instructions per cycle: a direct kernel must then keep twice the accumulators and loads in
    flight to stay near peak (with one it does from a few), so fewer FMAs save more.  An L2 of at
    least ``WINOGRAD_L2_BYTES``: the fused form's tile rows stay in it.  As measured: Rocket Lake
    (one 512-bit FMA per cycle, 512 KiB L2) lost at 28x28 and 56x56 (ResNet-18 1.33x direct) and
    won at 14x14-16x16; Zen 4 (one, 1 MiB) won to 56x56; Zen 3 and Zen 5 as AVX2 (two 256-bit)
    won at 56x56 (ResNet-18 1.39x with it on Zen 3); Zen 5 (two 512-bit, 1 MiB) won to U-Net's
    256x256 (1.29x), and as AVX2 code 1.55-1.8x the direct kernel at 112x112 to 256x256.  Facts not known: the middle limit.  Re-measure:
    ``python -m benchmarks.network --models resnet18 unet`` and ``python -m benchmarks.conv2d``."""
    if fma_per_cycle is None or l2_bytes is None:
        return MAX_WINOGRAD_PIXELS
    return WINOGRAD_MAP_LIMITS[(fma_per_cycle >= 2) + (l2_bytes >= WINOGRAD_L2_BYTES)]


def winograd_largest_map(target=None) -> int:
    """The largest map (pixels) where Winograd pays on ``target`` (a Target, a target string or an
    LLVM CPU name; default the CPU ``"llvm"`` means), from its FMA rate and L2
    (``winograd_map_limit``; the facts ``lw.target_info`` prints)."""
    return _largest_map(_as_target(target))


def _as_target(target) -> Target:
    if target is None or isinstance(target, Target) or target.split()[:1] == ["llvm"]:
        return resolve_target(target)
    host = resolve_target("llvm")
    return host if target in ("", host.cpu) else resolve_target(f"llvm -mcpu={target}")


@lru_cache(maxsize=None)
def _largest_map(target: Target) -> int:
    facts = core_facts(target)
    return winograd_map_limit(facts.fma_instructions_per_cycle, facts.cache("L2"))


def winograd_weight(weight: np.ndarray, block: int, in_block: int) -> np.ndarray:
    """U [16, OC/b, C/cb, cb, b] = G g G^T of an [OC, C, 3, 3] weight, packed for the gemm stage."""
    oc, c, kh, kw = weight.shape
    if (kh, kw) != (3, 3) or oc % block or c % in_block:
        raise ExprError(f"winograd_weight: needs a [OC, C, 3, 3] weight with OC % {block} == 0 and "
                        f"C % {in_block} == 0, got {weight.shape}")
    u = np.einsum("ea,ocab,fb->efoc", _G, weight.astype(np.float64), _G)          # [4, 4, OC, C]
    u = u.reshape(16, oc // block, block, c // in_block, in_block)
    return np.ascontiguousarray(u.transpose(0, 1, 3, 4, 2)).astype(weight.dtype)


def _pick(index, table):
    """``table[index]`` for an index expression that unrolling makes constant: a select chain."""
    value = table[-1]
    for k in range(len(table) - 2, -1, -1):
        value = if_then_else(index == k, table[k], value)
    return value


def _combination(coefficients, terms):
    """sum(c * t) over the nonzero coefficients, with +-1 as adds and subtracts."""
    out = None
    for c, t in zip(coefficients, terms):
        if c == 0:
            continue
        t = t if abs(c) == 1 else t * float(abs(c))
        if out is None:
            out = t if c > 0 else -t
        else:
            out = out + t if c > 0 else out - t
    return out


def input_transform(read, e):
    """Position ``e`` (0-15, an index expression) of ``B^T d B`` for the 4x4 patch ``read(a, b)``."""
    patch = [[read(a, bb) for bb in range(4)] for a in range(4)]
    table = []
    for eps in range(4):
        rows = [_combination(_BT[eps], [patch[a][bb] for a in range(4)]) for bb in range(4)]
        for nu in range(4):
            table.append(_combination(_BT[nu], rows))
    return _pick(e, table)


def output_transform(planes, position):
    """Pixel ``position`` (0-3: row * 2 + column, an index expression) of ``A^T M A`` for a tile's 16
    matmul results ``planes``."""
    table = []
    for i in range(2):
        for j in range(2):
            rows = [_combination(_AT[j], planes[eps * 4:eps * 4 + 4]) for eps in range(4)]
            table.append(_combination(_AT[i], rows))
    return _pick(position, table)


def conv2d_winograd_blocked(X: Tensor, U: Tensor, bias=None, padding=(1, 1, 1, 1), name: str = "conv2d") -> Tensor:
    """Y [N, OC/b, OH, OW, b] = the 3x3 stride-1 convolution of blocked X by the weight whose
    Winograd transform is U [16, OC/b, C/cb, cb, b] (``winograd_weight``), (+ bias [OC])."""
    n, cbn, h, w, cb = static_shape(X)
    sixteen, obn, ucbn, ucb, b = static_shape(U)
    if sixteen != 16 or (ucbn, ucb) != (cbn, cb):
        raise ExprError(f"conv2d_winograd_blocked: the transformed weight {static_shape(U)} does not match the "
                        f"input's channel blocks ({cbn} x {cb}); make it with winograd_weight")
    oh, ow = _output_hw(h, w, (3, 3), (1, 1), padding, (1, 1))
    th, tw = (oh + 1) // 2, (ow + 1) // 2
    # an odd output's last row (column) of tiles reads one more zero row (column) of input, and the
    # output transform writes only the pixels that exist
    pt, pl, pb, pr = padding
    Xp = _padded(X, (pt, pl, pb + 2 * th - oh, pr + 2 * tw - ow), name)
    tiles = th * tw

    def transform_in(nn, cbi, t, e, ci):
        ty, tx = t // tw, t % tw
        return input_transform(lambda a, bb: Xp[nn, cbi, ty * 2 + a, tx * 2 + bb, ci], e)

    V = compute((n, cbn, tiles, 16, cb), transform_in, name=name + ".wino_in", tag="conv2d_winograd.input",
                attrs=dict(tile_width=tw))
    rco = reduce_axis((0, cbn), name="rco")
    rci = reduce_axis((0, cb), name="rci")
    M = compute((n, obn, tiles, 16, b),
                lambda nn, ob, t, e, oi: lw_sum(V[nn, rco, t, e, rci] * U[e, ob, rco, rci, oi], axis=[rco, rci]),
                name=name + ".wino_gemm", tag="conv2d_winograd.gemm", attrs=dict(tile_width=tw))

    def transform_out(nn, ob, yy, xx, oi):
        t = (yy // 2) * tw + xx // 2
        return output_transform([M[nn, ob, t, e, oi] for e in range(16)], (yy % 2) * 2 + xx % 2)

    Y = compute((n, obn, oh, ow, b), transform_out, name=name, tag="conv2d_winograd",
                attrs=dict(kernel=(3, 3), stride=(1, 1), block=b, winograd=(2, 3)))
    return _with_bias(Y, bias, name)


#: a row of tiles whose flat-form register block (``flat_tile_block``) is below this runs the rows
#: form (``winograd_rows.py``, blocks of 7 tiles and a shorter last one) instead
ROW_TILES_FORM_BELOW = 4


def flat_tile_block(tiles: int, out_blocks: int, registers: Optional[int] = None) -> int:
    """The flat form's register block in tiles: a divisor of ``tiles`` (one row's, or all of them)
    that fits with the channel vectors of ``out_blocks`` output blocks (28 accumulators at most,
    and with the weight vectors and a broadcast, the target's ``registers``; by default those of
    the CPU compiled for)."""
    nv = 2 if out_blocks % 2 == 0 else 1
    if registers is None:
        registers = resolve_target("llvm").vector_registers
    return _divisor_at_most(tiles, min(28 // nv, (registers - 1 - nv) // nv))


def takes_rows_form(X: Tensor, U: Tensor, padding) -> bool:
    """Whether the static 3x3 convolution of blocked X by U runs in the rows form: where a row's
    tiles have no divisor that makes a register block (29 tiles a row at 57x57 ran the flat form's
    blocks of one tile, 450 GFLOPS against 860 at 56x56)."""
    ow = _output_hw(1, static_shape(X)[3], (3, 3), (1, 1), padding, (1, 1))[1]
    return flat_tile_block((ow + 1) // 2, static_shape(U)[1]) < ROW_TILES_FORM_BELOW


# ------------------------------------------------------------------ schedules
#: the fused form needs this many parallel iterations per thread (fewer leave threads idle)
FUSED_ROWS_PER_THREAD = 4


def fuses_rows(images: int, tile_rows: int, threads: int) -> bool:
    """Whether the default schedule computes the three stages per row of 2x2 tiles (else each stage
    at root).

    Fused, each row's transformed input (C x tiles x 16 values) and its 16 matmul results stay
    in the cache between the stages (unfused, at 56x56 and 64 channels, they write and read back
    two 3.2 MB arrays; fused ran 1.25-1.37x faster there).  With fewer than
    ``FUSED_ROWS_PER_THREAD`` rows per thread (14x14: 7 rows for 2 threads) the stages run at root,
    where each position's matmul reads its transformed weight once for all tiles (fused, each row
    read the whole weight, more than the L2, from memory in a network).  Re-measure in a network:
    ``python -m benchmarks.against_saved --model resnet18 ...``."""
    return images * tile_rows >= FUSED_ROWS_PER_THREAD * max(1, threads)


def _fused(op, target) -> bool:
    """``fuses_rows`` for the input-transform or the gemm stage ``op`` (both carry the layer's tile
    width), so the three stages' schedules decide alike."""
    n, _, tiles = (int(d.value) for d in op.outputs[0].shape[:3])
    return fuses_rows(n, tiles // int(op.attrs["tile_width"]), target.num_threads)


@register_schedule("conv2d_winograd.input", "llvm")
def schedule_winograd_input(s, op, target):
    """Per (channel block, tile row) in parallel: the 16 transformed values of each tile,
    unrolled (so the select on ``e`` folds), the channel vector innermost.  In the fused form
    the output transform's schedule places it (``schedule_winograd_output``)."""
    _schedule_blocked_padding(s, op.input_tensors[0], target.lanes(op.outputs[0].dtype))
    if _fused(op, target):
        return
    V = s[op]
    nn, cbi, t, e, ci = V.op.axis
    to, tx = V.split(t, factor=int(op.attrs["tile_width"]))
    V.reorder(nn, cbi, to, tx, e, ci)
    V.parallel(V.fuse(nn, cbi, to))
    V.unroll(e)
    V.vectorize(ci)


@register_schedule("conv2d_winograd.gemm", "llvm")
def schedule_winograd_gemm(s, op, target):
    """16 matmuls, each register-blocked as ``tb`` tiles x ``nv`` output-channel vectors
    accumulated over the input channels; (position, channel-block pair) in parallel.  In the
    fused form the output transform's schedule places it (``schedule_winograd_output``)."""
    if _fused(op, target):
        return
    nn, e, obo, _ = _register_blocked_gemm(s, op, int(op.outputs[0].shape[2].value), target)
    s[op].parallel(s[op].fuse(nn, e, obo))


def _register_blocked_gemm(s, op, tiles: int, target):
    """The gemm stage's loops (n, position, channel-block pair, tile block) around a register
    block of ``tb`` tiles x ``nv`` channel vectors, ``tb`` a divisor of ``tiles`` (all of them,
    or one row's); returns those four loops (the accumulator is computed in the last)."""
    obn = int(op.outputs[0].shape[1].value)
    nv = 2 if obn % 2 == 0 else 1
    tb = flat_tile_block(tiles, obn, target.vector_registers)
    M = s[op]
    acc = s.cache_write(op.outputs[0], "local")
    nn, ob, t, e, oi = M.op.axis
    obo, obi = M.split(ob, factor=nv)
    to, ti = M.split(t, factor=tb)
    M.reorder(nn, e, obo, to, obi, ti, oi)
    M.vectorize(oi)
    cn, cob, ct, ce, coi = s[acc].op.axis
    rco, rci = s[acc].op.reduce_axis
    accumulate_in_registers(s, acc, M, to, (cn, ce, rco, rci, ct, cob, coi), (ct, cob))
    return nn, e, obo, to


@register_schedule("conv2d_winograd", "llvm")
def schedule_winograd_output(s, op, target):
    """The output transform runs inside its fused epilogue (if any): output rows in
    parallel, 2x2 tiles unrolled (the selects on the tile position fold), channels vectorized.

    Fused form (``fuses_rows``): per pair of output rows, the input transform of that row of tiles
    and its 16 matmuls are computed first, inside the same parallel iteration."""
    final = fused_output(s, op)
    if final is not s[op]:
        s[op].compute_inline()
    n, ob, y, x, oi = final.op.axis
    yo, yi = final.split(y, factor=2)
    xo, xi = final.split(x, factor=2)
    M = op.input_tensors[0].op
    fused = _fused(M, target)
    if fused:
        images, height = (int(d.value) for d in (op.outputs[0].shape[0], op.outputs[0].shape[2]))
        # an odd height's last row of tiles computes fewer positions: with the images outside the
        # parallel rows, loop_partition splits that row off; fused with them, every row's
        # positions became a run-time count (Inception-v3's 35x35 convs at batch 2: 2x the time)
        apart = height % 2 and images > 1 and fuses_rows(1, (height + 1) // 2, target.num_threads)
        lead = [yo] if apart else [n, yo]
        final.reorder(*([n] if apart else []), *lead, ob, xo, yi, xi, oi)
    else:
        lead = [n, ob, yo]
        final.reorder(*lead, xo, yi, xi, oi)
    rows = final.fuse(*lead) if len(lead) > 1 else lead[0]
    final.parallel(rows)
    final.unroll(yi)
    final.unroll(xi)
    final.vectorize(oi)
    if fused:
        _register_blocked_gemm(s, M, int(M.attrs["tile_width"]), target)
        s[M].compute_at(final, rows)
        V = M.input_tensors[0].op
        Vs = s[V]
        Vs.compute_at(final, rows)
        Vs.unroll(Vs.op.axis[3])
        Vs.vectorize(Vs.op.axis[4])
