"""A blocked conv whose kernel writes NCHW: its register blocks computed row by row inside the
``from_blocked`` that leaves the blocked layout after it (a lone conv, a network's last blocked
layer before an NCHW-only op).

The group ``conv2d_blocked -> elementwise epilogue -> from_blocked`` (``fuse_operators``) runs as one
kernel: (image, pair of channel blocks, row) in parallel (or the rows in order inside each pair, as the
blocked schedule has them); for each row, its register blocks of
``nv`` channel vectors x ``owb`` pixels as the blocked schedule takes them, into a row buffer of the
blocked form (a few KB, in L1), then that row stored to the channel planes in tiles of T pixels x T
channels transposed in registers (the pragma ``"transpose"``, as ``from_blocked`` alone).  Apart,
the conv wrote the whole blocked result and the transform read it back in a second kernel
(with AVX-512, lone layers of ResNet-18 and MobileNetV2 0.99-1.11x: the stems 1.06x and 1.11x, 1x1/2
64->128 at 56x56 1.07x, 96->576 at 14x14 1.08x; as AVX2 code the stems 1.05x and 1.08x; one thread,
CPU time, interleaved, under load).  Targets with fewer than ``UNBLOCKED_MIN_REGISTERS`` vector
registers, and maps the blocked schedule computes whole per channel-block pair as the weights stream
by (7x7: each weight read once), run the group's two stages one after the other.
"""
from __future__ import annotations

from .registry import (INJECTIVE_TAGS, _reaches_through_inlined, _transpose_tile, accumulate_in_registers,
                       unroll_long_epilogue)

#: output rows at least this wide hold a transpose tile (of 4 pixels x 4 channels, the smallest)
MIN_UNBLOCKED_WIDTH = 4

#: vector registers a target needs for this form (else the group runs the conv and its from_blocked
#: one after the other, as apart): AVX2's 16 hold its register blocks as the blocked schedule's, and as
#: AVX2 code the stems ran 1.05x (ResNet-18's 7x7) and 1.08x (MobileNetV2's 3x3/2), the other lone
#: layers 1.00x (one thread, CPU time, interleaved in one process, under load); fewer than 16 untried
UNBLOCKED_MIN_REGISTERS = 16


def unblocking_output(s, op):
    """The ``from_blocked`` stage that is ``s``'s one output and reads the blocked conv ``op`` through
    inlined elementwise stages of its shape, keeping every channel (no padding dropped), with rows of at
    least ``MIN_UNBLOCKED_WIDTH`` pixels and a constant shape; else None."""
    if len(s.outputs) != 1:
        return None
    final = s.outputs[0]
    out = op.outputs[0]
    if not all(hasattr(d, "value") for d in out.shape) or final.tag not in INJECTIVE_TAGS:
        return None
    n, obn, oh, ow, b = (int(d.value) for d in out.shape)
    if final.attrs.get("unblocks") != b or len(final.input_tensors) != 1:
        return None
    source = final.input_tensors[0]
    if [str(d) for d in source.shape] != [str(d) for d in out.shape] or int(final.outputs[0].shape[1].value) != obn * b:
        return None
    if source.op is not op and not _reaches_through_inlined(s, source.op, op):
        return None
    return s[final] if ow >= MIN_UNBLOCKED_WIDTH else None


def schedule_conv2d_unblocked(s, op, target, nv: int, rows_inside: bool, owb: int, tail: str) -> None:
    """Schedule ``op`` (a static ``conv2d_blocked``) and its ``unblocking_output`` as one kernel: ``nv``
    channel vectors x ``owb`` pixels a register block (``tail``: how a row's last block is cut);
    ``rows_inside``: (image, channel-block pair) in parallel and the rows in order inside each, as the
    blocked schedule takes them where there are pairs enough, so the pair's weights stay in L1 from one
    row to the next (row by row, ShuffleNetV2's 232- and 464-channel layers ran its network 3 % slower)."""
    F = unblocking_output(s, op)
    F.fused_anchor = op         # (``registry.schedule`` leaves it to this schedule)
    out = op.outputs[0]
    n_, obn, oh, ow, b = (int(d.value) for d in out.shape)
    lanes = target.lanes(out.dtype)
    source = F.op.input_tensors[0]
    n, c, y, x = F.op.axis
    co, cr = F.split(c, factor=b * nv)
    cb, ci = F.split(cr, factor=b)
    tile = _transpose_tile(lanes, ow, b)
    xo, xi = F.split(x, factor=tile, tail="shift" if ow % tile else "guard")
    F.reorder(n, co, y, cb, xo, ci, xi)
    fused = F.fuse(n, co) if rows_inside else F.fuse(n, co, y)
    F.parallel(fused)
    row = y if rows_inside else fused
    F.vectorize(xi)
    F.pragma(ci, "transpose")
    # the row's register blocks, into a row buffer of the blocked form
    if source.op is op:
        acc = s.cache_write(out, "local")
        R = s[op]
    else:
        acc = out
        R = s[source.op]
    R.compute_at(F, row)
    rn, rob, ry, rx, ri = R.op.axis
    rxo, rxi = R.split(rx, factor=owb, tail=tail)
    R.reorder(rn, ry, rxo, rob, rxi, ri)
    R.vectorize(ri)
    unroll_long_epilogue(s, op, R, [rob, rxi])
    A = s[acc]
    cn, cob, cy, cx, coi = A.op.axis
    rco, kry, krx, rci = A.op.reduce_axis
    accumulate_in_registers(s, acc, R, rxo, (cn, cy, rco, kry, krx, rci, cx, cob, coi), (cob, cx))
