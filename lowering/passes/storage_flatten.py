"""storage_flatten: n-d buffer accesses -> 1-d accesses with row-major strides.

Before: BufferLoad/BufferStore carry one index per buffer dimension.
After: they carry one flat index; every Buffer has ``strides`` (row-major in the stage's
``reorder_storage`` order, storage_align padding applied) and every Allocate's extent is
the flat element count.
"""
from __future__ import annotations

from ...dsl.expr import Const, binary, const
from ...dsl.visitor import Mutator
from ..ir import Allocate, BufferLoad, BufferStore


def buffer_strides(buffer, aligns=None, order=None):
    """Row-major strides over the dimensions taken in ``order`` (outermost first; None: as
    they are); ``aligns[d] = (factor, offset)`` pads the stride of dimension d."""
    aligns = aligns or {}
    order = list(order) if order is not None else list(range(len(buffer.shape)))
    strides = [None] * len(buffer.shape)
    running = const(1)
    for d in reversed(order):
        if d in aligns and d != order[-1]:
            factor, offset = aligns[d]
            if isinstance(running, Const):
                r = running.value
                r = r + ((offset - r) % factor)
                running = const(r)
            else:
                running = binary("add", running, binary("floormod", binary("sub", const(offset), running), const(factor)))
        strides[d] = running
        running = binary("mul", running, buffer.shape[d])
    return tuple(strides), running


class _Flatten(Mutator):
    def __init__(self, aligns, orders):
        self.aligns = aligns
        self.orders = orders

    def _strides(self, buffer):
        return buffer_strides(buffer, self.aligns.get(buffer.name), self.orders.get(buffer.name))

    def _flat(self, buffer, indices):
        if buffer.strides is None:
            buffer.strides, _ = self._strides(buffer)
        total = const(0)
        for index, stride in zip(indices, buffer.strides):
            total = binary("add", total, binary("mul", index, stride))
        return (total,)

    def visit_BufferLoad(self, node):
        node = self.generic_visit(node)
        if len(node.indices) == 1 and node.buffer.strides is not None and len(node.buffer.shape) <= 1:
            return node
        return BufferLoad(node.buffer, self._flat(node.buffer, node.indices))

    def visit_BufferStore(self, node):
        node = self.generic_visit(node)
        return BufferStore(node.buffer, node.value, self._flat(node.buffer, node.indices))

    def visit_Allocate(self, node):
        body = self.visit(node.body)
        strides, size = self._strides(node.buffer)
        node.buffer.strides = strides
        return Allocate(node.buffer, size, body)


def storage_flatten(stmt, ctx):
    return _Flatten(ctx.storage_aligns, ctx.storage_orders).visit(stmt)
