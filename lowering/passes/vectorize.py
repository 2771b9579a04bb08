"""vectorize: loops marked ``vectorized`` -> straight-line vector code.

Before: flat buffer indices; a vectorized For with a constant extent whose body has
no inner loops or allocations.  After: the loop is gone; its variable became
``Ramp(0, 1, lanes)``, affine index arithmetic folded into Ramps (contiguous vector
loads/stores), other arithmetic on vectors.  A loop that cannot be vectorized (a
non-constant extent, an inner loop, a guard that depends on the lane) stays a serial
loop and carries the annotation ``not_vectorized=<reason>`` so the user sees why.

A vectorized loop of run-time extent ``e`` that ``pad_tail_tiles`` annotated
``("masked_lanes", U)`` becomes one vector of ``U`` lanes inside ``if ramp(0, 1, U) < e``:
an IfThenElse with a vector condition, which codegen emits as a lane mask.

A vectorized loop wider than ``MAX_VECTOR_LANES`` is split first: a serial loop over
``SPLIT_LANES``-lane vectors plus a serial tail, annotated ``vector_split=<why>``.  LLVM
aborts the process on vectors of billions of lanes (an Attention with a dimension of
2**31-1 did), and even a few thousand lanes only slow its compile down.
"""
from __future__ import annotations

import math

from ...dsl.expr import Binary, Compare, Const, Var, binary, const
from ...dsl.visitor import Mutator, post_order_visit, substitute
from ..ir import Broadcast, BufferStore, For, IfThenElse, Ramp, seq


MAX_VECTOR_LANES = 1024     # a vectorized loop wider than this is split into SPLIT_LANES-lane vectors
SPLIT_LANES = 16


class _CannotVectorize(Exception):
    pass


def is_vector(e) -> bool:
    hit = []
    post_order_visit(e, lambda n: hit.append(1) if isinstance(n, (Ramp, Broadcast)) else None)
    return bool(hit)


