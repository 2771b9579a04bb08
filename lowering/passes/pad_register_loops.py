"""pad_register_loops: on the GPU, loops over a partial register block get constant trip counts.

A thread whose tile is cut by the edge of the output (a 7x7 map in 64-wide tiles) has a
register block of run-time extent: ``for j in range(select(edge, 1, 4))``.  Such a loop
cannot be unrolled, so the block's array is indexed by a run-time value and nvcc puts it
in local memory (an H100 ran the encoder's 128 x 64 attention product 30x slower that
way).  Here a loop whose extent is not a constant but has a small constant upper bound
(through lets, ``select`` and ``min``) runs to that bound with its body guarded:
``for j in range(4): if j < extent: ...``, unrolled, so every index is a constant again.

Before/after: loop IR of target cuda, before vectorize and unroll.  Guarantees the same
iterations run (the extra ones do nothing).
"""
from __future__ import annotations

from typing import Dict, Optional

from ...dsl.expr import Binary, Compare, Const, Expr, Select, Var, const
from ...dsl.visitor import Mutator, post_order_visit
from ..ir import For, IfThenElse

MAX_PADDED = 64    # loops up to this bound are padded and unrolled


class _Pad(Mutator):
    def __init__(self):
        self.lets: Dict[int, Expr] = {}

    def upper(self, e: Expr) -> Optional[int]:
        """A constant upper bound of ``e`` (an extent), or None."""
        if isinstance(e, Const):
            return int(e.value)
        if isinstance(e, Var):
            value = self.lets.get(id(e))
            return None if value is None else self.upper(value)
        if isinstance(e, Select):
            t, f = self.upper(e.true_value), self.upper(e.false_value)
            return None if t is None or f is None else max(t, f)
        if isinstance(e, Binary) and e.op == "min":
            bounds = [b for b in (self.upper(e.a), self.upper(e.b)) if b is not None]
            return min(bounds) if bounds else None
        if isinstance(e, Binary) and e.op == "max":
            a, b = self.upper(e.a), self.upper(e.b)
            return None if a is None or b is None else max(a, b)
        return None

    def visit_LetStmt(self, node):
        self.lets[id(node.var)] = node.value
        return self.generic_visit(node)

    def visit_For(self, node):
        body = self.visit(node.body)
        if node.kind != "thread" and not isinstance(node.extent, Const) and isinstance(node.min, Const) \
                and not _has_thread_loop(body):
            bound = self.upper(node.extent)
            if bound is not None and 0 < bound <= MAX_PADDED:
                guarded = IfThenElse(Compare("lt", Binary("sub", node.var, node.min), node.extent), body)
                kind = "unrolled" if node.kind in ("unrolled", "vectorized") else node.kind
                return For(node.var, node.min, const(bound, node.extent.dtype), kind, guarded, node.annotations)
        if body is node.body:
            return node
        return For(node.var, node.min, node.extent, node.kind, body, node.annotations)


def _has_thread_loop(stmt) -> bool:
    """Whether ``stmt`` holds a thread-bound loop (a cooperative copy, so barriers): such a loop of
    run-time extent is left for insert_syncs to refuse as divergent, with its own message."""
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, For) and n.kind == "thread" else None)
    return bool(found)


def pad_register_loops(stmt, ctx):
    return _Pad().visit(stmt)
