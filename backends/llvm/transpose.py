"""Transposed tiles: a loop whose iterations read the columns of a tile that lies in rows.

The layout transforms between NCHW and NCHW[16]c move a 16 x 16 tile: each iteration ``v``
of the loop (a channel of ``from_blocked``, a pixel of ``to_blocked``) stores one contiguous
vector whose lanes come ``stride`` elements apart in the source,
``X[base(v) + k * stride]`` for lanes ``k``, with ``base(v) = base(0) + v``.  Emitted as
written, each such load is a gather (16 scalar loads); SLP on unrolled scalar code did
better but still ran 3x a plain copy of the same bytes.  Read instead as rows, the tile is
``lanes`` contiguous vector loads ``X[base(0) + k * stride + (0 .. extent-1)]``, and
iteration ``v`` takes column ``v`` of their transpose: log2(lanes) stages of two-source
shuffles (64 for 16 x 16, which AVX-512 does as ``vpermt2ps`` / ``vunpck``), no gathers.

The schedule asks for it with the pragma ``"transpose"`` on the loop of ``v``
(``nn_ops.ops.registry``'s layout-transform schedules); ``transposed_loads`` checks that
the loop has that shape and returns None where it does not (the loop is then emitted as
usual).  The rows read exactly the elements the loop reads, no others.
"""
from __future__ import annotations

from typing import List, Optional

import llvmlite.ir as ir

from ...dsl.arith import ExprSimplifier
from ...dsl.expr import Const, Select, binary, const, structural_equal
from ...dsl.visitor import post_order_visit, substitute, uses_var
from ...lowering.ir import BufferLoad, BufferStore, For, IfThenElse, LetStmt, Ramp, Seq

PRAGMA = "transpose"


def transposed_loads(loop: For) -> Optional[List[BufferLoad]]:
    """The loads of ``loop`` to read as transposed rows, or None if the loop is not a transposed
    tile: a loop marked ``PRAGMA`` from 0 to a constant that is a multiple of the loads' lanes,
    whose body (stores, lets, no branches or selects) reads, besides scalars and contiguous
    vectors, vectors ``Ramp(base, stride, lanes)`` with ``lanes`` a power of two, ``stride``
    invariant and ``base`` the loop variable plus an invariant, and stores nothing into the
    buffers of those loads."""
    if not any(note[0] == PRAGMA for note in loop.annotations):
        return None
    if not (isinstance(loop.min, Const) and loop.min.value == 0 and isinstance(loop.extent, Const)):
        return None
    v, extent = loop.var, loop.extent.value
    loads: List[BufferLoad] = []
    stored = set()
    plain = []

    def visit(node):
        if isinstance(node, (IfThenElse, Select, For)):
            plain.append(node)
        elif isinstance(node, BufferStore):
            stored.add(id(node.buffer))
        elif isinstance(node, BufferLoad) and isinstance(node.indices[0], Ramp) and uses_var(node.indices[0], v) \
                and not (isinstance(node.indices[0].stride, Const) and node.indices[0].stride.value == 1):
            loads.append(node)      # (a contiguous vector is read as it is)

    post_order_visit(loop.body, visit)
    if plain or not loads or not all(isinstance(s, (BufferStore, LetStmt, Seq)) for s in _statements(loop.body)):
        return None
    for load in loads:
        ramp = load.indices[0]
        lanes = ramp.lanes
        if lanes < 2 or lanes & (lanes - 1) or extent % lanes or id(load.buffer) in stored:
            return None
        if uses_var(ramp.stride, v):
            return None
        step = ExprSimplifier().visit(binary("sub", ramp.base, substitute(ramp.base, {v: const(0, v.dtype)})))
        if not structural_equal(step, v):
            return None
    return loads


def _statements(stmt):
    """The statements of a body of Seq / LetStmt / BufferStore, flattened."""
    if isinstance(stmt, Seq):
        return [s for c in stmt.stmts for s in _statements(c)]
    if isinstance(stmt, LetStmt):
        return [stmt] + _statements(stmt.body)
    return [stmt]


def transpose_vectors(builder: ir.IRBuilder, rows: List[ir.Value]) -> List[ir.Value]:
    """The columns of the square tile whose rows are ``rows`` (``n`` vectors of ``n`` lanes, ``n``
    a power of two): stage ``d`` = n/2, n/4, ..., 1 pairs rows ``r`` and ``r + d`` and swaps the
    off-diagonal ``d``-lane blocks between them."""
    n = len(rows)
    cur = list(rows)
    d = n // 2
    while d >= 1:
        nxt = list(cur)
        for r in range(n):
            if r & d:
                continue
            low = [lane if not lane & d else n + lane - d for lane in range(n)]
            high = [lane + d if not lane & d else n + lane for lane in range(n)]
            nxt[r] = builder.shuffle_vector(cur[r], cur[r | d], ir.Constant(ir.VectorType(ir.IntType(32), n), low))
            nxt[r | d] = builder.shuffle_vector(cur[r], cur[r | d],
                                                ir.Constant(ir.VectorType(ir.IntType(32), n), high))
        cur = nxt
        d //= 2
    return cur


def row_ramps(load: BufferLoad, loop: For) -> List[List[Ramp]]:
    """For each block of ``lanes`` iterations, the contiguous rows of ``load``'s tile: block ``q``,
    row ``k`` is ``Ramp(base(0) + k * stride + q * lanes, 1, lanes)``."""
    ramp = load.indices[0]
    v, lanes = loop.var, ramp.lanes
    origin = substitute(ramp.base, {v: const(0, v.dtype)})
    one = const(1, ramp.base.dtype)
    blocks = []
    for q in range(loop.extent.value // lanes):
        start = binary("add", origin, const(q * lanes, ramp.base.dtype))
        blocks.append([Ramp(binary("add", start, binary("mul", ramp.stride, const(k, ramp.base.dtype))), one, lanes)
                       for k in range(lanes)])
    return blocks


__all__ = ["PRAGMA", "row_ramps", "transpose_vectors", "transposed_loads"]
