"""verify: the structural invariants of the loop IR, checked between passes.

A pass that breaks the IR (a variable used outside the loop that binds it, a store to a
buffer nobody allocated, a vector of 8 lanes added to one of 4) should fail where it
does so, naming itself, not as a wrong result or an LLVM crash three passes later.
``verify(func, after=...)`` raises ``InternalError`` naming the pass and the fault.

It checks what holds after every pass:

* every variable read is a size of the function, the variable of an enclosing loop,
  ``LetStmt`` or ``Let``, or a scalar a kernel receives; no variable is bound twice in
  nested scopes (an inner binding would shadow the outer one that later code means);
* every buffer accessed is a parameter or allocated in an enclosing scope (inside a
  kernel: one of its parameters or allocated inside it);
* loop bounds, indices and allocation extents are scalar integer expressions;
* a store's value has the buffer's dtype; conditions are bool; both operands of an
  arithmetic or comparison node have one dtype; vector lanes agree (a store of a vector
  value has an index of as many lanes);
* no DSL-only node (``TensorLoad``, ``Reduce``) is left;
* before ``storage_flatten`` an access has one index per dimension; after it, one flat
  index, and every allocated buffer has strides;

and the cheap part of each pass's "After" (``AFTER``): no vectorized loop after
``vectorize``, no small unrolled loop after ``unroll``, no empty loop or constant
condition after ``remove_noops``, no warp buffer after ``distribute_warp_tiles``, no loop on the host after
``split_host_device``.

It is off in production (``lower`` then costs what it did); the test suite turns it on
for every lowering with ``set_verify(True)`` (``tests/conftest.py``).
"""
from __future__ import annotations

from contextlib import contextmanager
from types import MappingProxyType
from typing import Dict, Iterable, Mapping, Optional, Set

from ..dsl import dtypes
from ..dsl.expr_printer import expr_to_str
from ..dsl.visitor import children, collect_vars, post_order_visit
from ..errors import InternalError
from .passes.unroll import MAX_UNROLL

_enabled = False

_NO_LOADS = MappingProxyType({})

_ARITHMETIC = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max")


def set_verify(enabled: bool) -> None:
    """Verify the IR after every pass of every ``lower`` from now on (or stop)."""
    global _enabled
    _enabled = bool(enabled)


def verify_enabled() -> bool:
    return _enabled


@contextmanager
def verifying(enabled: bool = True):
    """``with verifying(): lw.lower(...)``: the IR verified after every pass inside the block."""
    saved = _enabled
    set_verify(enabled)
    try:
        yield
    finally:
        set_verify(saved)


class _Fault(Exception):
    pass


def _short(stmt) -> str:
    text = str(stmt)
    lines = text.splitlines()
    return "\n".join(lines[:6]) + ("\n    ..." if len(lines) > 6 else "")


class VerifyMemo:
    """What the checks of one lowering learnt about its expressions, kept from pass to pass.

    A pass returns what it did not change as it was, so each check meets mostly the expressions
    the previous one checked.  What holds wherever an expression stands is kept, keyed by the
    node's identity (the node is held, so its id stays its own): the variables it reads, and, where
    no vector ``let`` it reads changes them, its lanes and the buffers it loads.  Whether those
    variables are bound and those buffers allocated is checked again at every use."""

    def __init__(self):
        self.free: Dict[int, tuple] = {}       # id(e) -> (e, ids of the variables e reads)
        self.loads: Dict[int, tuple] = {}      # id(e) -> (e, {id(buffer): a load of it in e})
        self.checked: Dict[bool, Dict[int, tuple]] = {False: {}, True: {}}   # flattened -> id(e) -> (e, lanes)


