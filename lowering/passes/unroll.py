"""unroll: loops marked ``unrolled`` with a small constant extent -> copies of the body.

Before: For(kind="unrolled").  After: a Seq of the body with the loop variable
replaced by each constant; loops with a symbolic or large extent stay loops (kind
``unrolled``), which the LLVM backend marks for full unrolling by LLVM.
"""
from __future__ import annotations

from ...dsl.expr import Const, binary, compare, const, select
from ...dsl.visitor import Mutator
from ..ir import For, seq

MAX_UNROLL = 64


class _FoldingSubstituter(Mutator):
    """Substitutes a constant for the loop variable and drops the select branches that the
    constant rules out, without visiting them: a body that picks one of many expressions
    by the unrolled index (Winograd's transform tables) is copied once per value, not
    once per value and table entry."""

    def __init__(self, var, value):
        self.var, self.value = var, value

    def visit_Var(self, node):
        return self.value if node is self.var else node

    def visit_Binary(self, node):
        a, b = self.visit(node.a), self.visit(node.b)
        if a is node.a and b is node.b:
            return node
        return binary(node.op, a, b)

    def visit_Compare(self, node):
        a, b = self.visit(node.a), self.visit(node.b)
        if a is node.a and b is node.b:
            return node
        return compare(node.op, a, b)

    def visit_Select(self, node):
        c = self.visit(node.condition)
        if isinstance(c, Const):
            return self.visit(node.true_value if c.value else node.false_value)
        t, f = self.visit(node.true_value), self.visit(node.false_value)
        if c is node.condition and t is node.true_value and f is node.false_value:
            return node
        return select(c, t, f)


class _Unroll(Mutator):
    def visit_For(self, node):
        body = self.visit(node.body)
        if node.kind == "unrolled" and isinstance(node.extent, Const) and node.extent.value <= MAX_UNROLL:
            return seq(*[_FoldingSubstituter(node.var, binary("add", node.min, const(k))).visit(body)
                         for k in range(node.extent.value)])
        if body is node.body:
            return node
        return For(node.var, node.min, node.extent, node.kind, body, node.annotations)


def unroll(stmt, ctx):
    return _Unroll().visit(stmt)
