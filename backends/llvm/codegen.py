"""Loop IR -> LLVM IR with llvmlite.ir.

Accepts a PrimFunc after the lowering pipeline: flat (1-d) buffer indices, vector
expressions (Ramp/Broadcast) where loops were vectorized, For kinds serial / parallel
/ unrolled.  Emits one entry ``void NAME(ptr buffers, ptr sizes, ptr err)`` whose
arguments are an array of buffer pointers, an array of int64 sizes and the call's
error slot (``ERROR_SLOT_WORDS`` int64s, zero on entry): a ``CheckedIndex`` that fails
writes the first bad index there (``_index_error``) and the runtime raises after the call.  Parallel loops are
outlined into ``void body(i64 begin, i64 end, ptr closure)`` functions run by
``lw_parallel_for`` (the native thread pool); the closure holds every value in scope.
Float ``a * b + c`` becomes ``llvm.fmuladd`` so the backend emits FMA.
"""
from __future__ import annotations

from contextlib import contextmanager
from functools import lru_cache
from typing import Dict, List

from llvmlite import ir

from ...dsl import dtypes
from ...dsl.bitwise import NAMES as BITWISE_NAMES
from ...dsl.expr import Binary, Call, Cast, CheckedIndex, Compare, Const, Expr, Let, Logical, Select, Var
from ...dsl.visitor import children, collect_vars, post_order_visit
from ...errors import InternalError
from ...lowering.ir import (Allocate, Broadcast, BufferLoad, BufferStore, Evaluate, For, IfThenElse, LetStmt,
                            PrimFunc, Ramp, Seq)
from .thread_pool import BODY_TYPE
from .transpose import row_ramps, transpose_vectors, transposed_loads
from .vector_math import VECTOR_MATH

I1, I8, I32, I64 = ir.IntType(1), ir.IntType(8), ir.IntType(32), ir.IntType(64)
PTR = ir.PointerType()
STACK_LIMIT_BYTES = 64 * 1024
#: a parallel loop's pragma: its iterations run on the calling thread where its extent is below the value
SERIAL_BELOW = "serial_below"
ERR_KEY = "lw.err"            # the scope key of the error slot pointer (scope keys are otherwise id(Var))
ERROR_SLOT_WORDS = 4         # int64s: message pointer (0: no error), bad index, extent, network call index
MAX_SHUFFLE_STRIDE = 4       # strided vector loads up to this stride: wide load + shuffle (else a gather)

_SCALAR = {"float16": ir.HalfType(), "float32": ir.FloatType(), "float64": ir.DoubleType(),
           "int8": I8, "int16": ir.IntType(16), "int32": I32, "int64": I64, "uint8": I8,
           "uint16": ir.IntType(16), "uint32": I32, "uint64": I64, "bool": I1}
_LIBM = {"tanh": {"float32": "tanhf", "float64": "tanh"}, "erf": {"float32": "erff", "float64": "erf"}}
_FLOAT_INTRINSIC = {"exp": "llvm.exp", "log": "llvm.log", "sqrt": "llvm.sqrt", "floor": "llvm.floor",
                    "ceil": "llvm.ceil", "round": "llvm.roundeven", "abs": "llvm.fabs", "pow": "llvm.pow"}


def llvm_type(dtype: str, lanes: int = 1):
    scalar = _SCALAR[dtype]
    return scalar if lanes == 1 else ir.VectorType(scalar, lanes)


def memory_type(dtype: str):
    """Bools live in memory as bytes, like numpy's."""
    return I8 if dtype == "bool" else _SCALAR[dtype]


def _lanes(value) -> int:
    return value.type.count if isinstance(value.type, ir.VectorType) else 1


def _static_lanes(e) -> int:
    """The vector width an expression evaluates to (1 for scalars)."""
    widest = [1]
    post_order_visit(e, lambda n: widest.append(n.lanes) if isinstance(n, (Ramp, Broadcast)) else None)
    return max(widest)


def _contains_load(e) -> bool:
    hit = []
    post_order_visit(e, lambda n: hit.append(1) if isinstance(n, BufferLoad) else None)
    return bool(hit)


class _ValueNumbers:
    """One number per structurally different expression (Vars and buffers by identity, float
    constants by their text so -0.0 is not 0.0); each node is numbered once, so a lookup costs its
    own fields, not a hash of its whole subtree."""

    def __init__(self):
        self.table: Dict[tuple, int] = {}
        self.by_node: Dict[int, tuple] = {}     # id(node) -> (node, number); the node keeps its id taken

    def of(self, e) -> int:
        hit = self.by_node.get(id(e))
        if hit is not None:
            return hit[1]
        if isinstance(e, Var):
            key = (Var, id(e))
        else:
            key = (type(e),) + tuple(self._field(getattr(e, name)) for name in e._fields())
        number = self.table.setdefault(key, len(self.table))
        self.by_node[id(e)] = (e, number)
        return number

    def _field(self, value):
        if isinstance(value, Expr):
            return (Expr, self.of(value))
        if isinstance(value, tuple):
            return tuple(self._field(v) for v in value)
        if isinstance(value, float):
            return (float, repr(value))
        if value is None or isinstance(value, (bool, int, str)):
            return (type(value), value)
        return (object, id(value))


@lru_cache(maxsize=None)
def _lane_constant(elem, values: tuple) -> ir.Constant:
    """The vector constant of ``values``, one object per (type, values): llvmlite formats a constant
    once per object, and a broadcast's mask or a ramp's steps, made anew at each use, were most of
    the IR printing of a vectorized kernel."""
    return ir.Constant(ir.VectorType(elem, len(values)), list(values))


