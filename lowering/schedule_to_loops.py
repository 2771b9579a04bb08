"""Build the loop nest of a schedule.

Each stage computed at root gets its own nest over its full domain; each stage
computed at a consumer's axis is placed inside that loop, sized and bounded by
``required_region`` at that point; inlined stages are substituted into their
consumers.  Splits that may leave a tail get a guard at the innermost level (the
loop-partition pass later splits the tail off).  A reduction stores its identity
just outside its outermost reduction loop, over the spatial loops inside it.

Guarantees: the result uses n-d ``BufferLoad``/``BufferStore`` on ``Buffer``s,
``For`` loops starting at 0, ``LetStmt`` for region origins, ``Allocate`` for every
intermediate buffer, and no DSL ``TensorLoad`` or ``Reduce`` nodes.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

from ..dsl import dtypes
from ..dsl.expr import Binary, Const, Expr, Reduce, Select, Var, binary, const, logical_and
from ..dsl.relations import Split, derive_extents, needs_guard, root_values
from ..dsl.schedule import Schedule, Stage
from ..dsl.tensor import ComputeOp, PlaceholderOp, Tensor
from ..dsl.visitor import Mutator, collect_vars, post_order_visit, substitute
from ..errors import LoweringError
from .accesses import Access, collect_accesses
from .bound_inference import LetBinding, Loop, Region, check_accesses_in_bounds, required_region
from .ir import Allocate, Buffer, BufferLoad, BufferStore, For, IfThenElse, LetStmt, Stmt, seq

_KIND_OF_ANNOTATION = {"vectorize": "vectorized", "parallel": "parallel", "unroll": "unrolled", "bind": "thread"}


class _Inliner(Mutator):
    """Substitute the definitions of inlined stages into an expression."""

    def __init__(self, inline_defs):
        self.inline_defs = inline_defs

    def visit_TensorLoad(self, node):
        node = self.generic_visit(node)
        definition = self.inline_defs.get(id(node.tensor.op))
        if definition is None:
            return node
        axis_vars, body = definition
        return self.visit(substitute(body, dict(zip(axis_vars, node.indices))))


class _ToBufferLoads(Mutator):
    """TensorLoad -> BufferLoad relative to the producer's region origin."""

    def __init__(self, lowering: "Lowering"):
        self.lowering = lowering

    def visit_TensorLoad(self, node):
        node = self.generic_visit(node)
        buffer = self.lowering.buffer_of(node.tensor)
        origin = self.lowering.origins.get(id(node.tensor.op))
        indices = node.indices
        if origin is not None:
            indices = tuple(binary("sub", i, o) for i, o in zip(indices, origin))
        return BufferLoad(buffer, indices)


