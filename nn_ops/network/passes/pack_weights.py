"""pack_weights: the constants the kernels read, in one aligned blob.

The runner passes every kernel its weights as offsets into one buffer, so the executable holds one
allocation (saved as one table of arrays, exported as one section) whatever the number of
constants.  Not to be confused with ``pack_conv_weights``, which changes a convolution weight's
layout: this one only places finished constants.

Accepts a graph after ``optimize`` and the names of the values the kernels read (``used``; names
that are not constants are ignored).  Guarantees: every used constant has an entry ``(offset,
shape, dtype)`` in the table, in name order, each offset a multiple of ``ALIGN``; the graph's
initializers for them become read-only views into the blob (no second copy of the weights), with
the same values.
"""
from __future__ import annotations

from typing import Dict, Tuple

import numpy as np

from ....backends.aligned_memory import aligned_empty, aligned_size
from ..graph import Graph


def pack_weights(g: Graph, used: set) -> Tuple[np.ndarray, Dict[str, tuple]]:
    """(blob, {name: (offset, shape, dtype)})."""
    table = {}
    offset = 0
    for name in sorted(used):
        if name in g.initializers:
            arr = g.initializers[name]
            table[name] = (offset, list(arr.shape), str(arr.dtype))
            offset = aligned_size(offset + arr.nbytes)
    blob = aligned_empty(offset)
    for name, (off, shape, dtype) in table.items():
        arr = np.ascontiguousarray(g.initializers[name])
        blob[off:off + arr.nbytes] = arr.reshape(-1).view(np.uint8)
        view = blob[off:off + arr.nbytes].view(arr.dtype).reshape(arr.shape)
        view.flags.writeable = False
        g.initializers[name] = view
    return blob, table