class FunctionEmitter:
    """Emits the body of one LLVM function (the entry or an outlined parallel body)."""

    def __init__(self, codegen: "CodeGen", function: ir.Function, scope: Dict[int, ir.Value],
                 buffer_ptrs: Dict[int, ir.Value]):
        self.cg = codegen
        self.function = function
        self.entry = function.append_basic_block("entry")
        self.builder = ir.IRBuilder(self.entry)
        self.scope = dict(scope)          # id(Var) -> value
        self.buffer_ptrs = dict(buffer_ptrs)  # id(Buffer) -> ptr
        self.masks: List[ir.Value] = []     # lane masks, innermost last (``_masked``)
        self.tile_masks: List[bool] = []    # per mask: a masked tail tile's (its stack buffers whole)
        self.stack_buffers = set()          # id(Buffer) of the buffers allocated on the stack here
        self.transposed: Dict[int, ir.Value] = {}     # id(BufferLoad) -> its value in this iteration
        self.free_at_exit: List[tuple] = []     # (workspace slot, buffer) to give back on return
        # index checks (expr_CheckedIndex): the fast body only ORs failures into ``check_flag``;
        # ``finish`` then runs ``replay`` (the body again, ``reporting``) to find and record the first
        self.check_flag = None
        self.reporting = False
        self.replay = None
        # inside a select whose branches read memory (``expr_Select``): value number -> the value
        # computed for it where it dominates the code being emitted, so a branch reuses what the
        # condition computed rather than emitting it again (a chain of selects doubles otherwise)
        self.known: Dict[int, ir.Value] | None = None
        self.numbers: _ValueNumbers | None = None

    # ------------------------------------------------------------ helpers
    def _alloca_in_entry(self, typ, count=None, name="", opaque=True):
        with self.builder.goto_entry_block():
            self.builder.position_at_start(self.entry)
            ptr = self.builder.alloca(typ, size=count, name=name)
            ptr.align = 64
        if opaque:
            ptr.type = PTR  # llvmlite checks stores against typed pointers; the IR text is the same
        return ptr

    def _broadcast(self, value, lanes: int):
        if lanes == 1 or isinstance(value.type, ir.VectorType):
            return value
        vec_t = ir.VectorType(value.type, lanes)
        undef = ir.Constant(vec_t, ir.Undefined)
        v = self.builder.insert_element(undef, value, ir.Constant(I32, 0))
        return self.builder.shuffle_vector(v, ir.Constant(vec_t, ir.Undefined), _lane_constant(I32, (0,) * lanes))

    def _match_lanes(self, a, b):
        la, lb = _lanes(a), _lanes(b)
        if la == lb:
            return a, b
        n = max(la, lb)
        return self._broadcast(a, n), self._broadcast(b, n)

    # ---------------------------------------------------------- statements
    def stmt(self, s):
        method = getattr(self, "stmt_" + type(s).__name__, None)
        if method is None:
            raise InternalError(f"the LLVM backend cannot emit {type(s).__name__}")
        method(s)

    def stmt_Seq(self, s: Seq):
        for c in s.stmts:
            self.stmt(c)

    def stmt_Evaluate(self, s: Evaluate):
        self.expr(s.value)

    def stmt_LetStmt(self, s: LetStmt):
        value = self.expr(s.value)
        with self._bound(s.var):
            self.scope[id(s.var)] = value
            self.stmt(s.body)

    def stmt_IfThenElse(self, s: IfThenElse):
        cond = self.expr(s.condition)
        if _lanes(cond) > 1:
            # a vector condition (``vectorize``'s masked tail): the body runs under a lane mask
            if s.else_case is not None:
                raise InternalError("an if-else with a vector condition")
            with self._masked(cond, tile=True):
                self.stmt(s.then_case)
            return
        if s.else_case is None:
            with self.builder.if_then(cond):
                self.stmt(s.then_case)
        else:
            with self.builder.if_else(cond) as (then, otherwise):
                with then:
                    self.stmt(s.then_case)
                with otherwise:
                    self.stmt(s.else_case)

    def stmt_Allocate(self, s: Allocate):
        buf = s.buffer
        elem = memory_type(buf.dtype)
        extent = s.extent
        nbytes = extent.value * dtypes.itemsize(buf.dtype) if isinstance(extent, Const) else None
        if nbytes is not None and nbytes <= STACK_LIMIT_BYTES:
            ptr = self._alloca_in_entry(ir.ArrayType(elem, max(1, extent.value)), name=buf.name)
            self.buffer_ptrs[id(buf)] = ptr
            self.stack_buffers.add(id(buf))
            self.stmt(s.body)
            self.stack_buffers.discard(id(buf))
            del self.buffer_ptrs[id(buf)]
            return
        if nbytes is not None:
            # a fixed size: allocate once per function call (not per loop iteration; a
            # parallel body gets one buffer per chunk) and free on return
            ptr = self._malloc_in_entry(nbytes, buf.name)
            self.buffer_ptrs[id(buf)] = ptr
            self.stmt(s.body)
            del self.buffer_ptrs[id(buf)]
            return
        # a run-time size: on the stack when it fits STACK_LIMIT_BYTES (released with the stack pointer
        # after the body), else from malloc.  A row buffer of symbolic length inside a row loop (a
        # softmax's exponentials) was one malloc and free per row: the zoo encoder's 512-row softmax
        # took twice the static kernel's time.
        b = self.builder
        count = self.expr(extent)
        size = b.mul(count, ir.Constant(I64, dtypes.itemsize(buf.dtype)))
        small = b.icmp_unsigned("<=", size, ir.Constant(I64, STACK_LIMIT_BYTES))
        saved = b.call(self.cg.intrinsic("llvm.stacksave.p0", PTR, []), [])
        with b.if_else(small, likely=True) as (on_stack, on_heap):
            with on_stack:
                stack_ptr = b.alloca(I8, size=size, name=buf.name)
                stack_ptr.align = 64
                stack_block = b.block
            with on_heap:
                heap_ptr = self._checked_malloc(b, size, buf.name)
                heap_block = b.block
        ptr = b.phi(PTR, name=buf.name)
        ptr.add_incoming(stack_ptr, stack_block)
        ptr.add_incoming(heap_ptr, heap_block)
        self.buffer_ptrs[id(buf)] = ptr
        self.stmt(s.body)
        del self.buffer_ptrs[id(buf)]
        b = self.builder
        with b.if_then(b.not_(small), likely=False):
            b.call(self.cg.runtime_fn("free"), [ptr])
        b.call(self.cg.intrinsic("llvm.stackrestore.p0", ir.VoidType(), [PTR]), [saved])

    def _checked_malloc(self, builder, size, name: str):
        ptr = builder.call(self.cg.runtime_fn("malloc"), [builder.add(size, ir.Constant(I64, 64))], name=name)
        with builder.if_then(builder.icmp_unsigned("==", ptr, ir.Constant(PTR, None)), likely=False):
            builder.call(self.cg.runtime_fn("abort"), [])
        return ptr

    def _malloc_in_entry(self, nbytes: int, name: str):
        """A fixed-size buffer for this call, taken at the top of the function from its
        allocation site's cache slot (``CodeGen.workspace_slot``); ``finish`` puts it back."""
        slot = self.cg.workspace_slot(name)
        with self.builder.goto_entry_block():
            self.builder.position_at_start(self.entry)
            ptr = self.builder.call(self.cg.workspace_fn("take"), [slot, ir.Constant(I64, nbytes + 64)], name=name)
        self.free_at_exit.append((slot, ptr))
        return ptr

    def finish(self):
        """Replay the body to report a failed index check (if one failed), give the
        function-lifetime buffers back and return."""
        if self.check_flag is not None and self.replay is not None:
            b = self.builder
            failed = b.icmp_unsigned("!=", b.load(self.check_flag, typ=I8), ir.Constant(I8, 0))
            with b.if_then(failed, likely=False):
                self.reporting = True
                self.replay()
                self.reporting = False
        for slot, ptr in self.free_at_exit:
            self.builder.call(self.cg.workspace_fn("give"), [slot, ptr])
        self.builder.ret_void()

    def stmt_BufferStore(self, s: BufferStore):
        value = self.expr(s.value)
        index = s.indices[0]
        buf = s.buffer
        base = self.buffer_ptrs[id(buf)]
        if buf.dtype == "bool":
            value = self.builder.zext(value, ir.VectorType(I8, _lanes(value)) if _lanes(value) > 1 else I8)
        idx = None if isinstance(index, Ramp) else self.expr(index)
        if isinstance(index, Ramp) or _lanes(idx) > 1:
            # a contiguous Ramp is one vector store; any other vector index (a strided Ramp,
            # or an index the vectorizer could not fold into a Ramp) stores lane by lane
            lanes = index.lanes if isinstance(index, Ramp) else _lanes(idx)
            value = self._broadcast(value, lanes)
            mask = self.masks[-1] if self.masks and _lanes(self.masks[-1]) == lanes else None
            whole = mask is not None and self._whole(buf)
            align = dtypes.itemsize(buf.dtype)
            if isinstance(index, Ramp) and isinstance(index.stride, Const) and index.stride.value == 1:
                ptr = self.builder.gep(base, [self.expr(index.base)], inbounds=True, source_etype=memory_type(buf.dtype))
                if whole:
                    # written whole, masked-off lanes keep their value: the tile can stay in registers
                    old = self.builder.load(ptr, typ=value.type)
                    old.align = align
                    value = self.builder.select(mask, value, old)
                elif mask is not None:
                    fn = self.cg.intrinsic(f"llvm.masked.store.v{lanes}{_suffix(value.type.element)}.p0",
                                           ir.VoidType(), [value.type, PTR, I32, mask.type])
                    self.builder.call(fn, [value, ptr, ir.Constant(I32, align), mask])
                    return
                self.builder.store(value, ptr).align = align
                return
            if idx is None:
                idx = self.expr(index)
            for lane in range(lanes):
                k = ir.Constant(I32, lane)
                i = self.builder.extract_element(idx, k)
                v = self.builder.extract_element(value, k)
                ptr = self.builder.gep(base, [i], inbounds=True, source_etype=memory_type(buf.dtype))
                if mask is None:
                    self.builder.store(v, ptr).align = align
                else:
                    with self.builder.if_then(self.builder.extract_element(mask, k)):
                        self.builder.store(v, ptr).align = align
            return
        ptr = self.builder.gep(base, [idx], inbounds=True, source_etype=memory_type(buf.dtype))
        self.builder.store(value, ptr).align = dtypes.itemsize(buf.dtype)

    def stmt_For(self, s: For):
        if s.kind == "parallel":
            self.cg.emit_parallel(self, s)
            return
        loads = None if self.masks else transposed_loads(s)     # (under a lane mask rows may not exist)
        if loads and self._emit_transposed(s, loads):
            return
        lo = self.expr(s.min)
        hi = self.builder.add(lo, self.expr(s.extent))
        self.emit_loop(s.var, lo, hi, s.body, s.kind)

    def _emit_transposed(self, s: For, loads) -> bool:
        """The loop ``s`` unrolled, its strided ``loads`` read as the columns of their tiles' rows
        (``transpose.py``); False (nothing emitted) where a row's address uses a value the body defines."""
        blocks = {id(load): row_ramps(load, s) for load in loads}
        if any(id(v) not in self.scope for rows in blocks.values() for ramp in rows[0] for v in collect_vars(ramp)):
            return False
        columns = {}
        for load in loads:
            cols = columns.setdefault(id(load), [])
            for rows in blocks[id(load)]:
                cols.extend(transpose_vectors(self.builder, [self.expr(BufferLoad(load.buffer, (r,))) for r in rows]))
        outer = self.transposed
        with self._bound(s.var):
            for i in range(s.extent.value):
                self.scope[id(s.var)] = ir.Constant(I64, i)
                self.transposed = {**outer, **{k: cols[i] for k, cols in columns.items()}}
                self.stmt(s.body)
        self.transposed = outer
        return True

    def emit_loop(self, var: Var, lo, hi, body, kind: str):
        b = self.builder
        pre = b.block
        header = b.append_basic_block(f"{var.name}.header")
        body_bb = b.append_basic_block(f"{var.name}.body")
        exit_bb = b.append_basic_block(f"{var.name}.exit")
        b.branch(header)
        b.position_at_end(header)
        phi = b.phi(I64, name=var.name)
        phi.add_incoming(lo, pre)
        b.cbranch(b.icmp_signed("<", phi, hi), body_bb, exit_bb)
        b.position_at_end(body_bb)
        with self._bound(var):
            self.scope[id(var)] = phi
            self.stmt(body)
        nxt = b.add(phi, ir.Constant(I64, 1), flags=("nsw",))
        latch = b.block
        b.branch(header)  # loops the unroll pass could not expand are left to LLVM's unroller
        phi.add_incoming(nxt, latch)
        b.position_at_end(exit_bb)

    # --------------------------------------------------------- expressions
    def expr(self, e):
        method = getattr(self, "expr_" + type(e).__name__, None)
        if method is None:
            raise InternalError(f"the LLVM backend cannot emit expression {type(e).__name__}")
        if self.known is None or isinstance(e, (Const, Var)):
            return method(e)
        number = self.numbers.of(e)
        value = self.known.get(number)
        if value is None:
            value = self.known[number] = method(e)
        return value

    @contextmanager
    def _branch(self):
        """A region that not all paths run (a select's branch, a lane mask, a let's body): what it
        computes first is forgotten after it, what was known before stays known in it."""
        saved = self.known
        if saved is not None:
            self.known = dict(saved)
        try:
            yield
        finally:
            self.known = saved

    def expr_Var(self, e: Var):
        value = self.scope.get(id(e))
        if value is None:
            raise InternalError(f"variable '{e.name}' is used outside the scope that defines it")
        return value

    def expr_Const(self, e: Const):
        t = _SCALAR[e.dtype]
        if e.dtype == "bool":
            return ir.Constant(I1, int(bool(e.value)))
        if dtypes.is_float(e.dtype):
            return ir.Constant(t, float(e.value))
        return ir.Constant(t, int(e.value) & ((1 << dtypes.bits(e.dtype)) - 1))

    def expr_Ramp(self, e: Ramp):
        base = self.expr(e.base)
        stride = self.expr(e.stride)
        vec = self._broadcast(base, e.lanes)
        steps = _lane_constant(I64, tuple(range(e.lanes)))
        return self.builder.add(vec, self.builder.mul(self._broadcast(stride, e.lanes), steps))

    def expr_Broadcast(self, e: Broadcast):
        return self._broadcast(self.expr(e.value), e.lanes)

    def expr_Let(self, e: Let):
        value = self.expr(e.value)
        rebinds = id(e.var) in self.scope
        with self._bound(e.var), self._branch():
            if rebinds:             # values known under the outer binding are not the body's
                self.known = None
            self.scope[id(e.var)] = value
            return self.expr(e.body)

    def expr_CheckedIndex(self, e: CheckedIndex):
        """One compare per index; a bad one (outside ``[0, extent)`` after wrapping) is replaced
        by 0, so no memory outside the tensor is read.

        The body as run only ORs the failures into a flag (branch-free, so LLVM still
        vectorizes the loop); when the flag is set, ``finish`` runs the body again in
        ``reporting`` mode, where a failing check records its index in the error slot on a
        cold path (``_index_error``: the first one in iteration order wins).  Kernels are
        pure functions of their inputs, so running the body twice on the error path is safe."""
        b = self.builder
        raw, n = self._match_lanes(self.expr(e.value), self.expr(e.extent))
        lanes = _lanes(raw)
        value = raw
        if e.wrap:
            value = b.select(b.icmp_signed("<", raw, _splat_const(raw.type, 0)), b.add(raw, n), raw)
        bad = b.icmp_unsigned(">=", value, n)
        mask = self.masks[-1] if self.masks else None
        if mask is not None and _lanes(mask) == lanes:
            bad = b.and_(bad, mask)       # lanes a masked select does not use read nothing
        if lanes == 1:
            any_bad = bad
        else:
            reduce_or = self.cg.intrinsic(f"llvm.vector.reduce.or.v{lanes}i1", I1, [ir.VectorType(I1, lanes)])
            any_bad = b.call(reduce_or, [bad])
        if not self.reporting and self.replay is not None:
            if self.check_flag is None:
                with b.goto_entry_block():
                    b.position_at_start(self.entry)
                    self.check_flag = b.alloca(I8, name="index_check_failed")
                    b.store(ir.Constant(I8, 0), self.check_flag)
            b.store(b.or_(b.load(self.check_flag, typ=I8), b.zext(any_bad, I8)), self.check_flag)
            return b.select(bad, _splat_const(value.type, 0), value)
        message = self.cg.check_message(("1" if e.wrap else "0") + e.what)
        report = self.cg.index_error_fn()
        err = self.scope[ERR_KEY]
        with b.if_then(any_bad, likely=False):
            if lanes == 1:
                b.call(report, [err, raw, n, message])
            else:
                for lane in range(lanes):
                    k = ir.Constant(I32, lane)
                    with b.if_then(b.extract_element(bad, k), likely=False):
                        b.call(report, [err, b.extract_element(raw, k), b.extract_element(n, k), message])
        return b.select(bad, _splat_const(value.type, 0), value)

    def _strided_load(self, base, elem, align: int, start, lanes: int, stride: int):
        """``lanes`` elements ``stride`` apart: one wide load and a shuffle instead of a gather.

        The wide load covers ``lanes * stride`` elements with the trailing ``stride - 1``
        masked off, so it touches exactly the elements a gather would span (no read past
        the last one); AVX-512 does the masked load at full speed.
        """
        wide = lanes * stride
        wide_t = ir.VectorType(elem, wide)
        ptr = self.builder.gep(base, [start], inbounds=True, source_etype=elem)
        mask = ir.Constant(ir.VectorType(I1, wide), [1] * (wide - stride + 1) + [0] * (stride - 1))
        fn = self.cg.intrinsic(f"llvm.masked.load.v{wide}{_suffix(elem)}.p0", wide_t,
                               [PTR, I32, ir.VectorType(I1, wide), wide_t])
        loaded = self.builder.call(fn, [ptr, ir.Constant(I32, align), mask, ir.Constant(wide_t, None)])
        picks = ir.Constant(ir.VectorType(I32, lanes), [k * stride for k in range(lanes)])
        return self.builder.shuffle_vector(loaded, ir.Constant(wide_t, ir.Undefined), picks)

    def expr_BufferLoad(self, e: BufferLoad):
        if id(e) in self.transposed:
            return self.transposed[id(e)]
        buf = e.buffer
        base = self.buffer_ptrs[id(buf)]
        elem = memory_type(buf.dtype)
        align = dtypes.itemsize(buf.dtype)
        index = e.indices[0]
        mask = self.masks[-1] if self.masks else None
        if isinstance(index, Ramp):
            lanes = index.lanes
            vec_t = ir.VectorType(elem, lanes)
            if isinstance(index.stride, Const) and index.stride.value == 1:
                ptr = self.builder.gep(base, [self.expr(index.base)], inbounds=True, source_etype=elem)
                if mask is not None and _lanes(mask) == lanes and not self._whole(buf):
                    fn = self.cg.intrinsic(f"llvm.masked.load.v{lanes}{_suffix(elem)}.p0", vec_t,
                                           [PTR, I32, ir.VectorType(I1, lanes), vec_t])
                    value = self.builder.call(fn, [ptr, ir.Constant(I32, align), mask, ir.Constant(vec_t, None)])
                else:
                    value = self.builder.load(ptr, typ=vec_t)
                    value.align = align
            elif isinstance(index.stride, Const) and 2 <= index.stride.value <= MAX_SHUFFLE_STRIDE and mask is None:
                value = self._strided_load(base, elem, align, self.expr(index.base), lanes, index.stride.value)
            else:
                ptrs = self.builder.gep(base, [self.expr(index)], inbounds=True, source_etype=elem)
                ptrs.type = ir.VectorType(PTR, lanes)  # llvmlite types a vector GEP as scalar
                m = mask if mask is not None and _lanes(mask) == lanes else \
                    ir.Constant(ir.VectorType(I1, lanes), [1] * lanes)
                fn = self.cg.intrinsic(f"llvm.masked.gather.v{lanes}{_suffix(elem)}.v{lanes}p0", vec_t,
                                       [ir.VectorType(PTR, lanes), I32, ir.VectorType(I1, lanes), vec_t])
                value = self.builder.call(fn, [ptrs, ir.Constant(I32, align), m, ir.Constant(vec_t, None)])
        else:
            idx = self.expr(index)
            ptr = self.builder.gep(base, [idx], inbounds=True, source_etype=elem)
            if _lanes(idx) > 1:
                lanes = _lanes(idx)
                ptr.type = ir.VectorType(PTR, lanes)
                vec_t = ir.VectorType(elem, lanes)
                m = mask if mask is not None and _lanes(mask) == lanes else \
                    ir.Constant(ir.VectorType(I1, lanes), [1] * lanes)
                fn = self.cg.intrinsic(f"llvm.masked.gather.v{lanes}{_suffix(elem)}.v{lanes}p0", vec_t,
                                       [ir.VectorType(PTR, lanes), I32, ir.VectorType(I1, lanes), vec_t])
                value = self.builder.call(fn, [ptr, ir.Constant(I32, align), m, ir.Constant(vec_t, None)])
            else:
                value = self.builder.load(ptr, typ=elem)
                value.align = align
        if buf.dtype == "bool":
            zero = ir.Constant(value.type, None)
            value = self.builder.icmp_unsigned("!=", value, zero)
        return value

    def expr_Binary(self, e: Binary):
        dt = e.dtype
        b = self.builder
        if e.op == "add" and dt == "int32":
            for dot, other in ((e.a, e.b), (e.b, e.a)):
                if isinstance(dot, Call) and dot.name == "dot4_u8s8":   # the accumulator of a vpdpbusd
                    return self._dot4_u8s8(*[self.expr(x) for x in (*dot.args, other)])
        if e.op == "add" and dtypes.is_float(dt) and self.cg.target.has_fma:
            for mul, other in ((e.a, e.b), (e.b, e.a)):
                if isinstance(mul, Binary) and mul.op == "mul":
                    x, y = self._match_lanes(self.expr(mul.a), self.expr(mul.b))
                    z = self.expr(other)
                    x, z = self._match_lanes(x, z)
                    y, z = self._match_lanes(y, z)
                    x, y = self._match_lanes(x, y)
                    fn = self.cg.intrinsic(f"llvm.fmuladd.{_type_suffix(x.type)}", x.type, [x.type] * 3)
                    return b.call(fn, [x, y, z])
        a, c = self._match_lanes(self.expr(e.a), self.expr(e.b))
        if dtypes.is_float(dt):
            if e.op == "add":
                return b.fadd(a, c)
            if e.op == "sub":
                return b.fsub(a, c)
            if e.op == "mul":
                return b.fmul(a, c)
            if e.op == "div":
                return b.fdiv(a, c)
            if e.op in ("min", "max"):
                cmp = b.fcmp_ordered("<" if e.op == "min" else ">", a, c)
                return b.select(cmp, a, c)
            if e.op in ("floordiv", "floormod"):
                q = self._call_float("floor", b.fdiv(a, c))
                return q if e.op == "floordiv" else b.fsub(a, b.fmul(q, c))
        signed = dtypes.is_signed(dt) or dt == "bool"
        if e.op == "add":
            return b.add(a, c)
        if e.op == "sub":
            return b.sub(a, c)
        if e.op == "mul":
            return b.mul(a, c)
        if e.op in ("min", "max"):
            op = "<" if e.op == "min" else ">"
            cmp = b.icmp_signed(op, a, c) if signed else b.icmp_unsigned(op, a, c)
            return b.select(cmp, a, c)
        if e.op in ("floordiv", "floormod"):
            return self._int_floor_divmod(e.op, a, c, signed, e.b)
        raise InternalError(f"no integer lowering for {e.op}")

    def _int_floor_divmod(self, op, a, c, signed, divisor: Expr):
        b = self.builder
        if not signed:
            return b.udiv(a, c) if op == "floordiv" else b.urem(a, c)
        d = divisor.value if isinstance(divisor, Const) and divisor.value > 0 else None
        if d is not None and d & (d - 1) == 0:
            if op == "floordiv":
                return b.ashr(a, _splat_const(a.type, d.bit_length() - 1))
            return b.and_(a, _splat_const(a.type, d - 1))
        q = b.sdiv(a, c)
        r = b.srem(a, c)
        if d is not None:
            # r < 0 only where a < 0: then floor is one below the truncated quotient and the
            # remainder is r + d; (r >> 63) is -1 there, else 0 (4 instructions instead of 9: an
            # unrolled register tile computes one such index per access)
            width = a.type.element.width if _lanes(a) > 1 else a.type.width
            negative = b.ashr(r, _splat_const(a.type, width - 1))
            return b.add(q, negative) if op == "floordiv" else b.add(r, b.and_(negative, c))
        zero = ir.Constant(a.type, None)
        r_nonzero = b.icmp_signed("!=", r, zero)
        sign_differs = b.icmp_signed("!=", b.icmp_signed("<", r, zero), b.icmp_signed("<", c, zero))
        adjust = b.and_(r_nonzero, sign_differs)
        if op == "floordiv":
            return b.select(adjust, b.sub(q, _splat_const(a.type, 1)), q)
        return b.select(adjust, b.add(r, c), r)

    def expr_Compare(self, e: Compare):
        a, c = self._match_lanes(self.expr(e.a), self.expr(e.b))
        op = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[e.op]
        dt = e.a.dtype
        if dtypes.is_float(dt):
            if op == "!=":
                return self.builder.fcmp_unordered(op, a, c)
            return self.builder.fcmp_ordered(op, a, c)
        if dtypes.is_signed(dt):
            return self.builder.icmp_signed(op, a, c)
        return self.builder.icmp_unsigned(op, a, c)

    def expr_Logical(self, e: Logical):
        a = self.expr(e.a)
        if e.op == "not":
            return self.builder.not_(a)
        a, c = self._match_lanes(a, self.expr(e.b))
        return self.builder.and_(a, c) if e.op == "and" else self.builder.or_(a, c)

    def expr_Select(self, e: Select):
        if not (_contains_load(e.true_value) or _contains_load(e.false_value)):
            cond = self.expr(e.condition)
            return self._select_lanes(cond, self.expr(e.true_value), self.expr(e.false_value))
        saved = self.known, self.numbers
        if self.known is None:
            self.known, self.numbers = {}, _ValueNumbers()
        try:
            cond = self.expr(e.condition)
            if not (self._reads_anew(e.true_value) or self._reads_anew(e.false_value)):
                return self._select_lanes(cond, self.expr(e.true_value), self.expr(e.false_value))
            if _lanes(cond) == 1:
                return self._lazy_select(cond, e)
            return self._masked_select(cond, e)
        finally:
            self.known, self.numbers = saved

    def _reads_anew(self, e) -> bool:
        """Whether emitting ``e`` would load memory no dominating code has loaded already."""
        seen, stack = set(), [e]
        while stack:
            node = stack.pop()
            if id(node) in seen or self.numbers.of(node) in self.known:
                continue
            if isinstance(node, BufferLoad):
                return True
            seen.add(id(node))
            stack.extend(children(node))
        return False

    def _select_lanes(self, cond, t, f):
        """select(cond, t, f) with all three brought to one width (a vector condition may pick
        between two lane-invariant values, and a scalar one between vectors)."""
        lanes = max(_lanes(cond), _lanes(t), _lanes(f))
        cond, t, f = (self._broadcast(v, lanes) for v in (cond, t, f))
        return self.builder.select(cond, t, f)

    def _lazy_select(self, cond, e: Select):
        """Evaluate only the chosen branch: a guarded read must not touch memory otherwise."""
        b = self.builder
        lanes = max(_static_lanes(e.true_value), _static_lanes(e.false_value))
        with b.if_else(cond) as (then, otherwise):
            with then, self._branch():
                t = self._broadcast(self.expr(e.true_value), lanes)
                t_block = b.block
            with otherwise, self._branch():
                f = self._broadcast(self.expr(e.false_value), lanes)
                f_block = b.block
        phi = b.phi(t.type)
        phi.add_incoming(t, t_block)
        phi.add_incoming(f, f_block)
        return phi

    def _whole(self, buf) -> bool:
        """Whether ``buf`` is read and written as whole vectors under the current lane mask: a tail
        tile's own buffer (``local``, on the stack, with spare room after it: ``pad_tail_tiles``).
        A buffer of run-time size is heap memory and stays masked (whole stores there made a
        softmax's untouched main loop 1.3x slower)."""
        return bool(self.tile_masks) and self.tile_masks[-1] and buf.scope == "local" and id(buf) in self.stack_buffers

    @contextmanager
    def _masked(self, cond, tile: bool):
        """Emit under the lane mask ``cond`` (and the enclosing one, if any, of the same width);
        ``tile``: a masked tail tile's, under which ``_whole`` buffers are read and written whole."""
        if self.masks and _lanes(self.masks[-1]) == _lanes(cond):
            cond = self.builder.and_(self.masks[-1], cond)
        self.masks.append(cond)
        self.tile_masks.append(tile)
        try:
            yield
        finally:
            self.masks.pop()
            self.tile_masks.pop()

    @contextmanager
    def _bound(self, var: Var):
        """A scope in which the body binds ``var`` (``self.scope[id(var)]``); after it ``var`` is
        what it was, or out of scope (closures must not capture a finished loop's variable)."""
        previous = self.scope.get(id(var))
        try:
            yield
        finally:
            if previous is None:
                self.scope.pop(id(var), None)
            else:
                self.scope[id(var)] = previous

    def _masked_select(self, cond, e: Select):
        """Vector select whose branches read memory: loads are masked by the lanes that use them."""
        with self._masked(cond, tile=False), self._branch():
            t = self.expr(e.true_value)
        with self._masked(self.builder.not_(cond), tile=False), self._branch():
            f = self.expr(e.false_value)
        return self._select_lanes(cond, t, f)

    def _double_to_half(self, v, t):
        """float64 -> float16 without the ``__truncdfhf2`` library call.

        x86 has no double-to-half instruction, so LLVM calls ``__truncdfhf2``, which MCJIT
        cannot resolve where libgcc is older than GCC 12 (an abort that kills the
        interpreter).  Going through float32 rounds twice unless the first step rounds to
        odd: truncate toward zero, then set the last bit if anything was cut off.  float32
        keeps 13 more bits than float16, so the second rounding (to nearest even) then
        gives the correctly rounded half.  Overflow goes to FLT_MAX (odd), which rounds to
        inf; NaN stays NaN; signed zeros and tiny values keep their sign."""
        b = self.builder
        lanes = _lanes(v)
        f32_t, i32_t = llvm_type("float32", lanes), llvm_type("int32", lanes)
        fabs = self.cg.intrinsic(f"llvm.fabs.{_type_suffix(v.type)}", v.type, [v.type])
        nearest = b.fptrunc(v, f32_t)
        bits = b.bitcast(nearest, i32_t)
        rounded_up = b.fcmp_ordered(">", b.call(fabs, [b.fpext(nearest, v.type)]), b.call(fabs, [v]))
        toward_zero = b.select(rounded_up, b.sub(bits, _splat_const(i32_t, 1)), bits)
        inexact = b.fcmp_unordered("!=", b.fpext(b.bitcast(toward_zero, f32_t), v.type), v)
        odd = b.select(inexact, b.or_(toward_zero, _splat_const(i32_t, 1)), toward_zero)
        return b.fptrunc(b.bitcast(odd, f32_t), t)

    def expr_Cast(self, e: Cast):
        if e.dtype == "int32" and isinstance(e.value, Call) and e.value.name == "round" and \
                e.value.dtype in ("float32", "float64") and self.cg.target.arch == "x86_64":
            return self._rounded_to_int32(self.expr(e.value.args[0]))
        v = self.expr(e.value)
        src, dst = e.value.dtype, e.dtype
        lanes = _lanes(v)
        t = llvm_type(dst, lanes)
        b = self.builder
        if dst == "bool":
            zero = ir.Constant(v.type, None)
            return b.fcmp_unordered("!=", v, zero) if dtypes.is_float(src) else b.icmp_unsigned("!=", v, zero)
        if dtypes.is_float(dst):
            if src == "float64" and dst == "float16":
                return self._double_to_half(v, t)
            if dtypes.is_float(src):
                return b.fpext(v, t) if dtypes.bits(dst) > dtypes.bits(src) else b.fptrunc(v, t)
            return b.sitofp(v, t) if dtypes.is_signed(src) else b.uitofp(v, t)
        if dtypes.is_float(src):
            return b.fptosi(v, t) if dtypes.is_signed(dst) else b.fptoui(v, t)
        sb, db = dtypes.bits(src), dtypes.bits(dst)
        if db > sb:
            return b.sext(v, t) if dtypes.is_signed(src) else b.zext(v, t)
        if db < sb:
            return b.trunc(v, t)
        return v

    def _rounded_to_int32(self, v):
        """``int32(round(v))`` as ``llvm.lrint``: one ``cvtps2dq`` / ``cvtpd2dq`` (the default rounding
        mode is to nearest even), where ``roundeven`` then ``fptosi`` is a round and a truncating
        convert.  Out of range both are undefined."""
        lanes = _lanes(v)
        t = llvm_type("int32", lanes)
        name = f"llvm.lrint.{_type_suffix(t)}.{_type_suffix(v.type)}"
        return self.builder.call(self.cg.intrinsic(name, t, [v.type]), [v])

    def _call_float(self, name: str, *args):
        t = args[0].type
        fn = self.cg.intrinsic(f"{_FLOAT_INTRINSIC[name]}.{_type_suffix(t)}", t, [t] * len(args))
        return self.builder.call(fn, list(args))

    def expr_Call(self, e: Call):
        args = [self.expr(a) for a in e.args]
        if len(args) == 2:
            args = list(self._match_lanes(*args))
        x = args[0]
        dt = e.dtype
        b = self.builder
        if e.name == "abs" and not dtypes.is_float(dt):
            if not dtypes.is_signed(dt):
                return x
            neg = b.sub(ir.Constant(x.type, None), x)
            return b.select(b.icmp_signed("<", x, ir.Constant(x.type, None)), neg, x)
        if e.name in BITWISE_NAMES:
            return self._bitwise(e.name, args, dt)
        if e.name == "dot4_u8s8":
            return self._dot4_u8s8(*args, ir.Constant(args[0].type, None))
        if e.name == "dot2_i16":
            return self._dot2_i16(*args)
        if e.name == "fmod":      # exact; LLVM calls fmod/fmodf for it, lane by lane
            return b.frem(x, args[1])
        if e.name in VECTOR_MATH and dt == "float32":
            return self._vector_math(e.name, x)
        if e.name in _FLOAT_INTRINSIC:
            return self._call_float(e.name, *args)
        one = _splat_const(x.type, 1.0)
        if e.name == "rsqrt":
            return b.fdiv(one, self._call_float("sqrt", x))
        if e.name == "sigmoid":
            neg = b.fsub(_splat_const(x.type, 0.0), x)
            e_neg = self._vector_math("exp", neg) if dt == "float32" else self._call_float("exp", neg)
            return b.fdiv(one, b.fadd(one, e_neg))
        if e.name in _LIBM:
            return self._libm(e.name, x, dt)
        raise InternalError(f"no lowering for intrinsic {e.name}")

    def _dot4_u8s8(self, a, w, acc):
        """``acc + dot4_u8s8(a, w)``: one VNNI ``vpdpbusd`` per 16 (or 8, 4) lanes where the target
        has it (LLVM does not find it in the widened form, and aborts on the intrinsic where the
        target lacks it); on other x86 vectors the bytes widened to int16 and multiplied in pairs by
        ``pmaddwd`` (exact: a pair of uint8 x int8 products fits an int32; ``vpmaddubsw`` would
        saturate at int16), then each word's two pair sums added; elsewhere the bytes widened to
        int32, multiplied and summed in groups of four."""
        lanes = max(_lanes(a), _lanes(w), _lanes(acc))
        a, w, acc = (self._broadcast(v, lanes) for v in (a, w, acc))
        b = self.builder
        width = _vnni_width(self.cg.target.enabled_features(), lanes)
        if width:
            t = ir.VectorType(I32, width)
            fn = self.cg.intrinsic(f"llvm.x86.avx512.vpdpbusd.{32 * width}", t, [t, t, t])
            parts = [b.call(fn, [_lanes_of(b, acc, lo, width), _lanes_of(b, a, lo, width), _lanes_of(b, w, lo, width)])
                     for lo in range(0, lanes, width)]
            return _joined(b, parts)
        pairs = _pmaddwd(self.cg.target, 2 * lanes) if lanes > 1 else None
        if pairs is not None:
            name, step = pairs
            i16 = ir.IntType(16)
            a16 = b.zext(b.bitcast(a, ir.VectorType(I8, 4 * lanes)), ir.VectorType(i16, 4 * lanes))
            w16 = b.sext(b.bitcast(w, ir.VectorType(I8, 4 * lanes)), ir.VectorType(i16, 4 * lanes))
            t_in, t_out = ir.VectorType(i16, 2 * step), ir.VectorType(I32, step)
            fn = self.cg.intrinsic(name, t_out, [t_in, t_in])
            products = [b.call(fn, [_lanes_of(b, a16, lo, 2 * step), _lanes_of(b, w16, lo, 2 * step)])
                        for lo in range(0, 4 * lanes, 2 * step)]
            return b.add(acc, _adjacent_sums(b, _joined(b, products)))
        wide = ir.VectorType(I32, 4 * lanes)
        products = b.mul(b.zext(b.bitcast(a, ir.VectorType(I8, 4 * lanes)), wide),
                         b.sext(b.bitcast(w, ir.VectorType(I8, 4 * lanes)), wide))
        total = None
        for r in range(4):
            part = b.shuffle_vector(products, ir.Constant(wide, ir.Undefined),
                                    ir.Constant(ir.VectorType(I32, lanes), [4 * i + r for i in range(lanes)]))
            total = part if total is None else b.add(total, part)
        if lanes == 1:
            total = b.extract_element(total, ir.Constant(I32, 0))
        return b.add(acc, total)

    def _dot2_i16(self, a, w):
        """``dot2_i16(a, w)``: ``pmaddwd`` on x86 vectors, else the int16 halves sign-extended,
        multiplied and added."""
        lanes = max(_lanes(a), _lanes(w))
        a, w = (self._broadcast(v, lanes) for v in (a, w))
        b = self.builder
        i16 = ir.IntType(16)
        pairs = _pmaddwd(self.cg.target, lanes) if lanes > 1 else None
        if pairs is not None:
            name, step = pairs
            t_in, t_out = ir.VectorType(i16, 2 * step), ir.VectorType(I32, step)
            fn = self.cg.intrinsic(name, t_out, [t_in, t_in])
            return _joined(b, [b.call(fn, [b.bitcast(_lanes_of(b, a, lo, step), t_in),
                                            b.bitcast(_lanes_of(b, w, lo, step), t_in)])
                               for lo in range(0, lanes, step)])
        halves = ir.VectorType(i16, 2 * lanes)
        wide = ir.VectorType(I32, 2 * lanes)
        products = b.mul(b.sext(b.bitcast(a, halves), wide), b.sext(b.bitcast(w, halves), wide))
        total = _adjacent_sums(b, products)
        return b.extract_element(total, ir.Constant(I32, 0)) if lanes == 1 else total

    def _bitwise(self, name: str, args, dt: str):
        """Bitwise ops; shifts give numpy's answer where LLVM's ``shl``/``lshr``/``ashr`` would be
        poison (an amount outside [0, bits)): the amount is masked into range, then the
        out-of-range lanes select 0 (or the sign fill of a right shift)."""
        b = self.builder
        x = args[0]
        if name == "bitwise_not":
            return b.not_(x)
        y = args[1]
        if name in ("bitwise_and", "bitwise_or", "bitwise_xor"):
            return {"bitwise_and": b.and_, "bitwise_or": b.or_, "bitwise_xor": b.xor}[name](x, y)
        bits = dtypes.bits(dt)
        signed = dtypes.is_signed(dt)
        amount = b.and_(y, _splat_const(y.type, bits - 1))      # bits is a power of two
        in_range = b.icmp_unsigned("<", y, _splat_const(y.type, bits))   # a negative amount is huge unsigned
        zero = _splat_const(x.type, 0)
        if name == "shift_left":
            return b.select(in_range, b.shl(x, amount), zero)
        if signed:
            return b.select(in_range, b.ashr(x, amount), b.ashr(x, _splat_const(x.type, bits - 1)))
        return b.select(in_range, b.lshr(x, amount), zero)

    def _vector_math(self, name: str, x):
        """float32 exp/erf/tanh as inline polynomials (vector_math.py says why)."""
        def fma(a, c, d):
            fn = self.cg.intrinsic(f"llvm.fmuladd.{_type_suffix(a.type)}", a.type, [a.type] * 3)
            return self.builder.call(fn, [a, c, d])
        return VECTOR_MATH[name](self.builder, x, fma, lambda v: self._call_float("floor", v))

    def _libm(self, name: str, x, dtype: str):
        """Scalar libm calls, lane by lane for vectors (half goes through float)."""
        work = "float32" if dtype == "float16" else dtype
        scalar_t = _SCALAR[work]
        fn = self.cg.runtime_fn(_LIBM[name][work], scalar_t, [scalar_t])
        b = self.builder

        def one(v):
            if dtype == "float16":
                return b.fptrunc(b.call(fn, [b.fpext(v, scalar_t)]), _SCALAR["float16"])
            return b.call(fn, [v])
        if _lanes(x) == 1:
            return one(x)
        out = ir.Constant(x.type, ir.Undefined)
        for lane in range(_lanes(x)):
            v = b.extract_element(x, ir.Constant(I32, lane))
            out = b.insert_element(out, one(v), ir.Constant(I32, lane))
        return out


