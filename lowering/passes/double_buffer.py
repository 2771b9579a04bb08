"""double_buffer: overlap the next tile's global loads with this tile's arithmetic (GPU).

Before: lowered loop IR for target ``cuda`` (after remove_noops, before
split_host_device and insert_syncs).  Each shared buffer marked with
``Stage.double_buffer()`` is allocated directly inside a serial loop ``k`` (its stage is
computed at ``k``, typically a reduction's outer loop), where the loop's statements,
once those allocations are set aside, open with one copy nest per marked buffer (serial
loops of constant extent and thread-bound loops around a single store whose value reads
no shared memory) and go on with statements that read the buffers and write no shared
memory.
After::

    allocate buf[2 * size] (shared), buf.prefetch[n] (local)   for each marked buffer
    buf[slot 0] = <the copy for k = min>                      # insert_syncs fences it
    for k in ...:                          # annotated ("double_buffered", True)
        if k + 1 < end: buf.prefetch = <the global loads for k + 1>
        <the statements>, reading slot (k - min) % 2
        if k + 1 < end: buf[slot (k + 1 - min) % 2] = buf.prefetch
        __syncthreads()

The loads of the next tile are in flight while the arithmetic runs, and one barrier per
iteration suffices: the slot written at the end of iteration k was last read in
iteration k - 1, which every thread finished before that iteration's barrier, and the
barrier ending iteration k publishes it to iteration k + 1.  insert_syncs leaves the
annotated loop alone.  A marked buffer in any other shape raises LoweringError naming it
and what to change.

A buffer marked asynchronous (``ctx.double_buffers[name]`` true) is filled by ``cp.async`` instead, from
global to shared memory without registers (its copy must store a plain global load)::

    buf[slot 0] <- async copy for k = min; commit
    for k in ...:
        if k + 1 < end: buf[slot (k + 1 - min) % 2] <- async copy for k + 1
        commit; wait until all but the newest group landed; __syncthreads()
        <the statements>, reading slot (k - min) % 2
        __syncthreads()        # before the next iteration refills the slot just read

Contiguous 16-byte pieces (a float4 copy whose addresses are provably multiples of 16
bytes) go in one instruction, anything else element by element (4 or 8 bytes).
"""
from __future__ import annotations

import math
from typing import Dict, List, Optional, Tuple

from ...dsl import dtypes
from ...dsl.arith import linear_form
from ...dsl.expr import Call, Const, Var, binary, compare, const
from ...dsl.visitor import Mutator, post_order_visit, substitute
from ...errors import LoweringError
from ..ir import Allocate, Buffer, BufferLoad, BufferStore, Evaluate, For, IfThenElse, LetStmt, Ramp, Seq, seq
from .insert_syncs import reads_shared, sync_threads, writes_shared

ANNOTATION = ("double_buffered", True)
CP_ASYNC = "cp_async"                 # Evaluate(Call(CP_ASYNC, (dst load, src load, bytes))): the loads are addresses
CP_ASYNC_COMMIT = "cp_async_commit"   # Evaluate(Call(CP_ASYNC_COMMIT, ())): close a group of copies
CP_ASYNC_WAIT = "cp_async_wait"       # Evaluate(Call(CP_ASYNC_WAIT, (n,))): all but the newest n groups landed


def _multiple_of(index, n: int) -> bool:
    form = linear_form(index)
    return form is not None and form[1] % n == 0 and all(c % n == 0 for c in form[0].values())


def async_op(name: str, *args) -> Evaluate:
    return Evaluate(Call(name, tuple(args), "int32"))


def _fail(buffer_name: str, message: str, fix: str) -> LoweringError:
    return LoweringError(f"double_buffer on '{buffer_name}': {message}\n  fix: {fix}")


def _shifted(index, offset):
    """``index + offset`` for a scalar or a Ramp index."""
    if isinstance(index, Ramp):
        return Ramp(binary("add", index.base, offset), index.stride, index.lanes)
    return binary("add", index, offset)


def _lanes(index) -> int:
    return index.lanes if isinstance(index, Ramp) else 1


