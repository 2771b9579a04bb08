"""Host memory at the alignment compiled kernels assume of a network's buffers.

A network's arena, its packed weights and the places inside them all start on ``ALIGN`` bytes
(a cache line, and the widest vector a kernel loads): an offset planned as a multiple of it stays
aligned once added to a base that is.  numpy gives no such promise, so a buffer is cut from a
slightly larger one.
"""
from __future__ import annotations

import numpy as np

ALIGN = 64


def aligned_size(nbytes: int) -> int:
    """``nbytes`` rounded up to a multiple of ``ALIGN``."""
    return (nbytes + ALIGN - 1) // ALIGN * ALIGN


def aligned_empty(nbytes: int) -> np.ndarray:
    """An uninitialised uint8 array of ``nbytes`` (at least 1) whose data starts on ``ALIGN`` bytes."""
    raw = np.empty(max(1, nbytes) + ALIGN, np.uint8)
    off = (-raw.ctypes.data) % ALIGN
    return raw[off:off + max(1, nbytes)]
