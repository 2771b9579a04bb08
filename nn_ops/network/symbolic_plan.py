"""A memory plan whose sizes are symbolic: slots by liveness, sizes and offsets evaluated per call.

The static executor plans one arena at compile time.  A shape-polymorphic executable knows each
intermediate's size only as a sympy expression over the input symbols (``4*batch*seq*256``),
so the plan is made of *slots*: values whose lifetimes do not overlap share a slot, whose size
is the ``Max`` of theirs.  A call evaluates the slot sizes at its binding (a few small
expressions), lays the slots out one after another (64-byte aligned), and takes views of one
arena, which grows when a larger binding arrives and is reused after (never shrinks); an arena
larger than ``lw.memory_limit`` is refused before it is allocated (``ArgumentError``).

Views (a Reshape of a contiguous value) share their source's slot: the plan extends the
source's lifetime to the view's last use.  A view may lie at a byte offset in its source
(``offsets``: a concat's part, which its producer writes in place, ``concats_in_place``).
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np
import sympy

from ...backends.aligned_memory import ALIGN
from ...errors import ArgumentError
from . import symbolic as S
from .limits import memory_limit_bytes

CACHED_BINDINGS = 8


class SymbolicPlan:
    """``values`` {name: (shape of sizes, dtype)}; ``steps`` [(reads, writes)] in run order;
    ``views`` {view: source}; ``keep`` values never reused (the outputs); ``offsets`` {view: its byte
    offset in its source} where not 0."""

    def __init__(self, values: Dict[str, Tuple[tuple, str]], steps: Sequence[Tuple[Sequence[str], Sequence[str]]],
                 views: Dict[str, str], keep: Sequence[str] = (), offsets: Dict[str, object] = None):
        self.values = dict(values)
        self.views = dict(views)
        self.offsets = dict(offsets or {})
        root = {name: self._root(name) for name in self.values}
        last_use: Dict[str, int] = {}
        first_def: Dict[str, int] = {}
        for k, (reads, writes) in enumerate(steps):
            for name in writes:
                first_def.setdefault(root[name], k)
            for name in list(reads) + list(writes):
                last_use[root[name]] = k
        for name in keep:
            if name in root:            # outputs that are inputs (or views of them) are not planned
                last_use[root[name]] = len(steps)
        self.slot_of: Dict[str, int] = {}
        self.slot_sizes: List[sympy.Expr] = []
        free: List[int] = []
        releases: Dict[int, List[int]] = {}
        order = sorted((k, name) for name, k in first_def.items())
        for k, name in order:
            for step in [s for s in releases if s < k]:
                free.extend(releases.pop(step))
            nbytes = S.product(self.values[name][0]) * np.dtype(self.values[name][1]).itemsize
            slot = self._pick(free, nbytes)
            if slot is None:
                slot = len(self.slot_sizes)
                self.slot_sizes.append(nbytes)
            else:
                free.remove(slot)
                self.slot_sizes[slot] = sympy.Max(self.slot_sizes[slot], nbytes)
            self.slot_of[name] = slot
            releases.setdefault(last_use.get(name, k), []).append(slot)
        for name in self.values:
            if name not in self.slot_of and root[name] in self.slot_of:
                self.slot_of[name] = self.slot_of[root[name]]
        self._arena = np.empty(0, np.uint8)
        self._views: Dict[tuple, Dict[str, np.ndarray]] = {}     # binding -> arena views (recent ones)
        self.grown = 0          # how many times the arena was (re)allocated

    def _root(self, name: str) -> str:
        while name in self.views:
            name = self.views[name]
        return name

    def _offset(self, name: str, binding) -> int:
        """Bytes from the start of ``name``'s slot to ``name`` at ``binding``."""
        total = 0
        while name in self.views:
            if name in self.offsets:
                total += int(S.evaluate(self.offsets[name], binding))
            name = self.views[name]
        return total

    def _pick(self, free: List[int], nbytes) -> int:
        """A free slot for ``nbytes``: one provably large enough, else any (its size becomes the Max)."""
        for slot in free:
            if S.at_least(self.slot_sizes[slot], nbytes):
                return slot
        return free[0] if free else None

    def layout(self, binding: Dict[str, int]) -> Tuple[List[int], int]:
        """(offset of each slot, total bytes) at ``binding``."""
        offsets, total = [], 0
        for size in self.slot_sizes:
            offsets.append(total)
            total += -(-int(S.evaluate(size, binding)) // ALIGN) * ALIGN
        return offsets, total

    def arrays(self, binding: Dict[str, int]) -> Dict[str, np.ndarray]:
        """A view of the arena for every planned value at ``binding`` (the arena grows if needed).

        The views of the last few bindings are kept (they stay valid until the arena grows), so a
        run at a size seen recently evaluates no size expression."""
        key = tuple(sorted(binding.items()))
        cached = self._views.get(key)
        if cached is not None:
            return cached
        offsets, total = self.layout(binding)
        if self._arena.nbytes < total + ALIGN:      # (room to align its start, wherever numpy puts it)
            limit = memory_limit_bytes()
            if total + ALIGN > limit:
                sizes = ", ".join(f"{k}={v}" for k, v in sorted(binding.items()))
                raise ArgumentError(f"the inputs' sizes ({sizes}) need {total + ALIGN} bytes for the network's "
                                    f"intermediate values, more than the memory limit of {limit} bytes (raise it "
                                    f"with lw.memory_limit(nbytes), lw.set_memory_limit or "
                                    f"LOOPWEAVE_MAX_TENSOR_BYTES)")
            self._arena = np.empty(total + ALIGN, np.uint8)
            self.grown += 1
            self._views.clear()
        base = (-self._arena.ctypes.data) % ALIGN
        out = {}
        for name, slot in self.slot_of.items():
            shape, dtype = self.values[name]
            dims = tuple(int(S.evaluate(d, binding)) for d in shape)
            count = int(np.prod(dims, dtype=np.int64))
            start = base + offsets[slot] + self._offset(name, binding)
            out[name] = self._arena[start:start + count * np.dtype(dtype).itemsize].view(dtype).reshape(dims)
        if len(self._views) >= CACHED_BINDINGS:
            self._views.pop(next(iter(self._views)))
        self._views[key] = out
        return out

    @property
    def arena_bytes(self) -> int:
        return self._arena.nbytes
