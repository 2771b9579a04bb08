"""drop_unit_loops: a loop of one iteration becomes its body, its variable replaced by its min.

A producer computed at its consumer's innermost loop has a region of one element per
dimension, so its own loops run once (``for i in range(1)``); so do a split's outer loop
over a factor as large as the extent, and a tile loop of a small tensor.  They cost
nothing at run time, LLVM removes them, but they make the printed IR read like
something happens there, and a loop nest in the printout twice as deep as the code.

Before: any loop IR after ``remove_noops`` (for target cuda: after ``double_buffer``,
which pipelines the loop a double-buffered stage is computed at, whatever its extent).
After: no loop of constant extent 1 remains, except thread-bound loops (a GPU axis of
extent 1 is still a launch dimension).  Values are unchanged: the body runs once with
the variable at the loop's min, as before; the expression constructors fold the constant in
(``Bc[0 * 4 + j]`` reads ``Bc[j]``), so the body is not simplified again (a unit batch loop
wraps a whole kernel: simplifying it again took a tenth of ResNet-18's lowering).
"""
from __future__ import annotations

from ...dsl.expr import Const
from ...dsl.visitor import substitute
from ..statement_mutator import StatementMutator
from ..ir import For


class _DropUnitLoops(StatementMutator):
    def visit_For(self, node):
        body = self.visit(node.body)
        if node.kind != "thread" and isinstance(node.extent, Const) and node.extent.value == 1:
            return substitute(body, {node.var: node.min})
        if body is node.body:
            return node
        return For(node.var, node.min, node.extent, node.kind, body, node.annotations)


def drop_unit_loops(stmt, ctx):
    return _DropUnitLoops().visit(stmt)
