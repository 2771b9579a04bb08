"""How a stage's leaf axes relate to its root axes: split and fuse records.

Every axis iterates ``0 .. extent-1`` in loop space; a root axis's value is its
domain minimum plus its loop value.  ``root_values`` turns a set of leaf loop values
into root loop values by walking the relations backwards, which is all that
lowering and rfactor need.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from .expr import Binary, Const, Expr, Var, binary, const


@dataclass(frozen=True, eq=False)
class Split:
    parent: object
    outer: object
    inner: object
    factor: Optional[Expr]
    nparts: Optional[Expr]
    tail: str = "guard"  # "guard": guard the last tile; "shift": move it inwards (Halide's ShiftInwards)


@dataclass(frozen=True, eq=False)
class Fuse:
    outer: object
    inner: object
    fused: object


def ceildiv(a: Expr, b: Expr) -> Expr:
    if isinstance(a, Const) and isinstance(b, Const):
        return const(-(-a.value // b.value))
    return binary("floordiv", binary("add", a, binary("sub", b, const(1))), b)


def split_extents(parent_extent: Expr, factor: Optional[Expr], nparts: Optional[Expr]):
    """(outer extent, inner extent) of a split by factor or by nparts."""
    if factor is not None:
        return ceildiv(parent_extent, factor), factor
    return nparts, ceildiv(parent_extent, nparts)


def derive_extents(root_extents: Dict[object, Expr], relations: List) -> Dict[object, Expr]:
    """Extents of every axis, given the extents of the root axes."""
    extents = dict(root_extents)
    for rel in relations:
        if isinstance(rel, Split):
            extents[rel.outer], extents[rel.inner] = split_extents(extents[rel.parent], rel.factor, rel.nparts)
        else:
            extents[rel.fused] = binary("mul", extents[rel.outer], extents[rel.inner])
    return extents


def root_values(leaf_values: Dict[object, Expr], relations: List, extents: Dict[object, Expr],
                lets: Optional[Dict[object, Expr]] = None) -> Dict[object, Expr]:
    """Values of every axis derivable from the given leaf loop values (walking relations backwards).

    A ``shift`` split whose parent extent is a constant of at least one tile places
    the last tile at ``extent - factor``: it overlaps the previous one instead of
    running past the end, so no guard is needed (the overlap is recomputed).
    """
    values = dict(leaf_values)
    for rel in reversed(relations):
        if isinstance(rel, Split):
            if rel.outer in values and rel.inner in values:
                inner_extent = extents[rel.inner]
                start = binary("mul", values[rel.outer], inner_extent)
                if shifts(rel, extents, lets):
                    start = binary("min", start, binary("sub", extents[rel.parent], inner_extent))
                values[rel.parent] = binary("add", start, values[rel.inner])
        elif rel.fused in values:
            inner_extent = extents[rel.inner]
            values[rel.outer] = binary("floordiv", values[rel.fused], inner_extent)
            values[rel.inner] = binary("floormod", values[rel.fused], inner_extent)
    return values


def shifts(rel: Split, extents: Dict[object, Expr], lets: Optional[Dict[object, Expr]] = None) -> bool:
    """Whether a split moves its last tile inwards: a constant tile, and a parent of at least one
    tile for every value of its variables (a run-time row of a kernel built over sizes known to be
    large enough: its blocks all whole, no tail code); ``lets``: the values of let-bound variables
    (a region's extent)."""
    if rel.tail != "shift":
        return False
    parent, inner = extents[rel.parent], extents[rel.inner]
    least = _least(parent, lets or {})
    return isinstance(inner, Const) and least is not None and least >= inner.value


def _least(e: Expr, lets: Dict[object, Expr]) -> Optional[int]:
    """The least value of an index expression over non-negative variables (loop and size vars),
    where it never decreases as one grows (sums, products and minimums of such, floor divisions by
    a positive constant, less a constant): its value with every variable 0; else None."""
    if isinstance(e, Const):
        return e.value if isinstance(e.value, int) else None
    if isinstance(e, Var):
        return _least(lets[e], lets) if e in lets else 0
    if not isinstance(e, Binary):
        return None
    a = _least(e.a, lets)
    if e.op == "sub":
        return a - e.b.value if a is not None and isinstance(e.b, Const) else None
    if e.op == "floordiv":
        return a // e.b.value if a is not None and isinstance(e.b, Const) and e.b.value > 0 else None
    b = _least(e.b, lets)
    if a is None or b is None:
        return None
    if e.op == "mul":
        return a * b if a >= 0 and b >= 0 else None
    return {"add": a + b, "min": min(a, b), "max": max(a, b)}.get(e.op)


def needs_guard(rel: Split, extents: Dict[object, Expr], lets: Optional[Dict[object, Expr]] = None) -> bool:
    """Whether a split can produce values past its parent's extent (a tail)."""
    parent = extents[rel.parent]
    inner = extents[rel.inner]
    outer = extents[rel.outer]
    if shifts(rel, extents, lets):
        return False
    if isinstance(parent, Const) and isinstance(inner, Const) and isinstance(outer, Const):
        return outer.value * inner.value != parent.value
    return True
