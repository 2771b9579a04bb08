"""The tables a native loop runs a whole polymorphic network from, in one ctypes call.

The loop (``backends/llvm/call_list_runner.py``) calls ``fns[k](buffers[k], sizes[k], err)`` for
k < n, in order, and stops after a call that writes the error slot (a failed index check).
A :class:`CallTable` holds the ctypes arrays for one binding of the symbols: pointers into the
arena and to the constants, and each call's sizes (evaluated from their symbolic expressions
once per binding); only the pointers of the feed's arrays and of the outputs change from run to run.
"""
from __future__ import annotations

import ctypes
import functools
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ...backends import loaded_objects
from ...backends.runtime import ERROR_SLOT_WORDS, KERNEL_ENTRY, data_pointer
from ...errors import InternalError
from . import symbolic as S


class CallTable:
    """The ctypes tables of every call at one binding.  ``calls`` [(module, arg names, {size name:
    sympy size})]; ``arrays`` the arrays by name (arena views, constants, input views); ``patched``
    {arg name: (position, byte offset)} for the arguments whose memory changes per run: the array at
    that position of what ``run`` is given (a feed's array, or an output the kernels write in
    place), plus the offset; ``keep`` arrays that only the table holds."""

    def __init__(self, calls: Sequence[Tuple[object, Sequence[str], Dict[str, object]]], arrays: Dict[str, np.ndarray],
                 binding: Dict[str, int], patched: Dict[str, Tuple[int, int]], keep=()):
        n = len(calls)
        self.n = n
        self.fns = (ctypes.c_void_p * max(1, n))()
        self.buffers = (ctypes.c_void_p * max(1, n))()
        self.sizes = (ctypes.c_void_p * max(1, n))()
        self._keep: List[object] = list(keep)
        self.patches: List[Tuple[object, int, int, int]] = []     # (pointer array, slot, position, offset)
        for k, (module, args, size_exprs) in enumerate(calls):
            ptrs = (ctypes.c_void_p * max(1, len(args)))()
            for j, name in enumerate(args):
                if name in patched:
                    self.patches.append((ptrs, j) + tuple(patched[name]))
                else:
                    array = arrays[name]
                    if not array.flags.c_contiguous:       # kernels index dense row-major data
                        raise InternalError(f"call table: {name!r} is not contiguous; please report")
                    ptrs[j] = array.ctypes.data
            values = (ctypes.c_int64 * max(1, len(module.size_names)))()
            for j, size_name in enumerate(module.size_names):
                values[j] = int(S.evaluate(size_exprs[size_name], binding))
            self.fns[k] = loaded_objects.load(module.symbol, module.object_code)     # loaded: its address
            self.buffers[k] = ctypes.addressof(ptrs)
            self.sizes[k] = ctypes.addressof(values)
            self._keep += [ptrs, values]
        self.err = (ctypes.c_int64 * ERROR_SLOT_WORDS)()
        # per position, its array's slots: its pointer is read once a run
        slots: Dict[int, List[Tuple[object, int, int]]] = {}
        for ptrs, j, k, offset in self.patches:
            slots.setdefault(k, []).append((ptrs, j, offset))
        self._slots = tuple((k, tuple(s)) for k, s in sorted(slots.items()))
        # the runner's arguments, read once (each ctypes.addressof is a call)
        self._args = (n, ctypes.addressof(self.fns), ctypes.addressof(self.buffers), ctypes.addressof(self.sizes),
                      ctypes.addressof(self.err))

    def patch(self, arrays: Sequence[np.ndarray]) -> None:
        """Point the patched arguments into ``arrays`` (C-contiguous, by position; checked by the caller)."""
        for k, slots in self._slots:
            base = data_pointer(arrays[k])
            for ptrs, j, offset in slots:
                ptrs[j] = base + offset

    def run(self, runner_fn, arrays: Sequence[np.ndarray]) -> int:
        """``patch`` and run every call; returns the error slot's first word."""
        for k, slots in self._slots:
            base = data_pointer(arrays[k])
            for ptrs, j, offset in slots:
                ptrs[j] = base + offset
        runner_fn(*self._args)
        return self.err[0]

    def entry(self, k: int):
        """Call ``k`` alone, a callable of no arguments (the pointers as last patched; the error slot as
        the runner's): for profiling, and for finding the call whose index check failed."""
        return functools.partial(KERNEL_ENTRY(self.fns[k]), self.buffers[k], self.sizes[k], ctypes.addressof(self.err))