def _multiple_of(e, m: int) -> bool:
    """``e`` is provably a multiple of ``m`` (sums and constant multiples)."""
    if isinstance(e, Const):
        return isinstance(e.value, int) and e.value % m == 0
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        return _multiple_of(e.a, m) and _multiple_of(e.b, m)
    if isinstance(e, Binary) and e.op == "mul":
        for k, other in ((e.a, e.b), (e.b, e.a)):
            if isinstance(k, Const) and isinstance(k.value, int) and k.value != 0:
                return k.value % m == 0 or _multiple_of(other, m // math.gcd(k.value, m))
    return False


def _fold_ramp_div(op: str, r: Ramp, c: int):
    """``ramp(base, s, L) // c`` and ``% c`` without per-lane division, when the lanes cannot
    cross a multiple of ``c``: ``s*L`` divides both ``c`` and ``base``.  Then every lane has
    the quotient ``base // c`` and the remainders are ``ramp(base % c, s, L)`` (a flattened
    reshape's index stays a contiguous load instead of a 16-lane gather)."""
    stride = r.stride.value if isinstance(r.stride, Const) else None
    if c <= 0 or not isinstance(stride, int) or stride <= 0:
        return None
    span = stride * r.lanes
    if c % span or not _multiple_of(r.base, span):
        return None
    if op == "floordiv":
        return binary("floordiv", r.base, const(c, r.base.dtype))
    return Ramp(binary("floormod", r.base, const(c, r.base.dtype)), r.stride, r.lanes)


class _VectorizeBody(Mutator):
    def __init__(self, var: Var, lanes: int):
        self.var, self.lanes = var, lanes
        self.vector_lets = set()

    def visit_Var(self, node):
        if node is self.var:
            return Ramp(Const(0, "int64"), Const(1, "int64"), self.lanes)
        return node

    def visit_Binary(self, node):
        a, b = self.visit(node.a), self.visit(node.b)
        if a is node.a and b is node.b:
            return node
        if node.dtype == "int64":
            ramp_a, ramp_b = isinstance(a, Ramp), isinstance(b, Ramp)
            va, vb = is_vector(a), is_vector(b)
            if node.op in ("add", "sub"):
                if ramp_a and ramp_b:
                    return Ramp(binary(node.op, a.base, b.base), binary(node.op, a.stride, b.stride), self.lanes)
                if ramp_a and not vb:
                    return Ramp(binary(node.op, a.base, b), a.stride, self.lanes)
                if ramp_b and not va and node.op == "add":
                    return Ramp(binary("add", a, b.base), b.stride, self.lanes)
            if node.op in ("floordiv", "floormod") and ramp_a and isinstance(b, Const):
                folded = _fold_ramp_div(node.op, a, b.value)
                if folded is not None:
                    return folded
            if node.op == "mul":
                if ramp_a and not vb:
                    return Ramp(binary("mul", a.base, b), binary("mul", a.stride, b), self.lanes)
                if ramp_b and not va:
                    return Ramp(binary("mul", a, b.base), binary("mul", a, b.stride), self.lanes)
        return Binary(node.op, a, b)

    # statements
    def visit_For(self, node):
        raise _CannotVectorize("it contains an inner loop")

    def visit_Allocate(self, node):
        raise _CannotVectorize("it allocates a buffer")

    def visit_IfThenElse(self, node):
        cond = self.visit(node.condition)
        if is_vector(cond):
            raise _CannotVectorize("a guard depends on the vectorized variable")
        return self.generic_visit(node)

    def visit_BufferStore(self, node):
        value, indices = self.visit(node.value), tuple(self.visit(i) for i in node.indices)
        if not any(is_vector(i) for i in indices):
            if is_vector(value):
                raise _CannotVectorize(f"the store to {node.buffer.name} does not depend on the loop")
            return node
        return BufferStore(node.buffer, value, indices)


class _Vectorize(Mutator):
    def visit_For(self, node):
        body = self.visit(node.body)
        if node.kind != "vectorized":
            return node if body is node.body else For(node.var, node.min, node.extent, node.kind, body, node.annotations)
        reason = None
        masked = dict(node.annotations).get("masked_lanes")
        if masked and isinstance(node.min, Const) and node.min.value == 0:
            try:
                vector = _VectorizeBody(node.var, masked).visit(body)
                lanes = Ramp(const(0, node.var.dtype), const(1, node.var.dtype), masked)
                return IfThenElse(Compare("lt", lanes, Broadcast(node.extent, masked)), vector)
            except _CannotVectorize as exc:
                reason = str(exc)
        elif not isinstance(node.extent, Const):
            reason = "its extent is not a constant"
        elif node.extent.value < 2:
            return For(node.var, node.min, node.extent, "serial", body, node.annotations)
        elif node.extent.value > MAX_VECTOR_LANES:
            return self._split_wide(node, body)
        else:
            try:
                lanes = node.extent.value
                shifted = body
                if not (isinstance(node.min, Const) and node.min.value == 0):
                    shifted = substitute(body, {node.var: binary("add", node.var, node.min)})
                return _VectorizeBody(node.var, lanes).visit(shifted)
            except _CannotVectorize as exc:
                reason = str(exc)
        notes = node.annotations + (("not_vectorized", reason),)
        return For(node.var, node.min, node.extent, "serial", body, notes)


    def _split_wide(self, node, body):
        """``for v in [min, min + n)`` vectorized, n > MAX_VECTOR_LANES -> a serial loop over
        SPLIT_LANES-lane vector loops and a serial tail of ``n % SPLIT_LANES`` iterations."""
        n, lanes = node.extent.value, SPLIT_LANES
        why = (f"{n} lanes exceed the limit of {MAX_VECTOR_LANES}; run as {n // lanes} vectors of {lanes} "
               f"lanes{f' and a tail of {n % lanes}' if n % lanes else ''} (split the axis in the schedule "
               f"to choose yourself)")
        notes = node.annotations + (("vector_split", why),)
        outer, inner = Var(node.var.name + ".vo"), Var(node.var.name + ".vi")
        start = binary("add", node.min, binary("mul", outer, const(lanes)))
        vector = For(inner, const(0), const(lanes), "vectorized",
                     substitute(body, {node.var: binary("add", start, inner)}))
        parts = [For(outer, const(0), const(n // lanes), "serial", self.visit(vector), notes)]
        if n % lanes:
            tail = Var(node.var.name + ".tail")
            first = binary("add", node.min, const(n // lanes * lanes))
            parts.append(For(tail, const(0), const(n % lanes), "serial",
                             substitute(body, {node.var: binary("add", first, tail)}), notes))
        return seq(*parts)


def vectorize(stmt, ctx):
    return _Vectorize().visit(stmt)
