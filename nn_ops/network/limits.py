"""How large a tensor (or a saved executable's memory) loopweave agrees to make.

The default is the machine's physical memory: a model whose inferred tensor would not fit
is refused at import or load with a clear error instead of failing in an allocation (or
swapping for minutes).  Override it with ``memory_limit(nbytes)`` (a context manager) or
``set_memory_limit(nbytes)``; the environment variable ``LOOPWEAVE_MAX_TENSOR_BYTES`` is
read at each call as an override for processes you do not control: a number of bytes, optionally
with a binary unit (``8G``, ``512MiB``, ``64k``; K, M, G, T = 1024, 1024**2, ...).  Any other text is
an ``ArgumentError`` at the first check, never ignored.
"""
from __future__ import annotations

import contextlib
import os
import re
from typing import Optional

from ...errors import ArgumentError

_limit: Optional[int] = None


def machine_memory_bytes() -> int:
    try:
        return int(os.sysconf("SC_PAGE_SIZE")) * int(os.sysconf("SC_PHYS_PAGES"))
    except (ValueError, OSError, AttributeError):
        return 1 << 40


def memory_limit_bytes() -> int:
    """The largest tensor, in bytes, loopweave will create (see the module docstring)."""
    if _limit is not None:
        return _limit
    env = os.environ.get("LOOPWEAVE_MAX_TENSOR_BYTES", "").strip()
    if env:
        return parse_bytes(env, "LOOPWEAVE_MAX_TENSOR_BYTES")
    return machine_memory_bytes()


_UNITS = {"": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30, "t": 1 << 40}
_SIZE = re.compile(r"(\d+)\s*([kmgt]?)(i?b)?\Z", re.IGNORECASE)


def parse_bytes(text: str, what: str) -> int:
    """``8G`` -> 8 * 2**30; a plain number is bytes.  ``ArgumentError`` naming ``what`` otherwise."""
    m = _SIZE.match(text.strip())
    if m is None or (m.group(3) and m.group(3).lower() == "ib" and not m.group(2)):
        raise ArgumentError(f"{what}={text!r} is not a size: give a number of bytes, optionally with a binary "
                            f"unit (e.g. 8G, 512MiB, 65536)")
    return int(m.group(1)) * _UNITS[m.group(2).lower()]


def set_memory_limit(nbytes: Optional[int]) -> None:
    """Set the limit (None: back to the default)."""
    global _limit
    _limit = None if nbytes is None else int(nbytes)


@contextlib.contextmanager
def memory_limit(nbytes: Optional[int]):
    global _limit
    saved = _limit
    set_memory_limit(nbytes)
    try:
        yield
    finally:
        _limit = saved