class _Copy:
    """One marked buffer's copy nest, split into its global loads and its shared store."""

    def __init__(self, buffer: Buffer, nest):
        self.buffer = buffer
        self.serial: List[Tuple[Var, int, int]] = []     # (var, min, extent) of the nest's serial loops
        self.store: Optional[BufferStore] = None
        self._walk(nest)
        self.nest = nest
        self.lanes = _lanes(self.store.indices[0])
        self.registers = math.prod(extent for _, _, extent in self.serial) * self.lanes

    def _walk(self, s) -> None:
        name = self.buffer.name
        if isinstance(s, For):
            if s.kind != "thread":
                if not (isinstance(s.min, Const) and isinstance(s.extent, Const)):
                    raise _fail(name, f"its copy loop '{s.var.name}' has a non-constant range, so the registers "
                                      f"that carry the next tile have no fixed size",
                                "split the copy's axes by constant factors")
                self.serial.append((s.var, int(s.min.value), int(s.extent.value)))
            self._walk(s.body)
        elif isinstance(s, (IfThenElse, LetStmt)):
            if isinstance(s, IfThenElse) and s.else_case is not None:
                raise _fail(name, "its copy has an if/else", "keep the copy a plain (guarded) store")
            self._walk(s.then_case if isinstance(s, IfThenElse) else s.body)
        elif isinstance(s, BufferStore) and s.buffer is self.buffer and self.store is None:
            if reads_shared(s.value):
                raise _fail(name, "its copy reads shared memory", "fill it from global memory")
            self.store = s
        else:
            raise _fail(name, f"its copy is not one loop nest around a single store (found {type(s).__name__})",
                        "schedule the cache_read stage as a plain copy (split/fuse/bind/vectorize only)")

    def _register_index(self, mapping):
        flat = const(0)
        for var, lo, extent in self.serial:
            flat = binary("add", binary("mul", flat, const(extent)), binary("sub", mapping.get(var, var), const(lo)))
        base = binary("mul", flat, const(self.lanes))
        return Ramp(base, const(1), self.lanes) if self.lanes > 1 else base

    def _rebuild(self, leaf_of, k: Var, k_value):
        """The nest with fresh loop variables, ``k`` replaced, and its store replaced by ``leaf_of(mapping)``."""
        mapping: Dict[Var, object] = {k: k_value}

        def build(s):
            if isinstance(s, For):
                fresh = Var(s.var.name, s.var.dtype)
                mapping[s.var] = fresh
                return For(fresh, s.min, s.extent, s.kind, build(s.body), s.annotations)
            if isinstance(s, IfThenElse):
                return IfThenElse(substitute(s.condition, mapping), build(s.then_case))
            if isinstance(s, LetStmt):
                fresh = Var(s.var.name, s.var.dtype)
                value = substitute(s.value, mapping)
                mapping[s.var] = fresh
                return LetStmt(fresh, value, build(s.body))
            return leaf_of(mapping)
        return build(self.nest)

    def direct(self, shared: Buffer, k: Var, k_value, slot_offset):
        st = self.store
        return self._rebuild(lambda m: BufferStore(shared, substitute(st.value, m),
                                                   (_shifted(substitute(st.indices[0], m), slot_offset),)),
                             k, k_value)

    def load_registers(self, registers: Buffer, k: Var, k_value):
        st = self.store
        return self._rebuild(lambda m: BufferStore(registers, substitute(st.value, m), (self._register_index(m),)),
                             k, k_value)

    def async_copy(self, shared: Buffer, k: Var, k_value, slot_offset):
        """The copy as cp.async instructions (16 bytes where provably aligned, else per element)."""
        st = self.store
        src = st.value
        if not (isinstance(src, BufferLoad) and src.buffer.scope == "global"
                and _lanes(src.indices[0]) == self.lanes and dtypes.itemsize(src.dtype) in (4, 8)
                and all(not isinstance(i, Ramp) or (isinstance(i.stride, Const) and i.stride.value == 1)
                        for i in (src.indices[0], st.indices[0]))):
            raise _fail(self.buffer.name, "an asynchronous copy must store a plain, contiguous load of global "
                                          "memory (4- or 8-byte elements), not a computed value",
                        "use double_buffer() without asynchronous=True for this stage")
        size = dtypes.itemsize(src.dtype)

        def leaf(m):
            dst_index = _shifted(substitute(st.indices[0], m), slot_offset)
            src_index = substitute(src.indices[0], m)
            dst_base = dst_index.base if isinstance(dst_index, Ramp) else dst_index
            src_base = src_index.base if isinstance(src_index, Ramp) else src_index
            whole = self.lanes * size == 16 and _multiple_of(dst_base, self.lanes) \
                and _multiple_of(src_base, self.lanes)
            pieces = [(0, 16)] if whole else [(lane, size) for lane in range(self.lanes)]
            return seq(*[async_op(CP_ASYNC, BufferLoad(shared, (binary("add", dst_base, const(lane)),)),
                                  BufferLoad(src.buffer, (binary("add", src_base, const(lane)),)), const(nbytes))
                         for lane, nbytes in pieces])
        return self._rebuild(leaf, k, k_value)

    def store_registers(self, registers: Buffer, shared: Buffer, k: Var, k_value, slot_offset):
        st = self.store
        return self._rebuild(lambda m: BufferStore(shared, BufferLoad(registers, (self._register_index(m),)),
                                                   (_shifted(substitute(st.indices[0], m), slot_offset),)),
                             k, k_value)


