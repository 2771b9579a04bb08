"""slices_as_views: a lone slice that takes one contiguous block of a kernel's result is a view of it.

The block is contiguous when the last axis the slice cuts is the only one cut, every axis before it
is cut to one element, and every step is 1; the view then lies at the block's byte offset in its
source.  A recurrent layer unrolled over its sequence reads each step's rows of its input
projection, and each step's states, this way: no copy per step.

Accepts the kernel groups left by ``concats_in_place`` with its ``slice_of`` and the alias map
(``alias_of``).  Guarantees: each slice made a view is added to ``slice_of`` (value -> (source,
byte offset)) and its group is not returned; none is made a view of a graph input, output or
weight (their places take no offset, possibly through other views), none is a graph output (it
must be written), and every offset is a multiple of ``alignment`` bytes.  The graph is not changed.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

import numpy as np

from .. import symbolic as S
from ..graph import Graph, Node
from ..memory_root import memory_root
from .concats_in_place import aligned


def slices_as_views(g: Graph, kernel_groups, alias_of: Dict[str, str], slice_of: Dict[str, Tuple[str, int]],
                    alignment: int):
    """The kernel groups left to run; the slices made views are added to ``slice_of``."""
    outside = set(g.inputs) | set(g.outputs) | set(g.initializers)
    kept = []
    for grp in kernel_groups:
        node = grp.nodes[0]
        offset = _contiguous_slice_offset(g, node) if len(grp.nodes) == 1 and node.op_type == "slice" else None
        source, out = (node.inputs[0], node.outputs[0]) if offset is not None else (None, None)
        if offset is None or not aligned(offset, alignment) or out in outside or out in slice_of \
                or memory_root(source, alias_of, slice_of)[0] in outside:
            kept.append(grp)
            continue
        slice_of[out] = (source, offset)
    return kept


def _contiguous_slice_offset(g: Graph, node: Node) -> Optional[int]:
    """The byte offset of a slice's result in its input when that result is one contiguous block of
    it (row-major), else None.  Over symbolic sizes (sympy sizes and bounds) the offset is a size."""
    shape = list(g.shape(node.inputs[0]))
    begin, end, step = (list(node.attrs[k]) for k in ("begin", "end", "step"))
    if any(s != 1 for s in step) or len(begin) != len(shape):
        return None
    cut = [k for k, (b, e, n) in enumerate(zip(begin, end, shape)) if not (_same(b, 0) and _same(e, n))]
    last = cut[-1] if cut else 0
    if any(not _same(e - b, 1) for b, e in zip(begin[:last], end[:last])):
        return None
    flat = 0
    for b, n in zip(begin, shape):
        flat = flat * n + b
    offset = flat * np.dtype(g.values[node.inputs[0]].dtype).itemsize
    return int(offset) if S.is_static(offset) else S.simplify(offset)


def _same(a, b) -> bool:
    return a == b if isinstance(a, int) and isinstance(b, int) else S.equal(a, b) is True