class Lowering:
    def __init__(self, schedule: Schedule, args: Sequence[Tensor]):
        self.schedule = schedule
        self.arg_ops = {}
        self.buffers: Dict[int, Buffer] = {}
        self.origins: Dict[int, Tuple[Expr, ...]] = {}
        self.params: List[Buffer] = []
        for t in args:
            current = schedule.current_tensor(t)
            buf = Buffer(t.name, current.shape, current.dtype)
            self.buffers[id(current)] = buf
            self.params.append(buf)
            self.arg_ops[id(current.op)] = True
        self.size_vars = _size_vars(self.params)
        self.inline_defs = {}
        self.bodies: Dict[int, Tuple[Expr, ...]] = {}
        self._prepare_bodies()
        self.attached: Dict[Tuple[int, int], List[Stage]] = {}
        self.region_vars: Dict[int, tuple] = {}
        self.let_values: Dict[Var, Expr] = {}
        self.nest_info: Dict[int, _NestInfo] = {}
        self.thread_tags: Dict[int, str] = {}   # id(loop var) -> "threadIdx.x", ... for bound loops
        for s in schedule.stages:
            if s.attach_type == "scope":
                self.attached.setdefault((id(s.attach_stage), id(s.attach_ivar)), []).append(s)
                min_vars = tuple(Var(f"{s.name}.{iv.name}.min") for iv in s.op.axis)
                ext_vars = tuple(Var(f"{s.name}.{iv.name}.extent") for iv in s.op.axis)
                self.region_vars[id(s.op)] = (min_vars, ext_vars)
                self.origins[id(s.op)] = min_vars
                scope = s.scope if s.scope != "global" else "local"
                for t in s.op.outputs:
                    self.buffers[id(t)] = Buffer(t.name, (), t.dtype, scope)

    # ----------------------------------------------------------- preparation
    def _prepare_bodies(self):
        inliner = _Inliner(self.inline_defs)
        for stage in self.schedule.stages:
            op = stage.op
            if isinstance(op, PlaceholderOp):
                if id(op) not in self.arg_ops and self._is_read(stage):
                    raise LoweringError(
                        f"placeholder '{op.name}' is read by the computation but is not in the argument list; "
                        f"add it to the tensors passed to lw.lower / lw.build")
                continue
            body = tuple(inliner.visit(b) for b in op.body)
            if stage.attach_type == "inline":
                self.inline_defs[id(op)] = ([iv.var for iv in op.axis], body[0])
            else:
                self.bodies[id(op)] = body
            self._check_bounds(op)

    def _is_read(self, stage: Stage) -> bool:
        return bool(self.schedule.consumers_of(stage))

    def _check_bounds(self, op: ComputeOp):
        domain = [Loop(iv.var, iv.min, iv.extent) for iv in list(op.axis) + list(op.reduce_axis)]
        shapes = {}
        accesses = collect_accesses(op.body[0])
        for acc in accesses:
            shapes[acc.tensor] = acc.tensor.shape
        check_accesses_in_bounds(op.name, domain, accesses, shapes)

    def buffer_of(self, tensor: Tensor) -> Buffer:
        buf = self.buffers.get(id(tensor))
        if buf is None:
            raise LoweringError(f"tensor '{tensor.name}' has no buffer at this point of the loop nest "
                                f"(is it computed at a loop that does not enclose its use?)")
        return buf

    # ------------------------------------------------------------- top level
    def lower_body(self) -> Stmt:
        roots = [s for s in self.schedule.stages if isinstance(s.op, ComputeOp) and s.attach_type == "root"]
        nests = []
        allocs = []
        for stage in roots:
            ranges = {iv: (iv.min, iv.extent) for iv in stage.root_iter_vars}
            if id(stage.op) not in self.arg_ops:
                for t in stage.op.outputs:
                    buf = Buffer(t.name, t.shape, t.dtype, stage.scope)
                    self.buffers[id(t)] = buf
                    allocs.append(buf)
            nests.append(self.emit_stage(stage, [], ranges))
        for stage in self.schedule.stages:
            if isinstance(stage.op, ComputeOp) and stage.attach_type == "scope" and id(stage.op) in self.arg_ops:
                raise LoweringError(f"stage '{stage.name}' is an argument of the function but is computed "
                                    f"inside '{stage.attach_stage.name}'; arguments are computed at root")
        body = seq(*nests)
        for buf in reversed(allocs):
            body = Allocate(buf, _product(buf.shape), body)
        return body

    # ------------------------------------------------------------ one stage
    def emit_stage(self, stage: Stage, context: list, ranges: dict) -> Stmt:
        """The loop nest of ``stage`` with root axis ranges ``ranges`` (min, extent)."""
        op = stage.op
        extents = derive_extents({iv: ranges[iv][1] for iv in stage.root_iter_vars}, stage.relations)
        leaves = stage.leaf_iter_vars
        loop_vars = {iv: Var(iv.name) for iv in leaves}
        values = root_values({iv: loop_vars[iv] for iv in leaves}, stage.relations, extents, self.let_values)
        guards = [values[r.parent] < extents[r.parent]
                  for r in stage.relations if isinstance(r, Split) and needs_guard(r, extents, self.let_values)]
        root_map = {iv.var: binary("add", ranges[iv][0], values[iv]) for iv in stage.root_iter_vars}
        self.nest_info[id(stage)] = _NestInfo(leaves, loop_vars, extents, guards, root_map)
        body_exprs = tuple(substitute(b, root_map) for b in self.bodies[id(op)])
        local_index = tuple(values[iv] for iv in op.axis)
        init_level = next((k for k, iv in enumerate(leaves) if iv.kind == "reduce"), None)

        acc = None
        if init_level is not None and init_level > 0:
            outer_ctx = list(context) + [Loop(loop_vars[l], const(0), extents[l]) for l in leaves[:init_level]]
            acc = self._plan_accumulator(stage, outer_ctx, leaves[init_level:], loop_vars, extents, guards,
                                         ranges, values)
        out_bufs = None if acc is None else [acc.buffer]
        write_index = local_index if acc is None else acc.index
        innermost = self._compute_statement(stage, body_exprs, write_index, out_bufs)
        if guards:
            innermost = IfThenElse(_all(guards), innermost)

        def emit(level: int, ctx: list) -> Stmt:
            if level == len(leaves):
                return innermost
            leaf = leaves[level]
            v = loop_vars[leaf]
            if leaf in stage.bound_threads:
                self.thread_tags[id(v)] = stage.bound_threads[leaf].var.name.replace("_", ".")
            ctx_inside = ctx + [Loop(v, const(0), extents[leaf])]
            inner = emit(level + 1, ctx_inside)
            for producer in reversed(self.attached.get((id(stage), id(leaf)), [])):
                inner = self._emit_attached(producer, stage, ctx_inside, leaves[level + 1:], loop_vars,
                                            extents, guards, root_map, inner)
            kind = _KIND_OF_ANNOTATION.get(stage.annotations.get(leaf), "serial")
            notes = tuple(stage.pragmas.get(leaf, ()))
            if kind == "thread":
                notes += (("thread", stage.bound_threads[leaf].var.name.replace("_", ".")),)
            loop = For(v, const(0), extents[leaf], kind, inner, notes)
            if level == init_level:
                init = self._init_nest(stage, leaves, level, loop_vars, extents, ranges, acc)
                if acc is None:
                    loop = seq(init, loop)
                else:
                    loop = acc.wrap(seq(init, loop, acc.copy_back(self.buffer_of(op.outputs[0]), ranges, op)))
            return loop

        return emit(0, list(context))

    def _plan_accumulator(self, stage: Stage, outer_ctx, inner_leaves, loop_vars, extents, guards, ranges, values):
        """A small local buffer to accumulate a reduction tile in, or None.

        When spatial loops enclose the reduction loops, the tile of the output that
        the reduction updates is accumulated in a contiguous local buffer and copied
        out once: the same as ``cache_write(C, "local")`` computed at the innermost
        spatial loop outside the reduction.  Strided output rows (a power-of-two
        leading dimension) otherwise collide in the same cache sets on every update.
        """
        op = stage.op
        if op.num_outputs != 1 or stage.scope != "global":
            return None
        if any(iv in stage.bound_threads for iv in inner_leaves):
            return None   # a private tile would span other GPU threads' elements
        reduce_work = const(1)
        for iv in inner_leaves:
            if iv.kind == "reduce":
                reduce_work = binary("mul", reduce_work, extents[iv])
        if isinstance(reduce_work, Const) and reduce_work.value < 16:
            return None
        root_index = tuple(binary("add", ranges[iv][0], values[iv]) for iv in op.axis)
        inner = [Loop(loop_vars[iv], const(0), extents[iv]) for iv in inner_leaves]
        access = Access(op.outputs[0], root_index, const(True))
        region = required_region(outer_ctx, inner, guards, [access], op.outputs[0].shape, self.size_vars)
        if region.whole_dims or not all(isinstance(e, Const) for e in region.alloc_extents):
            return None   # a tile not known exactly would be copied back beyond the stage's own region
        size = 1
        for e in region.alloc_extents:
            size *= e.value
        if size * dtypes.itemsize(op.outputs[0].dtype) > ACCUMULATOR_BYTES or size == 0:
            return None
        if any(_is_piecewise(m) for m in region.mins):
            origins = [_tile_origin(r, {id(loop_vars[iv]) for iv in inner_leaves}) for r in root_index]
            if all(o is not None for o in origins):
                region = Region(origins, region.extents, region.alloc_extents, region.whole_dims)
        return _Accumulator(op, region, root_index, stage)

    def _compute_statement(self, stage: Stage, body: Tuple[Expr, ...], local_index, out_bufs=None) -> Stmt:
        op = stage.op
        to_buffers = _ToBufferLoads(self)
        bufs = out_bufs or [self.buffer_of(t) for t in op.outputs]
        first = body[0]
        if not isinstance(first, Reduce):
            return BufferStore(bufs[0], to_buffers.visit(first), local_index)
        combiner = first.combiner
        accs = [BufferLoad(b, local_index) for b in bufs]
        sources = [to_buffers.visit(s) for s in first.source]
        mapping = {**dict(zip(combiner.lhs, accs)), **dict(zip(combiner.rhs, sources))}
        results = [substitute(r, mapping) for r in combiner.result]
        if len(bufs) == 1:
            update = BufferStore(bufs[0], results[0], local_index)
        else:
            temps = [Var(f"{op.name}_v{k}", r.dtype) for k, r in enumerate(results)]
            update = seq(*[BufferStore(b, t, local_index) for b, t in zip(bufs, temps)])
            for t, r in reversed(list(zip(temps, results))):
                update = LetStmt(t, r, update)
        cond = to_buffers.visit(first.condition)
        if not (isinstance(cond, Const) and cond.value):
            update = IfThenElse(cond, update)
        return update

    def _init_nest(self, stage, leaves, level, loop_vars, extents, ranges, acc=None) -> Stmt:
        """Store the reducer's identity over the spatial loops at or inside ``level``."""
        op = stage.op
        init_vars = dict(loop_vars)
        inner_spatial = [iv for iv in leaves[level:] if iv.kind != "reduce"]
        for iv in inner_spatial:
            init_vars[iv] = Var(iv.name + ".init")
        spatial_leaves = {iv: init_vars[iv] for iv in leaves if iv.kind != "reduce"}
        values = root_values(spatial_leaves, stage.relations, extents, self.let_values)
        local_index = tuple(values[iv] for iv in op.axis)
        first = op.body[0]
        if acc is not None:
            local_index = tuple(binary("sub", binary("add", ranges[iv][0], values[iv]), m)
                                for iv, m in zip(op.axis, acc.min_vars))
        bufs = [acc.buffer] if acc is not None else [self.buffer_of(t) for t in op.outputs]
        stores = seq(*[BufferStore(b, ident, local_index) for b, ident in zip(bufs, first.combiner.identity)])
        guards = [values[r.parent] < extents[r.parent] for r in stage.relations
                  if isinstance(r, Split) and r.parent in values and r.outer in values and needs_guard(r, extents, self.let_values)]
        body = IfThenElse(_all(guards), stores) if guards else stores
        for iv in reversed(inner_spatial):
            body = For(init_vars[iv], const(0), extents[iv], _init_kind(stage, iv), body)
        return body

    def _emit_attached(self, producer: Stage, host: Stage, ctx: list, inner_leaves, loop_vars, extents,
                       guards, root_map, rest: Stmt) -> Stmt:
        """Place ``producer``'s region computation before ``rest`` inside ``host``'s loop."""
        inner: List[Loop] = [Loop(loop_vars[iv], const(0), extents[iv]) for iv in inner_leaves]
        all_guards = list(guards)
        accesses = []
        for consumer in self.schedule.consumers_of(producer):
            if consumer is host:
                accesses += self._accesses_of(producer, consumer, root_map)
                continue
            loops, chain_guards, reads = self._consumer_through_chain(producer, host, consumer, inner_leaves,
                                                                      loop_vars, extents)
            inner += [l for l in loops if all(l.var is not x.var for x in inner)]
            all_guards += chain_guards
            accesses += reads
        shape = producer.op.outputs[0].shape
        outer_ctx = ctx
        if producer.scope == "shared":
            outer_ctx, relaxed = self._relax_thread_loops(ctx)
            inner = relaxed + inner
        region = required_region(outer_ctx, inner, all_guards, accesses, shape, self.size_vars)
        min_vars, ext_vars = self.region_vars[id(producer.op)]
        bufs = [self.buffers[id(t)] for t in producer.op.outputs]
        for buf in bufs:
            buf.shape = tuple(region.alloc_extents)
        lets = []
        for k, iv in enumerate(producer.op.axis):
            lets.append(LetBinding(min_vars[k], region.mins[k]))
            lets.append(LetBinding(ext_vars[k], region.extents[k]))
            self.let_values[min_vars[k]] = region.mins[k]
            self.let_values[ext_vars[k]] = region.extents[k]
        ranges = {iv: (min_vars[k], ext_vars[k]) for k, iv in enumerate(producer.op.axis)}
        for iv in producer.op.reduce_axis:
            ranges[iv] = (iv.min, iv.extent)
        nest = self.emit_stage(producer, ctx + lets, ranges)
        body = seq(nest, rest)
        for buf in reversed(bufs):
            body = Allocate(buf, _product(buf.shape), body)
        for let in reversed(lets):
            body = LetStmt(let.var, let.value, body)
        return body

    def _relax_thread_loops(self, ctx: list):
        """(context kept, loops relaxed) for a ``shared`` buffer: one region per block.

        All threads of a block share the buffer, so its region is the union over the
        threadIdx-bound loops around the attach point (and the lets and loops that depend
        on them): those move from the fixed context to the loops isl projects out.  A
        let becomes the one-iteration loop ``[value, value + 1)``, i.e. ``var = value``.
        """
        kept, relaxed, relaxed_ids = [], [], set()
        for entry in ctx:
            if isinstance(entry, Loop):
                uses = collect_vars(entry.min) + collect_vars(entry.extent)
                if self.thread_tags.get(id(entry.var), "").startswith("threadIdx") or \
                        any(id(v) in relaxed_ids for v in uses):
                    relaxed.append(entry)
                    relaxed_ids.add(id(entry.var))
                    continue
            elif any(id(v) in relaxed_ids for v in collect_vars(entry.value)):
                relaxed.append(_let_as_loop(entry))
                relaxed_ids.add(id(entry.var))
                continue
            kept.append(entry)
        return kept, relaxed

    def _accesses_of(self, producer: Stage, consumer: Stage, root_map) -> list:
        found = [a for a in collect_accesses(self.bodies[id(consumer.op)][0]) if a.tensor.op is producer.op]
        return [Access(a.tensor, tuple(substitute(i, root_map) for i in a.indices),
                       None if a.condition is None else substitute(a.condition, root_map)) for a in found]

    def _consumer_through_chain(self, producer, host, consumer, host_inner_leaves, host_loop_vars, host_extents):
        """Loops, guards and reads of a consumer computed inside ``host`` below the attach point.

        The consumer's nest was emitted already (inner loops are emitted first); its
        region variables are replaced by their values so isl sees affine indices.
        """
        chain = [consumer]
        while chain[-1].attach_stage is not host:
            if chain[-1].attach_type != "scope":
                raise LoweringError(f"'{producer.name}' is computed inside '{host.name}', but its consumer "
                                    f"'{consumer.name}' is not")
            chain.append(chain[-1].attach_stage)
        entry_axis = chain[-1].attach_ivar
        # the consumer (or the stage it is computed in) may sit at the producer's own loop, after it
        same_loop = entry_axis is producer.attach_ivar
        if not same_loop and all(entry_axis is not iv for iv in host_inner_leaves):
            raise LoweringError(f"'{producer.name}' is computed at a loop of '{host.name}' inside the loop where "
                                f"its consumer '{consumer.name}' is computed; compute it at '{entry_axis.name}' or outside")
        loops: List[Loop] = []
        for iv in ([] if same_loop else host_inner_leaves):
            loops.append(Loop(host_loop_vars[iv], const(0), host_extents[iv]))
            if iv is entry_axis:
                break
        guards = []
        for k, stage in enumerate(reversed(chain)):
            info = self.nest_info[id(stage)]
            stop = chain[len(chain) - 2 - k].attach_ivar if stage is not consumer else None
            for iv in info.leaves:
                loops.append(Loop(info.loop_vars[iv], const(0), self._resolve(info.extents[iv])))
                if iv is stop:
                    break
            guards += [self._resolve(g) for g in info.guards]
        known = {id(l.var) for l in loops}
        guards = [g for g in guards if all(id(v) in known or any(v is s for s in self.size_vars)
                                           for v in collect_vars(g))]
        reads = [Access(a.tensor, tuple(self._resolve(i) for i in a.indices),
                        None if a.condition is None else self._resolve(a.condition))
                 for a in self._accesses_of(producer, consumer, self.nest_info[id(consumer)].root_map)]
        return loops, guards, reads

    def _resolve(self, e):
        """Replace region variables of attached stages by their values (to a fixpoint)."""
        for _ in range(8):
            new = substitute(e, self.let_values)
            if new is e:
                return e
            e = new
        return e


