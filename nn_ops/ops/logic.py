"""Comparisons, boolean logic and ``where``, with numpy broadcasting.

Comparisons produce ``bool`` tensors (one byte per element, as numpy stores them), which
``where`` and the logical ops consume.  All are tagged ``"broadcast"``: inlined into
their consumers, or given the injective schedule (parallel outer loop, vectorized inner
loop) when they end a kernel.
"""
from __future__ import annotations

from functools import reduce as _fold
from typing import Callable, Sequence

from ...dsl import dtypes
from ...dsl.expr import cast, const, logical_and, logical_not, logical_or, select
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import broadcast_index, broadcast_shape, extents

COMPARE = {
    "equal": lambda a, b: a == b, "less": lambda a, b: a < b, "greater": lambda a, b: a > b,
    "less_equal": lambda a, b: a <= b, "greater_equal": lambda a, b: a >= b,
}
LOGICAL = {"and": logical_and, "or": logical_or, "xor": lambda a, b: a != b}


def broadcast_map(fn: Callable, tensors: Sequence[Tensor], name: str) -> Tensor:
    """``fn(*elements)`` over the numpy broadcast of ``tensors`` (any number of them)."""
    shape = _fold(broadcast_shape, [extents(t) for t in tensors])
    nd = len(shape)
    return compute(shape, lambda *idx: fn(*[broadcast_index(t, nd, idx) for t in tensors]), name=name,
                   tag="broadcast")


def compare(op: str, a: Tensor, b: Tensor) -> Tensor:
    if op not in COMPARE:
        raise ExprError(f"unknown comparison {op!r}; one of {', '.join(COMPARE)}")
    if a.dtype != b.dtype:
        raise ExprError(f"{op} of {a.dtype} and {b.dtype} tensors")
    return broadcast_map(COMPARE[op], [a, b], op)


def logical(op: str, a: Tensor, b: Tensor) -> Tensor:
    for t in (a, b):
        if t.dtype != "bool":
            raise ExprError(f"logical {op} needs bool tensors, got {t.dtype}")
    return broadcast_map(LOGICAL[op], [a, b], op)


def logical_not_(x: Tensor) -> Tensor:
    if x.dtype != "bool":
        raise ExprError(f"logical not needs a bool tensor, got {x.dtype}")
    return compute(x.shape, lambda *idx: logical_not(x[idx]), name="not", tag="elemwise")


def where(condition: Tensor, x: Tensor, y: Tensor) -> Tensor:
    """``x`` where ``condition`` holds, else ``y`` (all three broadcast).

    When the condition varies along the innermost axis but neither value does (``x`` and
    ``y`` broadcast along it, as in ``where(mask, -inf, 0)``), the vectorized select would
    get a vector condition and two scalars, which the code generator cannot emit; the
    select is then written so that one branch is a vector (``a + 0 * i`` for floats, exact
    but for the sign of a zero; ``b + (a - b) * c`` for integers, exact in wrapping
    arithmetic).
    """
    if condition.dtype != "bool":
        raise ExprError(f"where needs a bool condition, got {condition.dtype}")
    if x.dtype != y.dtype:
        raise ExprError(f"where of {x.dtype} and {y.dtype} values")
    shape = _fold(broadcast_shape, [extents(t) for t in (condition, x, y)])
    nd = len(shape)

    def invariant(t):       # the same value across the innermost output axis
        s = extents(t)
        return not s or s[-1] == 1
    if not shape or shape[-1] == 1 or invariant(condition) or not (invariant(x) and invariant(y)):
        return broadcast_map(select, [condition, x, y], "where")

    def body(*idx):
        c, a, b = (broadcast_index(t, nd, idx) for t in (condition, x, y))
        return select_invariant(c, a, b, idx[-1])

    return compute(shape, body, name="where", tag="broadcast")


def select_invariant(c, a, b, lane):
    """``select(c, a, b)`` for a ``c`` that varies with the vectorized index ``lane`` while
    ``a`` and ``b`` do not (see :func:`where`)."""
    dtype = a.dtype
    if dtypes.is_float(dtype):
        return select(c, a + cast(dtype, lane) * const(0.0, dtype), b)
    work = dtype if dtype != "bool" else "uint8"
    a, b = cast(work, a), cast(work, b)
    return cast(dtype, b + (a - b) * cast(work, c))
