"""unroll: loops marked ``unrolled`` with a small constant extent -> copies of the body.

Before: For(kind="unrolled").  After: a Seq of the body with the loop variable
replaced by each constant; loops with a symbolic or large extent stay loops (kind
``unrolled``), which the LLVM backend marks for full unrolling by LLVM.
"""
from __future__ import annotations

from ...dsl.expr import Const, binary, const
from ...dsl.visitor import Mutator, substitute
from ..ir import For, seq

MAX_UNROLL = 64


class _Unroll(Mutator):
    def visit_For(self, node):
        body = self.visit(node.body)
        if node.kind == "unrolled" and isinstance(node.extent, Const) and node.extent.value <= MAX_UNROLL:
            return seq(*[substitute(body, {node.var: binary("add", node.min, const(k))})
                         for k in range(node.extent.value)])
        if body is node.body:
            return node
        return For(node.var, node.min, node.extent, node.kind, body, node.annotations)


def unroll(stmt, ctx):
    return _Unroll().visit(stmt)
