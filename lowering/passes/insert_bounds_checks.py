"""insert_bounds_checks: data-dependent indices become checked indices (``checks="bounds"``).

Before: n-d BufferLoads (before ``storage_flatten``).  After: every index of a load that
depends on a loaded value (``A[idx[i]]``, ``A[i, int64(B[i]) + 1]``) is wrapped in a
``CheckedIndex`` against that dimension's extent, unless it already is one (the op
library checks its gathers itself).  Affine indices are left alone: bound inference
proves them or rejects the schedule at compile time.  An out-of-range index then raises
``ArgumentError`` naming the buffer, the dimension and the index, instead of reading
memory that belongs to something else.
"""
from __future__ import annotations

from ...dsl.expr import CheckedIndex, checked_index
from ...dsl.visitor import Mutator, post_order_visit
from ..ir import BufferLoad


def _reads_memory(e) -> bool:
    hit = []
    post_order_visit(e, lambda n: hit.append(1) if isinstance(n, BufferLoad) else None)
    return bool(hit)


class _InsertChecks(Mutator):
    def __init__(self, func_name: str):
        self.func_name = func_name

    def visit_BufferLoad(self, node):
        node = self.generic_visit(node)
        indices = []
        for d, (index, extent) in enumerate(zip(node.indices, node.buffer.shape)):
            if not isinstance(index, CheckedIndex) and _reads_memory(index):
                index = checked_index(index, extent, f"dimension {d} of '{node.buffer.name}' "
                                                     f"(read as {node.buffer.name}[{', '.join(map(str, node.indices))}] "
                                                     f"in '{self.func_name}')")
            indices.append(index)
        if all(a is b for a, b in zip(indices, node.indices)):
            return node
        return BufferLoad(node.buffer, tuple(indices))


def insert_bounds_checks(stmt, ctx):
    return _InsertChecks(ctx.func_name).visit(stmt)
