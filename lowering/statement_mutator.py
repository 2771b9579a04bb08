"""A mutator that walks statements only: passes that rewrite loops, allocations or lets but never an
expression skip the expression trees below a store or an evaluate, which are most of the IR's nodes
(compile time)."""
from __future__ import annotations

from ..dsl.visitor import Mutator


class StatementMutator(Mutator):
    """``Mutator`` whose stores and evaluates are left as they are, with everything below them."""

    def visit_BufferStore(self, node):
        return node

    def visit_Evaluate(self, node):
        return node