class _Verifier:
    def __init__(self, func, flattened: bool, memo: Optional[VerifyMemo] = None):
        self.flattened = flattened
        self.size_vars = {id(v) for v in func.size_vars}
        self.scope: Set[int] = set(self.size_vars)      # ids of the variables bound here
        self.buffers: Set[int] = {id(b) for b in func.params}
        self.lanes_memo: Dict[int, int] = {}
        self.let_lanes: Dict[int, int] = {}             # id(let var) -> the lanes of its value
        self.memo = memo if memo is not None else VerifyMemo()
        self.free_memo = self.memo.free
        self.checked = self.memo.checked[flattened]
        self.in_kernel = False

    # ------------------------------------------------------------------ expressions
    def free_vars(self, e) -> frozenset:
        """The ids of the variables ``e`` reads that no ``Let`` inside it binds (memoised: DAGs)."""
        key = id(e)
        entry = self.free_memo.get(key)
        if entry is not None:
            return entry[1]
        kind = type(e).__name__
        if kind == "Var":
            found = frozenset((id(e),))
        elif kind == "Const":
            found = frozenset()
        elif kind == "Let":
            found = self.free_vars(e.value) | (self.free_vars(e.body) - {id(e.var)})
        elif kind in ("TensorLoad", "Reduce"):
            raise _Fault(f"a DSL-only {kind} is left in the loop IR: {expr_to_str(e)}")
        else:
            found = frozenset()
            for c in children(e):
                found |= self.free_vars(c)
        self.free_memo[key] = (e, found)
        return found

    def loads(self, e) -> Mapping[int, object]:
        """``{id(buffer): a BufferLoad of it}`` for every buffer ``e`` loads (memoised: DAGs; shared
        between nodes, so never changed once made)."""
        entry = self.memo.loads.get(id(e))
        if entry is not None:
            return entry[1]
        found = _NO_LOADS
        for c in children(e):
            below = self.loads(c)
            if below:
                found = below if not found else {**found, **below}
        if type(e).__name__ == "BufferLoad":
            found = {**found, id(e.buffer): e}
        self.memo.loads[id(e)] = (e, found)
        return found

    def lanes(self, e) -> int:
        """The vector lanes of ``e`` (1: scalar), checking dtypes and lanes on the way (memoised)."""
        key = id(e)
        n = self.lanes_memo.get(key)
        if n is not None:
            return n
        kind = type(e).__name__
        if kind == "Var":
            n = self.let_lanes.get(key, 1)
        elif kind == "Const":
            n = 1
        elif kind == "Ramp":
            if self.lanes(e.base) != 1 or self.lanes(e.stride) != 1:
                raise _Fault(f"a ramp of vector base or stride: {expr_to_str(e)}")
            if not dtypes.is_int(e.base.dtype) or e.lanes < 1:
                raise _Fault(f"a ramp needs an integer base and at least one lane: {expr_to_str(e)}")
            n = e.lanes
        elif kind == "Broadcast":
            if self.lanes(e.value) != 1:
                raise _Fault(f"a broadcast of a vector: {expr_to_str(e)}")
            n = e.lanes
        elif kind == "BufferLoad":
            self.access(e.buffer, e.indices, e)
            n = max([self.lanes(i) for i in e.indices] or [1])
        elif kind in ("Binary", "Compare"):
            if e.op not in ("shl", "shr") and e.a.dtype != e.b.dtype:
                raise _Fault(f"operands of '{e.op}' have dtypes {e.a.dtype} and {e.b.dtype}: {expr_to_str(e)}")
            n = self.same_lanes(e, (e.a, e.b))
        elif kind == "Logical":
            operands = (e.a,) if e.b is None else (e.a, e.b)
            if any(x.dtype != dtypes.BOOL for x in operands):
                raise _Fault(f"a logical '{e.op}' of a non-bool operand: {expr_to_str(e)}")
            n = self.same_lanes(e, operands)
        elif kind == "Select":
            if e.condition.dtype != dtypes.BOOL:
                raise _Fault(f"a select on a {e.condition.dtype} condition: {expr_to_str(e)}")
            if e.true_value.dtype != e.false_value.dtype:
                raise _Fault(f"the branches of a select have dtypes {e.true_value.dtype} and "
                             f"{e.false_value.dtype}: {expr_to_str(e)}")
            n = self.same_lanes(e, (e.condition, e.true_value, e.false_value))
        elif kind == "Let":
            saved = self.set_let_lanes(e.var, self.lanes(e.value))
            n = self.lanes(e.body)
            self.set_let_lanes(e.var, saved)
        elif kind == "CheckedIndex":
            n = self.same_lanes(e, (e.value, e.extent))
        else:       # Cast, Call
            n = self.same_lanes(e, children(e))
        self.lanes_memo[key] = n
        return n

    def set_let_lanes(self, var, lanes: int) -> int:
        """Let ``var`` have ``lanes`` lanes from now on; returns what it had.  One variable may be bound
        in two sibling scopes (a loop and its partitioned tail), as a vector in one and a scalar in the
        other: the memoised lanes of the expressions that read it are then forgotten."""
        before = self.let_lanes.get(id(var), 1)
        if lanes != before:
            self.let_lanes[id(var)] = lanes
            self.lanes_memo.clear()
        return before

    def same_lanes(self, e, operands: Iterable) -> int:
        counts = {self.lanes(x) for x in operands} - {1}
        if len(counts) > 1:
            raise _Fault(f"vectors of {' and '.join(map(str, sorted(counts)))} lanes combined: {expr_to_str(e)}")
        return counts.pop() if counts else 1

    def expr(self, e, what: str) -> int:
        """Check ``e`` (scope, dtypes, lanes) and return its lanes."""
        free = self.free_vars(e)
        unbound = free - self.scope
        if unbound:
            names = sorted({v.name for v in _vars_with_ids(e, unbound)})
            raise _Fault(f"{what} reads {', '.join(names)}, bound by no enclosing loop, let or argument: "
                         f"{expr_to_str(e)}")
        if self.let_lanes and any(self.let_lanes.get(v, 1) != 1 for v in free):   # lanes set by this scope's lets
            return self.lanes(e)
        entry = self.checked.get(id(e))
        if entry is None:       # checked here whole, its loads included
            lanes = self.lanes(e)
            self.checked[id(e)] = (e, lanes)
            return lanes
        for load in self.loads(e).values():
            if id(load.buffer) not in self.buffers:
                self.access(load.buffer, load.indices, load)
        return entry[1]

    def scalar_int(self, e, what: str) -> None:
        if self.expr(e, what) != 1 or not dtypes.is_int(e.dtype):
            raise _Fault(f"{what} is not a scalar integer ({e.dtype}): {expr_to_str(e)}")

    def access(self, buffer, indices, node) -> None:
        name = buffer.name
        if id(buffer) not in self.buffers:
            raise _Fault(f"buffer '{name}' is accessed but is neither an argument nor allocated in an enclosing "
                         f"scope{' of the kernel' if self.in_kernel else ''}: {expr_to_str(node) if hasattr(node, 'dtype') else _short(node)}")
        if self.flattened:
            if len(indices) != 1:
                raise _Fault(f"buffer '{name}' is accessed with {len(indices)} indices after storage_flatten")
            if buffer.strides is None:
                raise _Fault(f"buffer '{name}' has no strides after storage_flatten")
        elif len(indices) != len(buffer.shape) and not (len(indices) == 1 and buffer.strides is not None):
            raise _Fault(f"buffer '{name}' of {len(buffer.shape)} dimensions is accessed with {len(indices)} "
                         f"indices")
        for index in indices:
            if not dtypes.is_int(index.dtype):
                raise _Fault(f"an index of '{name}' is {index.dtype}: {expr_to_str(index)}")

    # ------------------------------------------------------------------ statements
    def bind(self, var, what: str) -> None:
        if id(var) in self.scope:
            raise _Fault(f"{what} binds '{var.name}', which an enclosing scope binds already")
        self.scope.add(id(var))

    def stmt(self, s) -> None:
        kind = type(s).__name__
        if kind == "Seq":
            for c in s.stmts:
                self.stmt(c)
        elif kind == "For":
            self.scalar_int(s.min, f"the min of loop '{s.var.name}'")
            self.scalar_int(s.extent, f"the extent of loop '{s.var.name}'")
            if not dtypes.is_int(s.var.dtype):
                raise _Fault(f"loop variable '{s.var.name}' is {s.var.dtype}")
            if s.kind not in ("serial", "parallel", "vectorized", "unrolled", "thread"):
                raise _Fault(f"loop '{s.var.name}' has the unknown kind {s.kind!r}")
            self.bind(s.var, f"loop '{s.var.name}'")
            self.stmt(s.body)
            self.scope.discard(id(s.var))
        elif kind == "LetStmt":
            lanes = self.expr(s.value, f"the value of let '{s.var.name}'")
            if s.var.dtype != s.value.dtype:
                raise _Fault(f"let '{s.var.name}' of dtype {s.var.dtype} binds a {s.value.dtype} value")
            self.bind(s.var, f"let '{s.var.name}'")
            saved = self.set_let_lanes(s.var, lanes)     # vectorize keeps a let of its loop's lanes
            self.stmt(s.body)
            self.set_let_lanes(s.var, saved)
            self.scope.discard(id(s.var))
        elif kind == "IfThenElse":
            self.expr(s.condition, "a condition")
            if s.condition.dtype != dtypes.BOOL:
                raise _Fault(f"an if on a {s.condition.dtype} condition: {expr_to_str(s.condition)}")
            self.stmt(s.then_case)
            if s.else_case is not None:
                self.stmt(s.else_case)
        elif kind == "Allocate":
            self.scalar_int(s.extent, f"the extent of buffer '{s.buffer.name}'")
            if id(s.buffer) in self.buffers:
                raise _Fault(f"buffer '{s.buffer.name}' is allocated inside a scope that has it already")
            if self.flattened and s.buffer.strides is None:
                raise _Fault(f"buffer '{s.buffer.name}' has no strides after storage_flatten")
            self.buffers.add(id(s.buffer))
            self.stmt(s.body)
            self.buffers.discard(id(s.buffer))
        elif kind == "BufferStore":
            self.access(s.buffer, s.indices, s)
            index_lanes = max([self.expr(i, f"an index of '{s.buffer.name}'") for i in s.indices] or [1])
            value_lanes = self.expr(s.value, f"the value stored to '{s.buffer.name}'")
            if s.value.dtype != s.buffer.dtype:
                raise _Fault(f"a {s.value.dtype} value is stored to the {s.buffer.dtype} buffer "
                             f"'{s.buffer.name}': {_short(s)}")
            if value_lanes not in (1, index_lanes):
                raise _Fault(f"a vector of {value_lanes} lanes is stored at {index_lanes} "
                             f"index{'es' if index_lanes > 1 else ''} of '{s.buffer.name}': {_short(s)}")
        elif kind == "Evaluate":
            self.expr(s.value, "an evaluated expression")
        elif kind == "KernelLaunch":
            self.kernel(s)
        else:
            raise _Fault(f"unknown statement {kind}")

    def kernel(self, k) -> None:
        if self.in_kernel:
            raise _Fault(f"kernel '{k.name}' is launched inside another kernel")
        for e in tuple(k.grid) + tuple(k.block):
            self.scalar_int(e, f"a launch extent of kernel '{k.name}'")
        for b in k.params:
            if id(b) not in self.buffers:
                raise _Fault(f"kernel '{k.name}' takes buffer '{b.name}', which the host has not")
        for v in k.scalars:
            if id(v) not in self.scope:
                raise _Fault(f"kernel '{k.name}' takes scalar '{v.name}', which the host has not")
        saved = (self.scope, self.buffers)
        self.scope = set(self.size_vars) | {id(v) for v in k.scalars}
        self.buffers = {id(b) for b in k.params}
        self.in_kernel = True
        try:
            self.stmt(k.body)
        finally:
            self.scope, self.buffers = saved
            self.in_kernel = False


