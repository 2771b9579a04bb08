"""The tensor reads of an expression, each with the condition under which it happens.

A read inside the true branch of ``select(c, ...)`` only happens where ``c`` holds;
bound inference and the static bounds check use that condition when it is affine,
which is what makes padded convolutions exact.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Optional, Tuple

from ..dsl.expr import Compare, Const, Expr, Logical, Reduce, Select, TensorLoad, const, logical_and
from ..dsl.visitor import children

_FLIP = {"lt": "ge", "ge": "lt", "le": "gt", "gt": "le", "eq": "ne", "ne": "eq"}


@dataclass(frozen=True)
class Access:
    tensor: object
    indices: Tuple[Expr, ...]
    condition: Optional[Expr]  # None: happens under a condition we cannot express


def negate(cond: Expr) -> Optional[Expr]:
    """The negation of a comparison/logical condition, or None if not expressible."""
    if isinstance(cond, Const):
        return const(not cond.value)
    if isinstance(cond, Compare):
        return Compare(_FLIP[cond.op], cond.a, cond.b)
    if isinstance(cond, Logical):
        if cond.op == "not":
            return cond.a
        a, b = negate(cond.a), negate(cond.b)
        if a is None or b is None:
            return None
        return Logical("or" if cond.op == "and" else "and", a, b)
    return None


def _conj(a: Optional[Expr], b: Optional[Expr]) -> Optional[Expr]:
    if a is None or b is None:
        return None
    return logical_and(a, b)


def collect_accesses(expr: Expr, condition: Optional[Expr] = None) -> List[Access]:
    """Every TensorLoad in ``expr`` with its path condition (True at the top)."""
    found: List[Access] = []
    condition = const(True) if condition is None else condition

    def walk(e, cond):
        if isinstance(e, TensorLoad):
            for i in e.indices:
                walk(i, cond)
            found.append(Access(e.tensor, e.indices, cond))
            return
        if isinstance(e, Select):
            walk(e.condition, cond)
            walk(e.true_value, _conj(cond, e.condition))
            neg = negate(e.condition)
            walk(e.false_value, _conj(cond, neg) if neg is not None else None)
            return
        if isinstance(e, Reduce):
            for s in e.source:
                walk(s, _conj(cond, e.condition))
            walk(e.condition, cond)
            return
        for c in children(e):
            walk(c, cond)

    walk(expr, condition)
    return found
