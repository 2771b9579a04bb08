"""simplify: fold constants, canonicalise affine index arithmetic, drop proven guards.

Before/after: any loop IR.  Expressions are simplified by ``dsl/arith.py``
(constant folding, canonical affine sums, floor division and modulo folded where
variable ranges prove the result); this pass adds the statement forms: the range of
each loop variable, known from its enclosing loop, becomes a fact while its body is
simplified, and index lets are substituted so the canonical form cancels origins.
Guards (IfThenElse) that the enclosing loop ranges prove true are removed; proven
false ones drop their then-branch.  Range facts come from enclosing loops with
constant bounds and from isl for the symbolic rest (see loop_partition).
"""
from __future__ import annotations

from ...dsl import dtypes
from ...dsl.arith import ExprSimplifier
from ...dsl.expr import Binary, Const, Expr, Var
from ..ir import NOOP, For, IfThenElse, LetStmt


class Simplifier(ExprSimplifier):
    """Expression simplification plus the ranges of enclosing loops and lets."""

    def __init__(self):
        super().__init__()
        self.index_lets = {}        # id(let var) -> its simplified value, substituted where the var is read

    def visit_For(self, node):
        lo, ext = self.visit(node.min), self.visit(node.extent)
        saved = self.ranges.get(id(node.var))
        lb, eb = self.bound(lo), self.bound(ext)
        if lb is not None and eb is not None and eb[1] >= 1:
            self.ranges[id(node.var)] = (lb[0], lb[1] + eb[1] - 1)
        body = self.visit(node.body)
        if saved is None:
            self.ranges.pop(id(node.var), None)
        else:
            self.ranges[id(node.var)] = saved
        if lo is node.min and ext is node.extent and body is node.body:
            return node
        return For(node.var, lo, ext, node.kind, body, node.annotations)

    def visit_Var(self, node):
        value = self.index_lets.get(id(node))
        return value if value is not None else super().visit_Var(node)

    def visit_LetStmt(self, node):
        value = self.visit(node.value)
        if _is_index_arithmetic(value):
            # cheap to recompute: substituting lets the affine canonicaliser cancel origins (as the
            # body is visited: a substitution of its own would copy the body once per nested let)
            self.index_lets[id(node.var)] = value
            try:
                return self.visit(node.body)
            finally:
                del self.index_lets[id(node.var)]
        b = self.bound(value)
        if b is not None:
            self.ranges[id(node.var)] = b
        body = self.visit(node.body)
        if value is node.value and body is node.body:
            return node
        return LetStmt(node.var, value, body)

    def visit_IfThenElse(self, node):
        cond = self.visit(node.condition)
        if isinstance(cond, Const):
            live = node.then_case if cond.value else node.else_case
            return NOOP if live is None else self.visit(live)
        then_case = self.visit(node.then_case)
        else_case = None if node.else_case is None else self.visit(node.else_case)
        return IfThenElse(cond, then_case, else_case)


def _is_index_arithmetic(e: Expr) -> bool:
    if isinstance(e, (Const, Var)):
        return dtypes.is_int(e.dtype)
    if isinstance(e, Binary) and e.op in ("add", "sub", "mul", "floordiv", "floormod", "min", "max"):
        return _is_index_arithmetic(e.a) and _is_index_arithmetic(e.b)
    return False


def simplify(stmt, ctx):
    return Simplifier().visit(stmt)
