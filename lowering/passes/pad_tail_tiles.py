"""pad_tail_tiles: on the CPU, a register tile cut by a symbolic edge keeps its registers.

A tile of a symbolic extent (the attention score ``seq x seq`` of a shape-polymorphic
encoder) has a last tile whose loops run a run-time count: ``for i in range(s - 8*io)``
over its rows, ``for j in range(s - 32*jo)`` over its columns.  Such a row loop cannot be
unrolled, so the accumulator tile is indexed by a run-time value and lives in memory, and
such a column loop is not vectorized: at 7 tokens the score ran 2.6x its static compile.

Inside a loop marked with the pragma ``"pad_tails"`` (the schedule asks for it), a loop of
run-time extent ``e`` with a constant upper bound ``U`` (from isl, over the enclosing loops)
becomes:

* a vectorized loop: one vector of ``U`` lanes under the mask ``lane < e``
  (the annotation ``("masked_lanes", U)``, which ``vectorize`` reads): loads and stores are
  masked, except that codegen reads and writes the tile's own buffers on the stack (``local``,
  of constant size) whole, keeping masked-off lanes, so that they stay in registers;
* another loop whose body writes only ``local`` buffers: ``U`` iterations, unrolled, its
  reads of other buffers at ``min(i, e - 1)`` (the extra rows recompute the last one into
  the tile's spare rows, which nothing reads);
* another loop (the copy-out): ``U`` iterations, unrolled, each under ``if i < e``.

Each such loop runs only where ``e >= 1`` (it ran nothing before; an ``if`` says so where isl
does not prove it).  A masked vector has a power of two of lanes (whole registers).  The
``local`` buffers of constant size that a masked vector reads or writes get ``lanes - 1`` spare
elements, so a vector from a valid element stays inside them.

Before/after: flattened loop IR of target llvm, before vectorize and unroll.  Guarantees the
same values in every buffer outside the kernel's own tiles.  Only statements are walked (the
pass changes loops and allocations, never an expression outside a padded loop).
"""
from __future__ import annotations

from typing import Dict, List

import islpy as isl

from ...dsl.expr import Compare, Const, binary, const
from ...dsl.visitor import Mutator, post_order_visit, substitute
from ..statement_mutator import StatementMutator
from ..ir import Allocate, BufferLoad, BufferStore, For, IfThenElse, LetStmt
from ..isl_adapter import IslNames, equals, make_set, range_constraint

PRAGMA = "pad_tails"
MAX_LANES = 64          # a masked vector loop of at most this many lanes
MAX_ROWS = 16           # a loop of rows padded and unrolled up to this many iterations


def _tile_own(buffer) -> bool:
    """Whether ``buffer`` is one of a register tile's own: ``local``, of constant size (a local
    buffer of run-time size, a row of tiles computed at a loop, is read like any other)."""
    return buffer.scope == "local" and all(isinstance(d, Const) for d in buffer.shape)


class _ClampReads(Mutator):
    """Reads of buffers outside the tile's own at ``var`` clamped to ``last``."""

    def __init__(self, var, last):
        self.mapping = {var: binary("min", var, last)}

    def visit_BufferLoad(self, node):
        if _tile_own(node.buffer):
            return self.generic_visit(node)
        return BufferLoad(node.buffer, tuple(substitute(i, self.mapping) for i in node.indices))


class _Pad(StatementMutator):
    def __init__(self):
        self.outer: List[For] = []
        self.marked = 0
        self.spare: Dict[int, int] = {}     # id(local buffer) -> elements a masked vector may run past it
        self.lets: Dict[int, object] = {}   # id(var) -> its value, for the LetStmts around the node


    def visit_Allocate(self, node):
        body = self.visit(node.body)
        spare = self.spare.get(id(node.buffer))
        if spare and isinstance(node.extent, Const):
            return Allocate(node.buffer, binary("add", node.extent, const(spare, node.extent.dtype)), body)
        return node if body is node.body else Allocate(node.buffer, node.extent, body)

    def visit_For(self, node):
        mark = any(note[0] == PRAGMA for note in node.annotations)
        self.marked += mark
        self.outer.append(node)
        body = self.visit(node.body)
        self.outer.pop()
        self.marked -= mark
        if self.marked and not isinstance(node.extent, Const) and isinstance(node.min, Const) \
                and node.min.value == 0 and node.kind in ("vectorized", "unrolled", "serial"):
            padded = self._padded(node, body)
            if padded is not None:
                return padded
        return node if body is node.body else For(node.var, node.min, node.extent, node.kind, body,
                                                  node.annotations)

    def _padded(self, node: For, body):
        bounds = self._bounds(node.extent)
        if bounds is None or bounds[1] < 1:
            return None
        low, bound = bounds
        e = node.extent

        def where_it_runs(stmt):
            """``stmt`` under ``if e > 0`` unless isl proves ``e >= 1``."""
            return stmt if low >= 1 else IfThenElse(Compare("gt", e, const(0, e.dtype)), stmt)
        if node.kind == "vectorized":
            if bound > MAX_LANES:
                return None
            lanes = 1 << (bound - 1).bit_length()      # a power of two (<= MAX_LANES): whole registers
            for buf in _local_buffers(body):
                self.spare[id(buf)] = max(self.spare.get(id(buf), 0), lanes - 1)
            return where_it_runs(For(node.var, node.min, e, node.kind, body,
                                     node.annotations + (("masked_lanes", lanes),)))
        if bound > MAX_ROWS:
            return None
        if _writes_only_tile(body):
            inner = _ClampReads(node.var, binary("sub", e, const(1, e.dtype))).visit(body)
        else:
            inner = IfThenElse(Compare("lt", node.var, e), body)
        return where_it_runs(For(node.var, node.min, const(bound, e.dtype), "unrolled", inner, node.annotations))

    def visit_LetStmt(self, node):
        self.lets[id(node.var)] = node.value
        body = self.visit(node.body)
        del self.lets[id(node.var)]
        return node if body is node.body else LetStmt(node.var, node.value, body)

    def _bounds(self, extent):
        """(smallest, largest) value of ``extent`` over the enclosing loops (any sizes), or None.
        An extent bound by a ``LetStmt`` is read through it (a tail block's extent that bound
        inference gave as a select)."""
        names = IslNames()
        cons = [c for c in (range_constraint(l.var, l.min, l.extent, str(k), names)
                            for k, l in enumerate(self.outer)) if c]
        e_c = equals("extent__", self.lets.get(id(extent), extent), names)
        if e_c is None:
            return None
        dims = list(names.var_of) + ["extent__"]
        try:
            values = make_set([], dims, cons + [e_c])
            low, high = values.dim_min_val(len(dims) - 1), values.dim_max_val(len(dims) - 1)
        except isl.Error:
            return None
        if not high.is_int():
            return None
        return (int(low.to_python()) if low.is_int() else -1), int(high.to_python())


def _local_buffers(stmt) -> list:
    """The ``local`` buffers that ``stmt`` reads or writes."""
    found = {}

    def visit(n):
        if isinstance(n, (BufferLoad, BufferStore)) and n.buffer.scope == "local":
            found[id(n.buffer)] = n.buffer
    post_order_visit(stmt, visit)
    return list(found.values())


def _writes_only_tile(stmt) -> bool:
    stores = []
    post_order_visit(stmt, lambda n: stores.append(n) if isinstance(n, BufferStore) else None)
    return all(_tile_own(s.buffer) for s in stores)


def pad_tail_tiles(stmt, ctx):
    if getattr(ctx.target, "kind", "llvm") != "llvm":
        return stmt
    return _Pad().visit(stmt)