def _let_as_loop(let: LetBinding) -> Loop:
    """``var = value`` as a loop isl understands: one iteration at ``value``, or, for a
    select between constants (a region extent that is empty for some threads), the
    range between them (isl reads no selects)."""
    value = let.value
    if isinstance(value, Select) and isinstance(value.true_value, Const) and isinstance(value.false_value, Const):
        lo, hi = sorted((value.true_value.value, value.false_value.value))
        return Loop(let.var, const(lo), const(hi - lo + 1))
    return Loop(let.var, value, const(1))


def _tile_origin(index: Expr, inner: set):
    """``index`` at a tile's first element (its ``inner`` loop variables, ids, at 0), where ``index``
    is that plus those variables times non-negative constants, so the first element is the least;
    else None.  Where isl's minimum of an accumulator's region is piecewise, the region starts here
    instead, in the index's own terms: for a shifted tile (``min(xo * 6, 22) + xi``) isl's select
    left the accumulator with run-time indices the simplifier could not reduce, and LLVM stored
    such a register block after every FMA (the NCHW conv with run-time weights, AVX2: 2.1x slower)."""
    terms, stack = [], [index]
    while stack:
        e = stack.pop()
        if isinstance(e, Binary) and e.op == "add":
            stack += [e.a, e.b]
        else:
            terms.append(e)
    base = const(0, index.dtype)
    for term in terms:
        if not any(id(v) in inner for v in collect_vars(term)):
            base = binary("add", base, term)
        elif not (isinstance(term, Var) or _scaled_var(term)):
            return None
    return base


