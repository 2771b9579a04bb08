"""How a stage's leaf axes relate to its root axes: split and fuse records.

Every axis iterates ``0 .. extent-1`` in loop space; a root axis's value is its
domain minimum plus its loop value.  ``root_values`` turns a set of leaf loop values
into root loop values by walking the relations backwards, which is all that
lowering and rfactor need.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional

from .expr import Const, Expr, binary, const


@dataclass(frozen=True, eq=False)
class Split:
    parent: object
    outer: object
    inner: object
    factor: Optional[Expr]
    nparts: Optional[Expr]


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


def root_values(leaf_values: Dict[object, Expr], relations: List, extents: Dict[object, Expr]) -> Dict[object, Expr]:
    """Values of every axis (root ones included) given the leaf loop values."""
    values = dict(leaf_values)
    for rel in reversed(relations):
        if isinstance(rel, Split):
            inner_extent = extents[rel.inner]
            values[rel.parent] = binary("add", binary("mul", values[rel.outer], inner_extent), values[rel.inner])
        else:
            inner_extent = extents[rel.inner]
            values[rel.outer] = binary("floordiv", values[rel.fused], inner_extent)
            values[rel.inner] = binary("floormod", values[rel.fused], inner_extent)
    return values


def needs_guard(rel: Split, extents: Dict[object, Expr]) -> bool:
    """Whether a split can produce values past its parent's extent (a tail)."""
    parent = extents[rel.parent]
    inner = extents[rel.inner]
    outer = extents[rel.outer]
    if isinstance(parent, Const) and isinstance(inner, Const) and isinstance(outer, Const):
        return outer.value * inner.value != parent.value
    return True
