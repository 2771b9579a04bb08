"""The object code loaded into this process, by symbol: each symbol is loaded once.

A kernel built twice (two networks with the same layer, a network compiled again, a saved
executable loaded in the process that built it) must resolve to the code loaded first: loading
its object again would define the symbol a second time in the JIT.  So every loader (``lw.build``,
the network executables, the kernel cache, the runners) goes through ``load``, which returns the
address the symbol already has, and ``loaded_object`` gives the object code behind it (what a saved
executable writes).
"""
from __future__ import annotations

import threading
from typing import Dict, Mapping, Optional, Tuple

from llvmlite import binding as llvm

from .llvm import jit

_loaded: Dict[str, Tuple[int, bytes]] = {}      # symbol -> (address, the object code loaded for it)
_lock = threading.Lock()


def load(symbol: str, obj: bytes, imports: Mapping[str, int] = {}) -> int:
    """The address of ``symbol``, loading ``obj`` (which defines it) unless it was loaded before.
    ``imports``: addresses of the other symbols ``obj`` calls ({symbol: address}), made known to
    the JIT before it links the object."""
    with _lock:
        entry = _loaded.get(symbol)
        if entry is None:
            for name, address in imports.items():
                llvm.add_symbol(name, address)
            entry = _loaded[symbol] = (jit.load_object(obj, symbol), obj)
    return entry[0]


def loaded_object(symbol: str) -> Optional[bytes]:
    """The object code loaded for ``symbol`` in this process, or None if it is not loaded."""
    entry = _loaded.get(symbol)
    return None if entry is None else entry[1]
