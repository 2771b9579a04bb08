"""Where a value's memory lies when it has none of its own.

Three kinds of value share another's memory: an alias (a reshape of a contiguous value,
``alias_of``: value -> the value it views), a slice read as a view, and a part of a concat computed
in place (both in ``slice_of``: value -> (the value it lies in, byte offset)).  The passes that make
views and the memory plan both follow these links to the value that owns the memory.
"""
from __future__ import annotations

from typing import Dict, Tuple


def memory_root(v: str, alias_of: Dict[str, str], slice_of: Dict[str, Tuple[str, int]]) -> Tuple[str, int]:
    """(the value whose memory ``v`` lies in, through views and in-place concat parts; the byte offset)."""
    offset = 0
    while True:
        if v in alias_of:
            v = alias_of[v]
        elif v in slice_of:
            v, part = slice_of[v]
            offset += part
        else:
            return v, offset