class _Reslot(Mutator):
    """Reads of the marked buffers go to the doubled buffers, at the current slot."""

    def __init__(self, doubled: Dict[int, Buffer], offsets: Dict[int, object]):
        self.doubled, self.offsets = doubled, offsets

    def visit_BufferLoad(self, node):
        node = self.generic_visit(node)
        new = self.doubled.get(id(node.buffer))
        if new is None:
            return node
        return BufferLoad(new, (_shifted(node.indices[0], self.offsets[id(node.buffer)]),))


def _flatten(body, is_marked, found: List[Allocate]) -> List:
    """The loop body's statements with the marked allocations set aside (into ``found``)."""
    if isinstance(body, Allocate) and is_marked(body.buffer):
        found.append(body)
        return _flatten(body.body, is_marked, found)
    if isinstance(body, Seq):
        out = []
        for s in body.stmts:
            out.extend(_flatten(s, is_marked, found))
        return out
    if isinstance(body, LetStmt):
        inner: List[Allocate] = []
        post_order_visit(body.body, lambda n: inner.append(n) if isinstance(n, Allocate) and is_marked(n.buffer)
                         else None)
        if inner:
            raise _fail(inner[0].buffer.name, f"its region depends on '{body.var.name}', which changes between "
                                              f"iterations (a partial tile at an edge), so the copies of two "
                                              f"iterations differ in shape",
                        "double-buffer only when the extents are multiples of the tiles and the k step "
                        "(as nn_ops' gemm schedule does), or drop double_buffer() for this shape")
    return [body]


def _stored_buffer(s):
    stores = []
    post_order_visit(s, lambda n: stores.append(n.buffer) if isinstance(n, BufferStore) else None)
    return stores[0] if len({id(b) for b in stores}) == 1 else None


