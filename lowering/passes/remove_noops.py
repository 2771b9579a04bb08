"""remove_noops: drop statements that do nothing.

Removes loops with a constant extent <= 0, empty Seqs, ifs with a constant condition
(keeping the live branch) and lets whose variable is unused.  Guarantees no For with
a provably empty range and no IfThenElse on a constant.
"""
from __future__ import annotations

from ...dsl.expr import Const
from ...dsl.visitor import Mutator, uses_var
from ..ir import NOOP, For, LetStmt, Seq, seq


class _RemoveNoops(Mutator):
    def visit_For(self, node):
        if isinstance(node.extent, Const) and node.extent.value <= 0:
            return NOOP
        body = self.visit(node.body)
        if isinstance(body, Seq) and not body.stmts:
            return NOOP
        if body is node.body:
            return node
        return For(node.var, node.min, node.extent, node.kind, body, node.annotations)

    def visit_Seq(self, node):
        stmts = [self.visit(s) for s in node.stmts]
        if all(a is b for a, b in zip(stmts, node.stmts)):
            return node
        return seq(*stmts) if stmts else NOOP

    def visit_IfThenElse(self, node):
        if isinstance(node.condition, Const):
            live = node.then_case if node.condition.value else node.else_case
            return NOOP if live is None else self.visit(live)
        return self.generic_visit(node)

    def visit_LetStmt(self, node):
        body = self.visit(node.body)
        if not uses_var(body, node.var):
            return body
        return node if body is node.body else LetStmt(node.var, node.value, body)


def remove_noops(stmt, ctx):
    result = _RemoveNoops().visit(stmt)
    return result
