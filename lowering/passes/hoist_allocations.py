"""hoist_allocations: a buffer of run-time size is allocated once per loop, not per iteration.

A stage computed at a row of a symbolic extent (softmax's row of exponentials over ``seq``
columns) is an ``Allocate`` of run-time size inside the row loop; codegen takes such a
buffer from ``malloc`` and gives it back with ``free`` (a constant size goes on the stack
or is taken once per call instead), so a softmax over ``4 x 200`` rows of 200 ran 800
``malloc``/``free`` pairs a call.

An ``Allocate`` of non-constant extent reached from a sequential loop's body through
``Seq``, ``Allocate`` and ``LetStmt`` only (never under an ``if`` or a deeper loop that
keeps it), whose extent reads neither the loop's variable nor a variable bound inside
the loop, is moved to wrap the loop; bottom-up, so it climbs every sequential loop it can
and stops at a parallel loop (each of whose iterations needs its own buffer) or at the
function's top.  The extent is taken as ``max(extent, 0)`` there, since a loop that runs
no iteration may have a negative size at hand.

Before: any loop IR of target llvm (run last; a buffer's scope is unchanged, its uses
untouched).  After: the same values; an allocation of run-time size per iteration of a
loop whose variable its size does not read no longer exists.  Target cuda is left as it
is (its buffers are shared or per-thread arrays of constant size).
"""
from __future__ import annotations

from typing import List, Set, Tuple

from ...dsl.expr import Binary, Const, binary, const, structural_equal
from ...dsl.visitor import collect_vars
from ..statement_mutator import StatementMutator
from ..ir import Allocate, For, LetStmt, Seq, seq

SEQUENTIAL = ("serial", "unrolled")


def _lift(stmt, bound: Set[object], lifted: List[Tuple[object, object]]):
    """``stmt`` without the Allocates it lifts (appended to ``lifted`` as (buffer, extent))."""
    if isinstance(stmt, Allocate):
        body = _lift(stmt.body, bound, lifted)
        if not isinstance(stmt.extent, Const) and not bound.intersection(id(v) for v in collect_vars(stmt.extent)):
            lifted.append((stmt.buffer, stmt.extent))
            return body
        return stmt if body is stmt.body else Allocate(stmt.buffer, stmt.extent, body)
    if isinstance(stmt, Seq):
        parts = [_lift(s, bound, lifted) for s in stmt.stmts]
        return stmt if all(a is b for a, b in zip(parts, stmt.stmts)) else seq(*parts)
    if isinstance(stmt, LetStmt):
        body = _lift(stmt.body, bound | {id(stmt.var)}, lifted)
        return stmt if body is stmt.body else LetStmt(stmt.var, stmt.value, body)
    return stmt


def _non_negative(extent):
    """``max(extent, 0)``, once (a buffer lifted over two loops is not wrapped twice)."""
    if isinstance(extent, Binary) and extent.op == "max" and isinstance(extent.b, Const) and extent.b.value == 0:
        return extent
    return binary("max", extent, const(0, extent.dtype))


class _Hoist(StatementMutator):

    def visit_For(self, node):
        body = self.visit(node.body)
        lifted: List[Tuple[object, object]] = []
        if node.kind in SEQUENTIAL:
            body = _lift(body, {id(node.var)}, lifted)
        result = node if body is node.body else For(node.var, node.min, node.extent, node.kind, body,
                                                    node.annotations)
        extents = {}            # a buffer allocated in two places (a loop and its partitioned tail) once
        for buffer, extent in lifted:
            seen = extents.get(id(buffer))
            extents[id(buffer)] = (buffer, extent if seen is None or structural_equal(seen[1], extent)
                                   else binary("max", seen[1], extent))
        for buffer, extent in reversed(list(extents.values())):
            result = Allocate(buffer, _non_negative(extent), result)
        return result


def hoist_allocations(stmt, ctx):
    target = getattr(ctx, "target", None)
    if target is not None and target.kind == "cuda":
        return stmt
    return _Hoist().visit(stmt)