class _DoubleBuffer(Mutator):
    def __init__(self, names):
        self.names = names      # stage name -> filled by cp.async
        self.done = set()
        self.doubled = set()     # ids of the buffers this pass made (their loops are done)

    def _is_marked(self, buffer) -> bool:
        return buffer.scope == "shared" and buffer.name in self.names and id(buffer) not in self.doubled

    def visit_For(self, node):
        node = self.generic_visit(node)
        found: List[Allocate] = []
        stmts = _flatten(node.body, self._is_marked, found)
        if not found:
            return node
        return self._pipeline(node, found, stmts)

    def _pipeline(self, loop: For, allocs: List[Allocate], stmts: List):
        names = ", ".join(a.buffer.name for a in allocs)
        if loop.kind != "serial":
            raise _fail(names, f"the loop '{loop.var.name}' it is computed in is {loop.kind}, not serial",
                        "compute the stage at a serial loop (a reduction's outer loop)")
        copies: Dict[int, _Copy] = {}
        k = 0
        while k < len(stmts) and len(copies) < len(allocs):
            target = _stored_buffer(stmts[k])
            if target is None or all(target is not a.buffer for a in allocs) or id(target) in copies:
                break
            copies[id(target)] = _Copy(target, stmts[k])
            k += 1
        missing = [a.buffer.name for a in allocs if id(a.buffer) not in copies]
        if missing:
            raise _fail(", ".join(missing), f"its copy does not open the body of loop '{loop.var.name}'",
                        "compute the stage at the loop whose iterations it feeds, before its readers")
        rest = stmts[k:]
        if any(writes_shared(s) for s in rest):
            raise _fail(names, f"loop '{loop.var.name}' also fills other shared memory, which would need barriers "
                               f"of its own inside the pipelined loop",
                        "call double_buffer() on every shared stage computed at this loop")
        for a in allocs:
            if not isinstance(a.extent, Const):
                raise _fail(a.buffer.name, "its size is not a constant", "split its axes by constant factors")
        kv = loop.var
        end = binary("add", loop.min, loop.extent)
        nxt = binary("add", kv, const(1))
        has_next = compare("lt", nxt, end)

        def slot(value):
            return binary("floormod", binary("sub", value, loop.min), const(2))

        staged = []     # per marked buffer: (old buffer, its copy, the doubled buffer, the registers, size)
        for a in allocs:
            size, copy = int(a.extent.value), copies[id(a.buffer)]
            staged.append((a.buffer, copy,
                           Buffer(a.buffer.name, (const(2 * size),), a.buffer.dtype, "shared", (const(1),)),
                           Buffer(a.buffer.name + ".prefetch", (const(copy.registers),), a.buffer.dtype, "local",
                                  (const(1),)),
                           size))
        reslot = _Reslot({id(old): new for old, _, new, _, _ in staged},
                         {id(old): binary("mul", slot(kv), const(size)) for old, _, _, _, size in staged})
        kinds = {self.names[a.buffer.name] for a in allocs}
        if len(kinds) > 1:
            raise _fail(names, f"the shared stages computed at loop '{loop.var.name}' mix asynchronous and "
                               f"register double buffering", "mark all of them the same way")
        if kinds == {True}:
            return self._pipeline_async(loop, staged, reslot, rest, slot, has_next, nxt)
        prologue = seq(*[copy.direct(new, kv, loop.min, const(0)) for _, copy, new, _, _ in staged])
        prefetch = seq(*[copy.load_registers(regs, kv, nxt) for _, copy, _, regs, _ in staged])
        publish = seq(*[copy.store_registers(regs, new, kv, nxt, binary("mul", slot(nxt), const(size)))
                        for _, copy, new, regs, size in staged])
        body = seq(IfThenElse(has_next, prefetch), *[reslot.visit(s) for s in rest],
                   IfThenElse(has_next, publish), sync_threads())
        result = seq(prologue, For(kv, loop.min, loop.extent, loop.kind, body, loop.annotations + (ANNOTATION,)))
        for old, copy, new, regs, _ in reversed(staged):
            result = Allocate(new, new.shape[0], Allocate(regs, const(copy.registers), result))
            self.done.add(old.name)
            self.doubled.add(id(new))
        return result

    def _pipeline_async(self, loop: For, staged, reslot, rest, slot, has_next, nxt):
        kv = loop.var
        prologue = seq(*[copy.async_copy(new, kv, loop.min, const(0)) for _, copy, new, _, _ in staged],
                       async_op(CP_ASYNC_COMMIT))
        fetch = seq(*[copy.async_copy(new, kv, nxt, binary("mul", slot(nxt), const(size)))
                      for _, copy, new, _, size in staged])
        body = seq(IfThenElse(has_next, fetch), async_op(CP_ASYNC_COMMIT), async_op(CP_ASYNC_WAIT, const(1)),
                   sync_threads(), *[reslot.visit(s) for s in rest], sync_threads())
        result = seq(prologue, For(kv, loop.min, loop.extent, loop.kind, body, loop.annotations + (ANNOTATION,)))
        for old, _, new, _, _ in reversed(staged):
            result = Allocate(new, new.shape[0], result)
            self.done.add(old.name)
            self.doubled.add(id(new))
        return result


def double_buffer(stmt, ctx):
    names = ctx.double_buffers
    if not names:
        return stmt
    pass_ = _DoubleBuffer(names)
    result = pass_.visit(stmt)
    never = sorted(set(names) - pass_.done)
    if never:
        raise _fail(", ".join(never), "no serial loop allocates it directly, so there is no next iteration to "
                                      "fill it for",
                    "compute the stage inside the loop whose iterations it feeds (e.g. the reduction's outer loop)")
    return result
