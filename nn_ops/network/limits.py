"""How large a tensor (or a saved executable's memory) loopweave agrees to make.

The default is the machine's physical memory: a model whose inferred tensor would not fit
is refused at import or load with a clear error instead of failing in an allocation (or
swapping for minutes).  Override it with ``memory_limit(nbytes)`` (a context manager) or
``set_memory_limit(nbytes)``; the environment variable ``LOOPWEAVE_MAX_TENSOR_BYTES`` is
read at each call as an override for processes you do not control.
"""
from __future__ import annotations

import contextlib
import os
from typing import Optional

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
    env = os.environ.get("LOOPWEAVE_MAX_TENSOR_BYTES")
    if env:
        try:
            return int(env)
        except ValueError:
            pass
    return machine_memory_bytes()


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
