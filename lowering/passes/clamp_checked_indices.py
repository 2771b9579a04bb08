"""clamp_checked_indices: ``CheckedIndex`` -> a clamp into range, for targets without an error slot.

Before: any IR.  After: no ``CheckedIndex``; each became ``min(max(v, 0), extent - 1)``
(with ``v = value + extent`` for a negative value when it wraps), so a bad index reads
an element of the right tensor instead of memory outside it.  Run for CUDA, whose
kernels have no per-call error slot yet: there a bad index is not reported.
"""
from __future__ import annotations

from ...dsl.expr import binary, const, select
from ...dsl.visitor import Mutator


class _Clamp(Mutator):
    def visit_CheckedIndex(self, node):
        value = self.visit(node.value)
        extent = self.visit(node.extent)
        if node.wrap:
            value = select(value < const(0), binary("add", value, extent), value)
        upper = binary("sub", extent, const(1))
        return binary("min", binary("max", value, const(0)), upper)


def clamp_checked_indices(stmt, ctx):
    return _Clamp().visit(stmt)