def _vnni_width(features, lanes: int) -> int:
    """The widest ``vpdpbusd`` (lanes of int32) this target has that splits ``lanes`` into a power
    of two of pieces; 0 if none."""
    widths = ([16] if "avx512vnni" in features else []) + \
        ([8, 4] if "avxvnni" in features or {"avx512vnni", "avx512vl"} <= features else [])
    for width in widths:
        pieces = lanes // width
        if lanes % width == 0 and pieces & (pieces - 1) == 0:
            return width
    return 0


def _pmaddwd(target, pair_sums: int):
    """``(intrinsic, int32 lanes per call)`` of the widest x86 ``pmaddwd`` that splits ``pair_sums``
    int32 results into a power of two of calls, or None (not x86, or no such split)."""
    if target.arch != "x86_64":
        return None
    features = target.enabled_features()
    choices = ([("llvm.x86.avx512.pmaddw.d.512", 16)] if "avx512bw" in features else []) + \
        ([("llvm.x86.avx2.pmadd.wd", 8)] if "avx2" in features else []) + [("llvm.x86.sse2.pmadd.wd", 4)]
    for name, step in choices:
        calls = pair_sums // step
        if pair_sums % step == 0 and calls & (calls - 1) == 0:
            return name, step
    return None


def _adjacent_sums(b, v):
    """``v[2 i] + v[2 i + 1]`` for each i: a vector of half ``v``'s lanes."""
    half = v.type.count // 2
    undefined = ir.Constant(v.type, ir.Undefined)
    even, odd = (b.shuffle_vector(v, undefined, ir.Constant(ir.VectorType(I32, half), list(range(r, 2 * half, 2))))
                 for r in (0, 1))
    return b.add(even, odd)