def _vars_with_ids(e, ids) -> list:
    return [v for v in collect_vars(e) if id(v) in ids]


# ---------------------------------------------------------------------- what each pass guarantees
def _walk_stmts(s, visit, host: bool = True) -> None:
    """``visit(stmt, on_host)`` on every statement, parents first."""
    visit(s, host)
    kind = type(s).__name__
    if kind == "Seq":
        for c in s.stmts:
            _walk_stmts(c, visit, host)
    elif kind == "IfThenElse":
        _walk_stmts(s.then_case, visit, host)
        if s.else_case is not None:
            _walk_stmts(s.else_case, visit, host)
    elif kind == "KernelLaunch":
        _walk_stmts(s.body, visit, False)
    elif hasattr(s, "body"):
        _walk_stmts(s.body, visit, host)


def _no_loop_kind(kind: str, also=lambda s: True):
    def check(s, host):
        if type(s).__name__ == "For" and s.kind == kind and also(s):
            raise _Fault(f"{'an' if kind[0] in 'aeiou' else 'a'} {kind} loop '{s.var.name}' is left")
    return check


def _small_unrolled(s) -> bool:
    return type(s.extent).__name__ == "Const" and s.extent.value <= MAX_UNROLL


def _no_noops(s, host):
    kind = type(s).__name__
    if kind == "For" and type(s.extent).__name__ == "Const" and s.extent.value <= 0:
        raise _Fault(f"loop '{s.var.name}' of extent {s.extent.value} is left")
    if kind == "IfThenElse" and type(s.condition).__name__ == "Const":
        raise _Fault(f"an if on the constant {s.condition.value} is left")


