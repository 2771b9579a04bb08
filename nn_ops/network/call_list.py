"""The tables a native loop runs a whole polymorphic network from, in one ctypes call.

The loop (``backends/llvm/call_list_runner.py``) calls ``fns[k](buffers[k], sizes[k], err)`` for
k < n, in order, and stops after a call that writes the error slot (a failed index check).
A :class:`CallTable` holds the ctypes arrays for one binding of the symbols: pointers into the
arena and to the constants, and each call's sizes (evaluated from their symbolic expressions
once per binding); only the pointers of the feed's arrays change from run to run.
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
    sympy size})]; ``arrays`` the arrays by name (arena views, constants, input views); ``inputs`` the
    names whose pointers change per run, with the feed name each one views; ``order`` the feed's
    names in the order ``run_plain`` takes its arrays; ``keep`` arrays that only the table holds."""

    def __init__(self, calls: Sequence[Tuple[object, Sequence[str], Dict[str, object]]], arrays: Dict[str, np.ndarray],
                 binding: Dict[str, int], inputs: Dict[str, str], order: Sequence[str] = (), keep=()):
        n = len(calls)
        self.n = n
        self.fns = (ctypes.c_void_p * max(1, n))()
        self.buffers = (ctypes.c_void_p * max(1, n))()
        self.sizes = (ctypes.c_void_p * max(1, n))()
        self._keep: List[object] = list(keep)
        self.patches: List[Tuple[object, int, str]] = []      # (pointer array, slot, feed input name)
        for k, (module, args, size_exprs) in enumerate(calls):
            ptrs = (ctypes.c_void_p * max(1, len(args)))()
            for j, name in enumerate(args):
                if name in inputs:
                    self.patches.append((ptrs, j, inputs[name]))
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
        position = {name: k for k, name in enumerate(order)}
        self._plain_patches = [(ptrs, j, position[name]) for ptrs, j, name in self.patches] if order else []

    def run(self, runner_fn, feed: Dict[str, np.ndarray]) -> int:
        """Patch the feed's pointers in and run every call; returns the error slot's first word."""
        for ptrs, j, name in self.patches:
            ptrs[j] = data_pointer(feed[name])
        return self._run(runner_fn)

    def run_plain(self, runner_fn, arrays: Sequence[np.ndarray]) -> int:
        """``run`` with the feed's arrays given in ``order`` (C-contiguous, checked by the caller)."""
        for ptrs, j, k in self._plain_patches:
            ptrs[j] = data_pointer(arrays[k])
        return self._run(runner_fn)

    def entry(self, k: int):
        """Call ``k`` alone, a callable of no arguments (the feed's pointers as last patched; the
        error slot as the runner's): for profiling, and for finding the call whose index check failed."""
        return functools.partial(KERNEL_ENTRY(self.fns[k]), self.buffers[k], self.sizes[k], ctypes.addressof(self.err))

    def _run(self, runner_fn) -> int:
        runner_fn(self.n, ctypes.addressof(self.fns), ctypes.addressof(self.buffers), ctypes.addressof(self.sizes),
                  ctypes.addressof(self.err))
        return self.err[0]