def _lanes_of(b, v, lo: int, width: int):
    """Lanes ``lo .. lo + width`` of vector ``v`` (``v`` itself when that is all of it)."""
    if v.type.count == width:
        return v
    return b.shuffle_vector(v, ir.Constant(v.type, ir.Undefined),
                            ir.Constant(ir.VectorType(I32, width), list(range(lo, lo + width))))


def _joined(b, parts):
    """A power of two of equal-width vectors concatenated, in order (pairwise shuffles)."""
    while len(parts) > 1:
        n = parts[0].type.count
        mask = ir.Constant(ir.VectorType(I32, 2 * n), list(range(2 * n)))
        parts = [b.shuffle_vector(x, y, mask) for x, y in zip(parts[::2], parts[1::2])]
    return parts[0]


def _splat_const(t, value):
    if isinstance(t, ir.VectorType):
        return ir.Constant(t, [value] * t.count)
    return ir.Constant(t, value)


def _suffix(elem) -> str:
    if isinstance(elem, ir.IntType):
        return f"i{elem.width}"
    return {"half": "f16", "float": "f32", "double": "f64"}[str(elem)]


def _type_suffix(t) -> str:
    if isinstance(t, ir.VectorType):
        return f"v{t.count}{_suffix(t.element)}"
    return _suffix(t)