def _no_constant_ifs(s, host):
    if type(s).__name__ == "IfThenElse" and type(s.condition).__name__ == "Const":
        raise _Fault(f"an if on the constant {s.condition.value} is left")


def _no_warp_buffers(s, host):
    if type(s).__name__ == "Allocate" and s.buffer.scope == "warp":
        raise _Fault(f"the warp buffer '{s.buffer.name}' is left")


def _no_host_loops(s, host):
    if host and type(s).__name__ == "For":
        raise _Fault(f"loop '{s.var.name}' runs on the host, outside any kernel")


#: pass name -> the check of (part of) what it guarantees, on each statement
AFTER = {
    "simplify": _no_constant_ifs,
    "simplify_flat": _no_constant_ifs,
    "simplify_unrolled": _no_constant_ifs,
    "vectorize": _no_loop_kind("vectorized"),
    "unroll": _no_loop_kind("unrolled", _small_unrolled),
    "remove_noops": _no_noops,
    "distribute_warp_tiles": _no_warp_buffers,
    "split_host_device": _no_host_loops,
}


def verify(func, after: Optional[str] = None, passes_done: Iterable[str] = (),
           memo: Optional[VerifyMemo] = None) -> None:
    """Raise InternalError if ``func`` breaks an invariant of the loop IR.

    ``after`` names the pass just run (for the message and its own guarantees);
    ``passes_done`` the passes run so far (``storage_flatten`` among them: flat accesses);
    ``memo``: one ``VerifyMemo`` for the checks after each pass of one lowering.
    """
    done = set(passes_done) | ({after} if after else set())
    try:
        _Verifier(func, "storage_flatten" in done, memo).stmt(func.body)
        check = AFTER.get(after)
        if check is not None:
            _walk_stmts(func.body, check)
    except _Fault as fault:
        where = f"after pass '{after}'" if after else "in the loop IR"
        raise InternalError(f"invalid loop IR {where} of '{func.name}': {fault}") from None
