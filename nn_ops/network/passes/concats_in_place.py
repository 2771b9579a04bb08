"""concats_in_place: a concat whose parts its producers can write straight into its memory is not run.

A concat along an axis with only 1s before it (a channel concat of one image, NCHW or blocked) lays
its inputs out one after another.  So where every input is a kernel's own result (not a graph input
or output, a weight, a view, or another concat's part) and sits at an offset the arena's alignment
keeps, each producer writes into its part of the concat's buffer and the copy is not run
(SqueezeNet's fire modules: 6 % of its run).

A concat whose inputs begin another concat's (a dense block's: each layer concatenates the features
so far, the block's last concat all of them) is a view of that one's first bytes, so every feature
map is written once, in place, and each layer reads its prefix as one tensor (before: 58
copies-with-selects in DenseNet-121, each its own kernel).  A concat heading a group (under an
elementwise epilogue, as a batch norm) leaves the group, which then reads the concat's memory.

Accepts the kernel groups of ``fuse_operators`` without the alias groups (``alias_of``: each alias
value -> the value it views).  Guarantees: the groups returned compute every value the network
reads except the in-place concats, which ``slice_of`` (value -> (concat output, byte offset))
places; every part's offset is a multiple of ``alignment`` (over symbolic sizes, at every binding:
the offsets are then sympy sizes); the graph is not changed.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import sympy

from .. import symbolic as S
from ..graph import Graph, Node
from .fuse_operators import FusedGroup


def concats_in_place(g: Graph, kernel_groups, alias_of: Dict[str, str], alignment: int):
    """(the kernel groups left to run, {value: (concat output, byte offset)})."""
    produced = {grp.output for grp in kernel_groups}
    outside = set(g.inputs) | set(g.outputs)
    slice_of: Dict[str, Tuple[str, int]] = {}
    heads = [grp for grp in kernel_groups if grp.nodes[0].op_type == "concat"]
    roots: List[Tuple[Node, List]] = []        # (the longest concat of a family, its members' groups)
    for grp in sorted(heads, key=lambda grp: -len(grp.nodes[0].inputs)):
        node = grp.nodes[0]
        family = next((members for root, members in roots if _is_prefix(g, node, root)), None)
        if family is None:
            roots.append((node, [grp]))
        else:
            family.append(grp)
    moved = set()                 # ids of the groups whose concat is computed in place
    for root, members in roots:
        parts = _concat_parts(g, root, produced, outside, alias_of, slice_of, alignment)
        if parts is None:
            continue
        slice_of.update((name, (root.outputs[0], offset)) for name, offset in parts)
        for grp in members:
            if grp.nodes[0] is not root:
                slice_of[grp.nodes[0].outputs[0]] = (root.outputs[0], 0)
            moved.add(id(grp))
    kept = []
    for grp in kernel_groups:
        if id(grp) not in moved:
            kept.append(grp)
        elif len(grp.nodes) > 1:        # the epilogue stays, reading the concat's memory
            kept.append(FusedGroup(grp.nodes[1:], grp.kind, grp.output).find_inputs())
    return kept, slice_of


def _is_prefix(g: Graph, node: Node, root: Node) -> bool:
    """Whether concat ``node`` joins the first inputs of concat ``root`` along the same axis."""
    n = len(node.inputs)
    axis = int(node.attrs["axis"]) % len(g.shape(node.outputs[0]))
    root_axis = int(root.attrs["axis"]) % len(g.shape(root.outputs[0]))
    return n <= len(root.inputs) and list(root.inputs[:n]) == list(node.inputs) and axis == root_axis \
        and node.outputs[0] not in g.outputs


def _concat_parts(g: Graph, node: Node, produced, outside, alias_of, slice_of,
                  alignment: int) -> Optional[List[Tuple[str, int]]]:
    """[(input, byte offset)] where ``node``'s inputs can be computed in place, else None."""
    shape = g.values[node.outputs[0]].shape
    axis = int(node.attrs["axis"]) % len(shape)
    inputs = list(node.inputs)
    if S.product(shape[:axis]) != 1 or node.outputs[0] in outside or len(set(inputs)) != len(inputs):
        return None
    parts, offset = [], 0
    for name in inputs:
        if name not in produced or name in outside or name in alias_of or name in slice_of or \
                not aligned(offset, alignment):
            return None
        v = g.values[name]
        parts.append((name, offset))
        size = S.product(v.shape) * np.dtype(v.dtype).itemsize
        offset = offset + (int(size) if S.is_static(size) else size)
    return parts


def aligned(offset, alignment: int) -> bool:
    """Whether byte ``offset`` (an int, or a sum of sizes over symbols) is a multiple of ``alignment`` at
    every binding: each term's constant factor is."""
    if S.is_static(offset):
        return int(offset) % alignment == 0
    return all(term.as_coeff_Mul()[0].is_Integer and int(term.as_coeff_Mul()[0]) % alignment == 0
               for term in sympy.Add.make_args(sympy.expand(offset)))
