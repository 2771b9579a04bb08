"""Whether a kernel's 64-bit index arithmetic can run in 32 bits.

The IR computes indices in int64.  On a GPU that doubles the registers every address
takes and turns each multiply-add into two: the double-buffered 128x128-tile matmul
needs 167 registers with 64-bit indices and 127 with 32-bit ones (ptxas, sm_90), which
decides between one and two blocks per multiprocessor.  ``fits_int32(kernel)`` proves,
by interval arithmetic over the loop ranges (``dsl.arith.binary_bound``, the
simplifier's own rules), that every int64 value the kernel computes (each
subexpression, not only the final index) lies in int32's range; the emitter then
writes ``int`` for them.  Anything whose range is unknown (a value loaded from memory,
a size passed at run time, a float converted to an integer) keeps the kernel in 64 bits.
"""
from __future__ import annotations

from typing import Dict, Optional, Tuple

from ...dsl.arith import binary_bound
from ...dsl.expr import Binary, Call, Cast, CheckedIndex, Compare, Const, Let, Logical, Select, Var
from ...lowering.ir import (Allocate, Broadcast, BufferLoad, BufferStore, Evaluate, For, IfThenElse, KernelLaunch,
                            LetStmt, Ramp, Seq)

INT32_MIN, INT32_MAX = -(1 << 31), (1 << 31) - 1
Range = Tuple[int, int]


class _Unknown(Exception):
    """An int64 value whose range cannot be bounded, or that leaves int32."""


def _hull(*ranges: Range) -> Range:
    return min(r[0] for r in ranges), max(r[1] for r in ranges)


class _Ranges:
    def __init__(self):
        self.of: Dict[int, Range] = {}

    # ---------------------------------------------------------------- statements
    def stmt(self, s) -> None:
        if isinstance(s, Seq):
            for c in s.stmts:
                self.stmt(c)
        elif isinstance(s, For):
            lo, ext = self.expr(s.min), self.expr(s.extent)
            if lo is None or ext is None:
                raise _Unknown(s.var)
            self.of[id(s.var)] = (lo[0], lo[1] + ext[1] - 1)
            self.stmt(s.body)
        elif isinstance(s, LetStmt):
            r = self.expr(s.value)
            if r is not None:
                self.of[id(s.var)] = r
            self.stmt(s.body)
        elif isinstance(s, IfThenElse):
            self.expr(s.condition)
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
        elif isinstance(s, Allocate):
            self.expr(s.extent)
            self.stmt(s.body)
        elif isinstance(s, BufferStore):
            for i in s.indices:
                self.expr(i)
            self.expr(s.value)
        elif isinstance(s, Evaluate):
            self.expr(s.value)
        else:
            raise _Unknown(type(s).__name__)

    # ---------------------------------------------------------------- expressions
    def expr(self, e) -> Optional[Range]:
        """The range of an integer expression (None for other types); raises _Unknown for an
        int64 one that is unbounded or outside int32."""
        r = self._range(e)
        if getattr(e, "dtype", None) == "int64":
            if r is None or r[0] < INT32_MIN or r[1] > INT32_MAX:
                raise _Unknown(e)
        return r

    def _range(self, e) -> Optional[Range]:
        if isinstance(e, Const):
            return (int(e.value), int(e.value)) if e.dtype in ("int64", "int32", "bool") else None
        if isinstance(e, Var):
            return self.of.get(id(e))
        if isinstance(e, Binary):
            a, b = self.expr(e.a), self.expr(e.b)
            if a is None or b is None:
                return None
            return binary_bound(e.op, a, b)
        if isinstance(e, (Compare, Logical)):
            self.expr(e.a)
            if getattr(e, "b", None) is not None:
                self.expr(e.b)
            return (0, 1)
        if isinstance(e, Select):
            self.expr(e.condition)
            t, f = self.expr(e.true_value), self.expr(e.false_value)
            return None if t is None or f is None else _hull(t, f)
        if isinstance(e, Cast):
            inner = self.expr(e.value)
            if e.dtype == "bool":
                return (0, 1)
            if inner is not None:
                return inner
            return (INT32_MIN, INT32_MAX) if e.value.dtype in ("int32", "int16", "int8", "uint16", "uint8") \
                else None
        if isinstance(e, Let):
            r = self.expr(e.value)
            if r is not None:
                self.of[id(e.var)] = r
            return self.expr(e.body)
        if isinstance(e, Ramp):
            base, stride = self.expr(e.base), self.expr(e.stride)
            if base is None or stride is None:
                return None
            last = binary_bound("mul", stride, (e.lanes - 1, e.lanes - 1))
            return _hull(base, binary_bound("add", base, last))
        if isinstance(e, Broadcast):
            return self.expr(e.value)
        if isinstance(e, BufferLoad):
            for i in e.indices:
                self.expr(i)
            return None
        if isinstance(e, Call):
            for a in e.args:
                self.expr(a)
            return None
        if isinstance(e, CheckedIndex):   # the value is checked as computed: it must fit as well
            self.expr(e.value)
            extent = self.expr(e.extent)
            return None if extent is None else (0, max(0, extent[1] - 1))
        raise _Unknown(type(e).__name__)


def fits_int32(kernel: KernelLaunch) -> bool:
    """Whether every int64 value in ``kernel`` provably fits int32 (so ``int`` may hold them)."""
    if kernel.scalars:
        return False     # sizes arrive at run time: their range is unknown
    ranges = _Ranges()
    try:
        ranges.stmt(kernel.body)
    except _Unknown:
        return False
    return True