class CodeGen:
    """Builds one LLVM module for one PrimFunc."""

    def __init__(self, func: PrimFunc, target, symbol: str):
        self.func, self.target, self.symbol = func, target, symbol
        self.module = ir.Module(name=symbol)
        self._workspace_slots = 0
        self._intrinsics: Dict[str, ir.Function] = {}
        self._outlined = 0

    def intrinsic(self, name: str, ret, args) -> ir.Function:
        fn = self._intrinsics.get(name)
        if fn is None:
            fn = ir.Function(self.module, ir.FunctionType(ret, args), name=name)
            self._intrinsics[name] = fn
        return fn

    def runtime_fn(self, name: str, ret=None, args=None) -> ir.Function:
        signatures = {"malloc": (PTR, [I64]), "free": (ir.VoidType(), [PTR]), "abort": (ir.VoidType(), []),
                      "lw_parallel_for": (ir.VoidType(), [PTR, PTR, I64])}
        if name in signatures:
            ret, args = signatures[name]
        return self.intrinsic(name, ret, args)

    def workspace_slot(self, name: str) -> ir.GlobalVariable:
        """A module global caching one buffer of a fixed-size allocation site between calls.

        malloc of a large block is cheap, but glibc returns a freed block at the top of
        the heap to the OS once it exceeds the trim threshold, and the next call takes
        a page fault on every page of it: two 3 MB Winograd buffers cost 2 ms per call
        against a 0.6 ms kernel.  Each site keeps its last buffer instead (lock-free: a
        call swaps the slot with null; a concurrent call finding it empty mallocs its
        own, and the one displaced on return is freed).  The memory stays allocated for
        the life of the process, like a workspace pool."""
        var = ir.GlobalVariable(self.module, PTR, name=f"lw.workspace.{self._workspace_slots}.{name}")
        var.linkage = "internal"
        var.initializer = ir.Constant(PTR, None)
        var.align = 8
        self._workspace_slots += 1
        return var

    def workspace_fn(self, which: str) -> ir.Function:
        """``take(slot, nbytes)``: the slot's buffer, or a fresh malloc (abort if none);
        ``give(slot, ptr)``: back into the slot, freeing the buffer it displaces."""
        name = f"lw.workspace_{which}"
        fn = self.module.globals.get(name)
        if fn is not None:
            return fn
        if which == "take":
            fn = ir.Function(self.module, ir.FunctionType(PTR, [PTR, I64]), name=name)
            slot, nbytes = fn.args
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            cached = b.atomic_rmw("xchg", slot, ir.Constant(PTR, None), "acquire")
            empty = b.icmp_unsigned("==", cached, ir.Constant(PTR, None))
            with b.if_then(empty, likely=False):
                fresh = b.call(self.runtime_fn("malloc"), [nbytes])
                with b.if_then(b.icmp_unsigned("==", fresh, ir.Constant(PTR, None)), likely=False):
                    b.call(self.runtime_fn("abort"), [])
                b.ret(fresh)
            b.ret(cached)
        else:
            fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, PTR]), name=name)
            slot, ptr = fn.args
            b = ir.IRBuilder(fn.append_basic_block("entry"))
            displaced = b.atomic_rmw("xchg", slot, ptr, "release")
            with b.if_then(b.icmp_unsigned("!=", displaced, ir.Constant(PTR, None)), likely=False):
                b.call(self.runtime_fn("free"), [displaced])
            b.ret_void()
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        return fn

    def check_message(self, what: str) -> ir.Value:
        """A pointer to a constant C string naming what a checked index indexes (``runtime.index_error_text``
        reads it)."""
        data = what.encode("utf-8", "replace")[:400] + b"\0"
        key = "lw.check." + what
        var = self._intrinsics.get(key)
        if var is None:
            var = ir.GlobalVariable(self.module, ir.ArrayType(I8, len(data)), name=f"lw.check.{len(self._intrinsics)}")
            var.linkage = "private"
            var.global_constant = True
            var.initializer = ir.Constant(ir.ArrayType(I8, len(data)), bytearray(data))
            self._intrinsics[key] = var
        return var.bitcast(PTR)

    def index_error_fn(self) -> ir.Function:
        """``_index_error(err, index, extent, message)``: the first failing check of a call wins
        (a compare-and-swap of the message pointer, so parallel chunks may fail at once);
        it then stores the index and the extent beside it."""
        name = "lw.index_error"
        fn = self.module.globals.get(name)
        if fn is not None:
            return fn
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, I64, I64, PTR]), name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        fn.attributes.add("noinline")
        fn.attributes.add("cold")
        err, index, extent, message = fn.args
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        result = b.cmpxchg(err, ir.Constant(I64, 0), b.ptrtoint(message, I64), "acq_rel", "monotonic")
        with b.if_then(b.extract_value(result, 1)):
            b.store(index, b.gep(err, [ir.Constant(I64, 1)], inbounds=True, source_etype=I64)).align = 8
            b.store(extent, b.gep(err, [ir.Constant(I64, 2)], inbounds=True, source_etype=I64)).align = 8
        b.ret_void()
        return fn

    def kernel_function(self, name: str, values: list, buffers: list, leading_i64: int = 0):
        """An internal function whose buffer pointers are ``noalias`` parameters.

        Buffers reach generated code through arrays and closures, where LLVM cannot
        see that they never overlap (the runtime checks that); passing them as noalias
        arguments lets it keep loads in registers across stores.
        """
        types = [I64] * leading_i64 + [v.type for _, v in values] + [PTR for _ in buffers]
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), types), name=name)
        fn.linkage = "internal"
        fn.attributes.add("nounwind")
        emitter = FunctionEmitter(self, fn, {}, {})
        args = list(fn.args)[leading_i64:]
        for (key, _), arg in zip(values, args):
            emitter.scope[key] = arg
        for (key, _), arg in zip(buffers, args[len(values):]):
            arg.add_attribute("noalias")
            emitter.buffer_ptrs[key] = arg
        return fn, emitter

    def generate(self) -> str:
        fn = ir.Function(self.module, ir.FunctionType(ir.VoidType(), [PTR, PTR, PTR]), name=self.symbol)
        fn.args[0].name, fn.args[1].name, fn.args[2].name = "buffers", "sizes", "err"
        fn.attributes.add("nounwind")
        b = ir.IRBuilder(fn.append_basic_block("entry"))
        buffers, values = [], []
        for k, buf in enumerate(self.func.params):
            slot = b.gep(fn.args[0], [ir.Constant(I64, k)], inbounds=True, source_etype=PTR)
            buffers.append((id(buf), b.load(slot, typ=PTR, name=buf.name)))
        for k, v in enumerate(self.func.size_vars):
            slot = b.gep(fn.args[1], [ir.Constant(I64, k)], inbounds=True, source_etype=I64)
            values.append((id(v), b.load(slot, typ=I64, name=v.name)))
        values.append((ERR_KEY, fn.args[2]))
        body_fn, emitter = self.kernel_function(f"{self.symbol}.body", values, buffers)
        emitter.replay = lambda: emitter.stmt(self.func.body)
        emitter.stmt(self.func.body)
        emitter.finish()
        b.call(body_fn, [v for _, v in values] + [p for _, p in buffers])
        b.ret_void()
        return str(self.module)

    def emit_parallel(self, parent: FunctionEmitter, loop: For):
        """Outline ``loop``'s body into a function and hand it to the thread pool."""
        self._outlined += 1
        name = f"{self.symbol}.par{self._outlined}"
        body_fn = ir.Function(self.module, BODY_TYPE, name=name)
        body_fn.linkage = "internal"
        begin, end, closure_arg = body_fn.args
        values = list(parent.scope.items())
        buffers = list(parent.buffer_ptrs.items())
        slot_types = [v.type for _, v in values] + [PTR for _ in buffers]
        closure_t = ir.LiteralStructType(slot_types) if slot_types else ir.LiteralStructType([I8])
        pb = parent.builder
        closure = parent._alloca_in_entry(closure_t, name="closure", opaque=False)
        for k, (_, v) in enumerate(values + buffers):
            slot = pb.gep(closure, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True)
            pb.store(v, slot)
        cb = ir.IRBuilder(body_fn.append_basic_block("entry"))
        typed_closure = cb.bitcast(closure_arg, closure_t.as_pointer())
        loaded = []
        for k, (_, v) in enumerate(values + buffers):
            slot = cb.gep(typed_closure, [ir.Constant(I32, 0), ir.Constant(I32, k)], inbounds=True)
            loaded.append(cb.load(slot, typ=v.type))
        inner_fn, child = self.kernel_function(name + ".inner", values, buffers, leading_i64=2)
        cb.call(inner_fn, [begin, end] + loaded)
        cb.ret_void()
        # the inner function runs iterations [begin, end) of the loop, offset by its min
        lo = child.expr(loop.min)
        first, last = inner_fn.args[0], inner_fn.args[1]
        start, stop = child.builder.add(lo, first), child.builder.add(lo, last)
        child.replay = lambda: child.emit_loop(loop.var, start, stop, loop.body, "serial")
        child.emit_loop(loop.var, start, stop, loop.body, "serial")
        child.finish()
        extent = parent.expr(loop.extent)
        serial_below = dict(loop.annotations).get(SERIAL_BELOW)
        if serial_below is None:
            pb.call(self.runtime_fn("lw_parallel_for"), [body_fn, pb.bitcast(closure, PTR), extent])
            return
        # a run-time extent of too little work runs here: waking the pool costs more than it saves
        small = pb.icmp_signed("<", extent, ir.Constant(I64, int(serial_below)))
        with pb.if_else(small) as (here, pooled):
            with here:
                pb.call(body_fn, [ir.Constant(I64, 0), extent, pb.bitcast(closure, closure_arg.type)])
            with pooled:
                pb.call(self.runtime_fn("lw_parallel_for"), [body_fn, pb.bitcast(closure, PTR), extent])