def _is_piecewise(e: Expr) -> bool:
    """Whether ``e`` holds a select (isl's minimum over pieces of a tile's domain)."""
    found = []
    post_order_visit(e, lambda n: found.append(n) if isinstance(n, Select) else None)
    return bool(found)


def _scaled_var(term: Expr) -> bool:
    """Whether ``term`` is a variable times a non-negative constant."""
    if not (isinstance(term, Binary) and term.op == "mul"):
        return False
    var, scale = (term.a, term.b) if isinstance(term.a, Var) else (term.b, term.a)
    return isinstance(var, Var) and isinstance(scale, Const) and scale.value >= 0


class _NestInfo:
    def __init__(self, leaves, loop_vars, extents, guards, root_map):
        self.leaves, self.loop_vars, self.extents, self.guards, self.root_map = leaves, loop_vars, extents, guards, root_map


ACCUMULATOR_BYTES = 32 * 1024


class _Accumulator:
    """The local tile a reduction accumulates in (see Lowering._plan_accumulator)."""

    def __init__(self, op, region: Region, root_index, stage: Stage):
        t = op.outputs[0]
        self.buffer = Buffer(f"{t.name}.acc", tuple(region.alloc_extents), t.dtype, "local")
        self.min_vars = tuple(Var(f"{t.name}.acc.{iv.name}.min") for iv in op.axis)
        self.ext_vars = tuple(Var(f"{t.name}.acc.{iv.name}.extent") for iv in op.axis)
        self.region = region
        self.index = tuple(binary("sub", r, m) for r, m in zip(root_index, self.min_vars))
        self.vector_copy = any(stage.annotations.get(iv) == "vectorize" for iv in stage.leaf_iter_vars)

    def wrap(self, body: Stmt) -> Stmt:
        body = Allocate(self.buffer, _product(self.buffer.shape), body)
        for k in reversed(range(len(self.min_vars))):
            body = LetStmt(self.ext_vars[k], self.region.extents[k], body)
            body = LetStmt(self.min_vars[k], self.region.mins[k], body)
        return body

    def copy_back(self, out: Buffer, ranges, op) -> Stmt:
        """Copy the finished tile to the stage's own buffer."""
        idx_vars = [Var(f"{iv.name}.c") for iv in op.axis]
        dst = tuple(binary("sub", binary("add", m, v), ranges[iv][0])
                    for m, v, iv in zip(self.min_vars, idx_vars, op.axis))
        body = BufferStore(out, BufferLoad(self.buffer, tuple(idx_vars)), dst)
        for k in reversed(range(len(idx_vars))):
            innermost = k == len(idx_vars) - 1
            # a symbolic extent may still become a constant (the main part of a partitioned loop);
            # where it does not, the vectorize pass leaves the loop serial with a note
            kind = "vectorized" if innermost and self.vector_copy else "serial"
            body = For(idx_vars[k], const(0), self.ext_vars[k], kind, body)
        return body


def _init_kind(stage: Stage, iv) -> str:
    kind = _KIND_OF_ANNOTATION.get(stage.annotations.get(iv), "serial")
    return kind if kind in ("vectorized", "unrolled", "serial") else "serial"


def _all(conds) -> Expr:
    result = conds[0]
    for c in conds[1:]:
        result = logical_and(result, c)
    return result


def _product(shape) -> Expr:
    total = const(1)
    for s in shape:
        total = binary("mul", total, s)
    return total


def _size_vars(params: Sequence[Buffer]) -> List[Var]:
    found = []
    for buf in params:
        for s in buf.shape:
            for v in collect_vars(s):
                if all(v is not f for f in found):
                    found.append(v)
    return found


def schedule_to_loops(schedule: Schedule, args: Sequence[Tensor]):
    """(body, param buffers, size vars) for ``schedule`` called with ``args``."""
    lowering = Lowering(schedule, args)
    body = lowering.lower_body()
    return body, lowering.params, lowering.size_vars
