"""Schedules: how to run a computation, kept as plain, printable data.

A :class:`Schedule` holds one :class:`Stage` per operation.  A stage records its root
axes, its leaf axes in loop order, the split/fuse relations between them, per-axis
annotations and where it is computed (root, inline, or at another stage's axis).
Every primitive checks its arguments, raises :class:`~loopweave.errors.ScheduleError`
naming the stage, axis and rule, and appends a step to ``schedule.trace``.
Lowering reads the schedule and never mutates it.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Sequence, Tuple

from ..errors import ScheduleError
from . import dtypes
from .expr import Const, Expr, TensorLoad, Var, as_expr, const
from .printer import schedule_to_str
from .printer_html import schedule_html, stage_html
from .relations import Fuse, Split, split_extents
from .rfactor import rfactor
from .tensor import ComputeOp, IterVar, PlaceholderOp, Tensor, compute
from .trace import Trace
from .visitor import Mutator, collect_vars, substitute

ANNOTATIONS = ("vectorize", "parallel", "unroll", "bind")
SCOPES = ("global", "shared", "local", "warp")


class Stage:
    """The schedule of one operation."""

    def __init__(self, schedule: "Schedule", op):
        self.schedule = schedule
        self.op = op
        self.origin_op = op
        self.root_iter_vars: List[IterVar] = list(op.axis) + list(op.reduce_axis)
        self.all_iter_vars: List[IterVar] = list(self.root_iter_vars)
        self.leaf_iter_vars: List[IterVar] = list(self.root_iter_vars)
        self.relations: List = []
        self.annotations: Dict[IterVar, str] = {}
        self.bound_threads: Dict[IterVar, IterVar] = {}
        self.pragmas: Dict[IterVar, list] = {}
        self.attach_type = "root"
        self.attach_stage: Optional[Stage] = None
        self.attach_ivar: Optional[IterVar] = None
        self.scope = "global"
        self.storage_aligns: Dict[int, tuple] = {}
        self.storage_order: Optional[tuple] = None   # buffer dimensions outermost first; None: as op.axis
        self.double_buffered = False
        self.is_output = False

    # ------------------------------------------------------------------ naming
    @property
    def name(self) -> str:
        return self.op.name

    def __repr__(self) -> str:
        return f"Stage({self.name})"

    def _repr_html_(self) -> str:
        return stage_html(self)

    def _error(self, primitive: str, message: str, fix: str = "") -> ScheduleError:
        text = f"{primitive} on stage '{self.name}': {message}"
        if fix:
            text += f"\n  fix: {fix}"
        return ScheduleError(text)

    def _fresh_name(self, base: str) -> str:
        return _fresh(base, {iv.name for iv in self.all_iter_vars})

    def _new_axis(self, name: str, extent: Expr, kind: str) -> IterVar:
        iv = IterVar(Var(self._fresh_name(name)), const(0), extent, kind)
        self.all_iter_vars.append(iv)
        return iv

    def axis_by_name(self, name: str) -> IterVar:
        for iv in self.all_iter_vars:
            if iv.name == name:
                return iv
        raise ScheduleError(f"stage '{self.name}' has no axis named {name!r}; its axes: "
                            f"{', '.join(iv.name for iv in self.all_iter_vars)}")

    # -------------------------------------------------------------- validation
    # Only what concerns one call is checked here; where stages are computed relative to each
    # other is judged on the whole schedule when it is lowered (validate.py).
    def _check_leaf(self, primitive: str, ivar) -> IterVar:
        if not isinstance(ivar, IterVar):
            raise self._error(primitive, f"expected an axis (IterVar), got {ivar!r}",
                              f"pass one of the leaf axes: {self._leaf_names()}")
        if all(ivar is not iv for iv in self.all_iter_vars):
            owner = self.schedule._owner_of(ivar)
            where = f"it belongs to stage '{owner.name}'" if owner else "it belongs to no stage of this schedule"
            raise self._error(primitive, f"axis '{ivar.name}' is not an axis of this stage; {where}",
                              f"pass one of this stage's leaf axes: {self._leaf_names()}")
        if all(ivar is not iv for iv in self.leaf_iter_vars):
            raise self._error(primitive, f"axis '{ivar.name}' is no longer a leaf axis{self._became(ivar)}",
                              f"schedule the current leaf axes instead: {self._leaf_names()}")
        return ivar

    def _became(self, ivar) -> str:
        """``": it was split into 'i.outer' and 'i.inner'"`` (or fused into ...) for an axis that is no leaf."""
        for rel in self.relations:
            if isinstance(rel, Split) and rel.parent is ivar:
                return f": it was split into '{rel.outer.name}' and '{rel.inner.name}'"
            if isinstance(rel, Fuse) and (rel.outer is ivar or rel.inner is ivar):
                return f": it was fused into '{rel.fused.name}'"
        return ""

    def _leaf_names(self) -> str:
        return ", ".join(iv.name for iv in self.leaf_iter_vars) or "(none)"

    def _check_not_placeholder(self, primitive: str):
        if isinstance(self.op, PlaceholderOp):
            raise self._error(primitive, "a placeholder is an input and has no loops to schedule")

    def _positive_int_or_expr(self, primitive: str, value, what: str) -> Expr:
        if isinstance(value, bool) or not isinstance(value, (int, Expr)):
            raise self._error(primitive, f"{what} must be a positive int, got {value!r}")
        e = as_expr(value)
        if not dtypes.is_int(e.dtype):
            raise self._error(primitive, f"{what} must be an integer, got dtype {e.dtype}")
        if isinstance(e, Const) and e.value < 1:
            raise self._error(primitive, f"{what} must be at least 1, got {e.value}")
        return e

    def _trace(self, primitive: str, **args):
        self.schedule.trace.record(primitive, self.name, args)

    # -------------------------------------------------------------- primitives
    def split(self, parent: IterVar, factor=None, nparts=None, tail: str = "guard"):
        """Split ``parent`` into (outer, inner) with inner extent ``factor``, or ``nparts`` outer parts.

        ``tail`` says what happens when the factor does not divide the extent:
        ``"guard"`` (default) guards the last tile, and lowering splits it off;
        ``"shift"`` moves the last tile inwards so every tile is full (it overlaps
        the previous one, which is recomputed) - Halide's ShiftInwards.  Only for
        spatial axes of stages without a reduction.
        """
        self._check_not_placeholder("split")
        self._check_leaf("split", parent)
        if (factor is None) == (nparts is None):
            raise self._error("split", f"give exactly one of factor= or nparts= for axis '{parent.name}'")
        if factor is not None:
            factor = self._positive_int_or_expr("split", factor, "factor")
        else:
            nparts = self._positive_int_or_expr("split", nparts, "nparts")
        if parent.kind == "thread" or parent in self.bound_threads:
            raise self._error("split", f"axis '{parent.name}' is bound to a thread axis; split before bind")
        if tail not in ("guard", "shift"):
            raise self._error("split", f"tail must be 'guard' or 'shift', got {tail!r}")
        if tail == "shift" and (parent.kind == "reduce" or self.op.reduce_axis):
            raise self._error("split", f"tail='shift' recomputes overlapping tiles, which a reduction cannot do "
                              f"(axis '{parent.name}')", "use tail='guard', or shift the axes of a cache_write copy")
        outer_extent, inner_extent = split_extents(parent.extent, factor, nparts)
        outer = self._new_axis(parent.name + ".outer", outer_extent, parent.kind)
        inner = self._new_axis(parent.name + ".inner", inner_extent, parent.kind)
        self.relations.append(Split(parent, outer, inner, factor, nparts, tail))
        k = self.leaf_iter_vars.index(parent)
        self.leaf_iter_vars[k:k + 1] = [outer, inner]
        self._trace("split", parent=parent.name, factor=_plain(factor), nparts=_plain(nparts),
                    tail=None if tail == "guard" else tail, outputs=[outer.name, inner.name])
        return outer, inner

    def fuse(self, *axes):
        """Fuse consecutive leaf axes (outer first) into one axis."""
        self._check_not_placeholder("fuse")
        if len(axes) == 1 and isinstance(axes[0], (list, tuple)):
            axes = tuple(axes[0])
        if len(axes) < 2:
            raise self._error("fuse", f"needs at least two axes, got {len(axes)}")
        for a in axes:
            self._check_leaf("fuse", a)
        positions = [self.leaf_iter_vars.index(a) for a in axes]
        if positions != list(range(positions[0], positions[0] + len(axes))):
            raise self._error("fuse", f"axes {', '.join(a.name for a in axes)} are not consecutive leaf axes "
                              f"in this order (leaf order: {self._leaf_names()})",
                              "reorder them to be adjacent, outer first, before fusing")
        kinds = {a.kind for a in axes}
        if len(kinds) > 1:
            raise self._error("fuse", "cannot fuse a reduction axis with a spatial axis "
                              f"({', '.join(f'{a.name}:{a.kind}' for a in axes)})")
        for a in axes:
            if a in self.annotations:
                raise self._error("fuse", f"axis '{a.name}' is already annotated ({self.annotations[a]}); fuse first")
        fused = axes[0]
        for inner in axes[1:]:
            new = self._new_axis(f"{fused.name}.{inner.name}.fused", fused.extent * inner.extent, inner.kind)
            self.relations.append(Fuse(fused, inner, new))
            fused = new
        k = positions[0]
        self.leaf_iter_vars[k:k + len(axes)] = [fused]
        self._trace("fuse", axes=[a.name for a in axes], outputs=[fused.name])
        return fused

    def reorder(self, *order):
        """Put the given leaf axes in this relative order (the others keep their places)."""
        self._check_not_placeholder("reorder")
        if len(order) == 1 and isinstance(order[0], (list, tuple)):
            order = tuple(order[0])
        for a in order:
            self._check_leaf("reorder", a)
        if len({id(a) for a in order}) != len(order):
            raise self._error("reorder", "an axis appears twice: " + ", ".join(a.name for a in order))
        positions = sorted(self.leaf_iter_vars.index(a) for a in order)
        for pos, a in zip(positions, order):
            self.leaf_iter_vars[pos] = a
        self._trace("reorder", axes=[a.name for a in order])

    def tile(self, x_parent, y_parent, x_factor, y_factor):
        """Split two axes and order them (xo, yo, xi, yi)."""
        xo, xi = self.split(x_parent, factor=x_factor)
        yo, yi = self.split(y_parent, factor=y_factor)
        self.reorder(xo, yo, xi, yi)
        return xo, yo, xi, yi

    def _annotate(self, primitive: str, ivar, kind: str):
        self._check_not_placeholder(primitive)
        self._check_leaf(primitive, ivar)
        if ivar.kind == "reduce" and kind in ("vectorize", "parallel", "bind"):
            fix = "use rfactor to make a reduction axis spatial, or annotate a spatial axis"
            if kind == "bind":
                fix = ("loopweave has no cross-thread reduction: rfactor the reduction (s.rfactor(T, ko)) and bind "
                       "the new spatial axis of the partial results, or bind a spatial axis")
            raise self._error(primitive, f"axis '{ivar.name}' is a reduction axis; {kind} needs a spatial axis "
                              "(iterations of a reduction axis update the same element)", fix)
        if ivar in self.annotations and self.annotations[ivar] != kind:
            raise self._error(primitive, f"axis '{ivar.name}' is already marked {self.annotations[ivar]}")
        self.annotations[ivar] = kind

    def vectorize(self, ivar):
        """Run this (innermost, constant-extent) axis as SIMD lanes."""
        self._annotate("vectorize", ivar, "vectorize")
        self._trace("vectorize", axis=ivar.name)

    def parallel(self, ivar):
        """Run iterations of this axis on the native thread pool."""
        self._annotate("parallel", ivar, "parallel")
        self._trace("parallel", axis=ivar.name)

    def unroll(self, ivar):
        """Unroll this (constant-extent) axis completely."""
        self._annotate("unroll", ivar, "unroll")
        self._trace("unroll", axis=ivar.name)

    def bind(self, ivar, thread_ivar):
        """Bind an axis to a GPU block/thread axis made by ``lw.thread_axis``."""
        if not isinstance(thread_ivar, IterVar) or thread_ivar.kind != "thread":
            raise self._error("bind", f"the second argument must be lw.thread_axis(...), got {thread_ivar!r}")
        self._annotate("bind", ivar, "bind")
        self.bound_threads[ivar] = thread_ivar
        self._trace("bind", axis=ivar.name, thread=thread_ivar.var.name.replace("_", "."))

    def pragma(self, ivar, key: str, value=None):
        """Attach a free-form hint to a loop (kept in the IR; codegen may honour known keys)."""
        self._check_leaf("pragma", ivar)
        if not isinstance(key, str) or not key:
            raise self._error("pragma", f"the key must be a non-empty string, got {key!r}")
        self.pragmas.setdefault(ivar, []).append((key, value))
        self._trace("pragma", axis=ivar.name, key=key, value=value)

    def storage_align(self, axis, factor: int, offset: int):
        """Pad dimension ``axis`` of this stage's buffer so its stride is ``offset`` mod ``factor``."""
        self._check_not_placeholder("storage_align")
        if not isinstance(axis, IterVar) or all(axis is not a for a in self.op.axis):
            raise self._error("storage_align", f"{axis!r} is not a root spatial axis of this stage",
                              f"pass one of {', '.join(a.name for a in self.op.axis)}")
        for what, v in (("factor", factor), ("offset", offset)):
            if isinstance(v, bool) or not isinstance(v, int) or v < (1 if what == "factor" else 0):
                raise self._error("storage_align", f"{what} must be a {'positive' if what == 'factor' else 'non-negative'} int, got {v!r}")
        if offset >= factor:
            raise self._error("storage_align", f"offset {offset} must be smaller than factor {factor}")
        dim = [a for a in self.op.axis].index(axis)
        self.storage_aligns[dim] = (factor, offset)
        self._trace("storage_align", axis=axis.name, factor=factor, offset=offset)

    def reorder_storage(self, *axes):
        """Lay this stage's buffer out with its dimensions in the order of ``axes``, outermost
        first (as ``reorder`` orders loops; Halide's ``reorder_storage`` lists innermost first).

        Indexing is unchanged, only strides: a shared-memory copy of ``A[i, k]`` stored ``k``
        outermost lets each thread read its rows of one ``k`` as contiguous vectors.
        ``storage_align`` still pads the dimension it names, now at its place in this order."""
        self._check_not_placeholder("reorder_storage")
        if self.is_output:
            raise self._error("reorder_storage", "this stage is an output of the schedule; its layout is the "
                              "caller's array", "reorder the storage of a cache stage (s.cache_read / cache_write)")
        root = list(self.op.axis)
        dims = []
        for a in axes:
            if not isinstance(a, IterVar) or all(a is not r for r in root):
                raise self._error("reorder_storage", f"{a!r} is not a root spatial axis of this stage",
                                  f"pass each of {', '.join(r.name for r in root)} once")
            dims.append(next(d for d, r in enumerate(root) if r is a))
        if sorted(dims) != list(range(len(root))):
            raise self._error("reorder_storage", f"the axes must name every root spatial axis once, got "
                              f"{', '.join(a.name for a in axes)}",
                              f"pass each of {', '.join(r.name for r in root)} once")
        self.storage_order = tuple(dims)
        self._trace("reorder_storage", axes=[a.name for a in axes])

    def double_buffer(self, asynchronous: bool = False):
        """On a GPU, fill this shared stage for the next iteration of the loop it is computed in
        while the current one is used: two copies of the buffer, the next tile's global loads
        issued into registers before the arithmetic and stored after it, one barrier per
        iteration (``lowering/passes/double_buffer.py``).  ``asynchronous``: the next tile goes
        from global to shared memory without registers (``cp.async``, sm_80 and newer; the copy
        must be a plain copy of global memory), two barriers per iteration.  Ignored on the CPU."""
        self._check_not_placeholder("double_buffer")
        if self.scope != "shared":
            raise self._error("double_buffer", f"the stage lives in {self.scope!r} memory; only a shared-memory "
                              f"stage has a copy to overlap with its readers",
                              "call it on the stage made by s.cache_read(T, 'shared', readers)")
        self.double_buffered = "async" if asynchronous else True
        self._trace("double_buffer", **({"asynchronous": True} if asynchronous else {}))

    def compute_at(self, parent: "Stage", scope_ivar: IterVar):
        """Compute this stage inside loop ``scope_ivar`` of ``parent``, only the region it needs.

        Checked now: the arguments, that ``scope_ivar`` is a leaf axis of ``parent``, that this
        stage is no output.  Checked when the schedule is lowered, once every stage is placed:
        that the stages reading this one run inside that loop, that the loop still exists, and
        that there is no cycle (``validate.py``) - so stages may be attached in any order.
        """
        primitive = "compute_at"
        self._check_not_placeholder(primitive)
        if not isinstance(parent, Stage) or parent.schedule is not self.schedule:
            raise self._error(primitive, f"the first argument must be a stage of this schedule (s[T]), got {parent!r}")
        if parent is self:
            raise self._error(primitive, "a stage cannot be computed at its own loops")
        try:
            parent._check_leaf(primitive, scope_ivar)
        except ScheduleError as exc:  # name both stages: the one being moved and the one whose axis it is
            text = str(exc).replace(f"{primitive} on stage '{parent.name}': ", "", 1)
            text = text.replace("this stage's leaf axes", f"the leaf axes of stage '{parent.name}'")
            text = text.replace("this stage", f"stage '{parent.name}'")
            raise ScheduleError(f"{primitive} on stage '{self.name}' (at an axis of stage '{parent.name}'): {text}") \
                from None
        if self.is_output:
            raise self._error(primitive, "this stage is an output of the schedule; outputs are computed at root")
        self.attach_type = "scope"
        self.attach_stage, self.attach_ivar = parent, scope_ivar
        self._trace(primitive, parent=parent.name, axis=scope_ivar.name)

    def compute_inline(self):
        """Substitute this stage's expression into its consumers; it gets no loops or buffer."""
        primitive = "compute_inline"
        self._check_not_placeholder(primitive)
        if self.is_output:
            raise self._error(primitive, "an output stage cannot be inlined")
        if self.op.reduce_axis:
            raise self._error(primitive, "a reduction cannot be inlined into its consumers",
                              "compute_at it inside the consumer instead")
        if self.op.num_outputs != 1:
            raise self._error(primitive, "a tuple-valued stage cannot be inlined")
        self.attach_type = "inline"
        self.attach_stage = self.attach_ivar = None
        self._trace(primitive)

    def compute_root(self):
        """Compute this stage in its own loop nest at the top level (the default)."""
        self._check_not_placeholder("compute_root")
        self.attach_type = "root"
        self.attach_stage = self.attach_ivar = None
        self._trace("compute_root")

    def set_scope(self, scope: str):
        """Keep this stage's buffer in ``scope``: "global", or on a GPU "shared" (per block), "local" (per
        thread) or "warp" (a tile the 32 lanes of a warp compute on the tensor cores: a matmul-like
        stage split into 16 x 8 x 8 steps, ``lowering/passes/distribute_warp_tiles.py``)."""
        self._check_not_placeholder("set_scope")
        if scope not in SCOPES:
            raise self._error("set_scope", f"unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
        self.scope = scope
        self._trace("set_scope", scope=scope)


def _fresh(base: str, taken: set) -> str:
    """``base``, or ``base1``, ``base2``, ... whichever is not taken yet."""
    if base not in taken:
        return base
    k = 1
    while f"{base}{k}" in taken:
        k += 1
    return f"{base}{k}"


def _plain(value):
    """A JSON-friendly form of a factor (int, or the name of a var)."""
    if value is None:
        return None
    if isinstance(value, Const):
        return value.value
    if isinstance(value, Var):
        return {"var": value.name}
    raise ScheduleError(f"split factors must be ints or lw.var sizes, got {value}")


class _ReplaceLoads(Mutator):
    def __init__(self, old: Tensor, new: Tensor):
        self.old, self.new = old, new

    def visit_TensorLoad(self, node):
        node = self.generic_visit(node)
        if node.tensor is self.old:
            return TensorLoad(self.new, node.indices)
        return node


class Schedule:
    """One stage per operation reachable from the outputs, in producer-first order."""

    def __init__(self, outputs: Sequence[Tensor]):
        self.outputs = [t.op for t in outputs]
        self.stages: List[Stage] = []
        # id(op) -> (op, its stage), for every op a handle may name (old ops of rewritten stages too);
        # the op is kept so that its id is never reused while the schedule lives
        self._stage_of: Dict[int, Tuple[object, Stage]] = {}
        for op in _topo_ops(self.outputs):
            self._new_stage(op)
        for op in self.outputs:
            self[op].is_output = True
        self.trace = Trace()
        self.vars: Dict[str, Var] = {}
        for stage in self.stages:
            for t in stage.op.outputs:
                for s in t.shape:
                    for v in collect_vars(s):
                        self.vars.setdefault(v.name, v)

    def __getstate__(self):
        # ids differ in another process (a build worker): the table travels as its (op, stage) pairs
        state = dict(self.__dict__)
        state["_stage_of"] = list(self._stage_of.values())
        return state

    def __setstate__(self, state):
        pairs = state.pop("_stage_of")
        self.__dict__.update(state)
        self._stage_of = {id(op): (op, stage) for op, stage in pairs}

    def _new_stage(self, op, before: Optional[Stage] = None) -> Stage:
        """A stage for ``op``, last or (for the ops cache_read, cache_write, rfactor make) before ``before``."""
        stage = Stage(self, op)
        if before is None:
            self.stages.append(stage)
        else:
            self.stages.insert(self.stages.index(before), stage)
        self._stage_of[id(stage.op)] = (stage.op, stage)
        return stage

    def __getitem__(self, item) -> Stage:
        op = item.op if isinstance(item, Tensor) else item
        stage = self._stage_of.get(id(op), (None, None))[1]
        if stage is None:
            name = getattr(op, "name", repr(item))
            raise ScheduleError(f"'{name}' is not part of this schedule; stages: "
                                f"{', '.join(s.name for s in self.stages)}")
        return stage

    def stage_by_name(self, name: str) -> Stage:
        for stage in self.stages:
            if stage.name == name:
                return stage
        raise ScheduleError(f"no stage named {name!r}; stages: {', '.join(s.name for s in self.stages)}")

    def __repr__(self) -> str:
        return f"Schedule({', '.join(s.name for s in self.stages)})"

    def __str__(self) -> str:
        return schedule_to_str(self)

    def _repr_html_(self) -> str:
        return schedule_html(self)

    # ------------------------------------------------------------- structure
    def consumers_of(self, stage: Stage) -> List[Stage]:
        """Stages that read ``stage``'s outputs, looking through inlined stages."""
        direct = [s for s in self.stages if isinstance(s.op, ComputeOp)
                  and any(t.op is stage.op for t in s.op.input_tensors)]
        result = []
        for s in direct:
            for c in (self.consumers_of(s) if s.attach_type == "inline" else [s]):
                if c not in result:
                    result.append(c)
        return result

    def _owner_of(self, ivar) -> Optional[Stage]:
        for s in self.stages:
            if any(ivar is iv for iv in s.all_iter_vars):
                return s
        return None

    # ------------------------------------------------------- new stages
    def cache_read(self, tensor: Tensor, scope: str, readers) -> Tensor:
        """A copy of ``tensor`` in ``scope`` that ``readers`` read instead of the original."""
        if not isinstance(tensor, Tensor):
            raise ScheduleError(f"cache_read: the first argument must be a tensor, got {tensor!r}")
        if scope not in SCOPES:
            raise ScheduleError(f"cache_read of '{tensor.name}': unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
        readers = list(readers) if isinstance(readers, (list, tuple)) else [readers]
        if not readers:
            raise ScheduleError(f"cache_read of '{tensor.name}': give at least one reader")
        reader_stages = [self[r] for r in readers]
        for rs in reader_stages:
            if not isinstance(rs.op, ComputeOp) or all(t is not tensor for t in rs.op.input_tensors):
                raise ScheduleError(f"cache_read of '{tensor.name}': stage '{rs.name}' does not read '{tensor.name}'")
        name = self._fresh_stage_name(f"{tensor.name}.{scope}")
        cache = compute(tensor.shape, lambda *idx: tensor[idx], name=name)
        first_reader = min(reader_stages, key=self.stages.index)
        self._new_stage(cache.op, before=first_reader).scope = scope
        for rs in reader_stages:
            self._replace_op(rs, _ReplaceLoads(tensor, cache))
        self.trace.record("cache_read", tensor.name, {"scope": scope, "readers": [r.name for r in reader_stages],
                                                       "outputs": [name]})
        return cache

    def cache_write(self, tensor: Tensor, scope: str) -> Tensor:
        """Compute ``tensor`` into a ``scope`` buffer first; the original stage becomes a copy."""
        if not isinstance(tensor, Tensor):
            raise ScheduleError(f"cache_write: the first argument must be a tensor, got {tensor!r}")
        stage = self[tensor]
        if scope not in SCOPES:
            raise ScheduleError(f"cache_write of '{tensor.name}': unknown scope {scope!r}; use one of {', '.join(SCOPES)}")
        if not isinstance(stage.op, ComputeOp):
            raise ScheduleError(f"cache_write of '{tensor.name}': a placeholder has no computation to cache")
        if stage.op.num_outputs != 1:
            raise ScheduleError(f"cache_write of '{tensor.name}': tuple-valued stages are not supported")
        if stage.relations or stage.annotations or stage.attach_type != "root":
            raise ScheduleError(f"cache_write of '{tensor.name}': stage '{stage.name}' was already scheduled; "
                                "call cache_write before any other primitive on it")
        old_op = stage.op
        name = self._fresh_stage_name(f"{tensor.name}.{scope}")
        new_axis = [IterVar(Var(iv.name + ".c"), iv.min, iv.extent, "spatial") for iv in old_op.axis]
        mapping = {old.var: new.var for old, new in zip(old_op.axis, new_axis)}
        body = tuple(substitute(b, mapping) for b in old_op.body)
        cache_op = ComputeOp(name, new_axis, body, old_op.tag, old_op.attrs)
        cache = cache_op.outputs[0]
        self._new_stage(cache_op, before=stage).scope = scope
        copy_op = ComputeOp(old_op.name, old_op.axis, (cache[tuple(iv.var for iv in old_op.axis)],),
                            old_op.tag, old_op.attrs)
        self._retarget(stage, copy_op)
        self.trace.record("cache_write", tensor.name, {"scope": scope, "outputs": [name]})
        return cache

    def rfactor(self, tensor: Tensor, axis: IterVar, factor_axis: int = 0) -> Tensor:
        """Turn reduction axis ``axis`` into a spatial axis of a new stage (partial results)."""
        return rfactor(self, tensor, axis, factor_axis)

    def _fresh_stage_name(self, base: str) -> str:
        return _fresh(base, {s.name for s in self.stages})

    def _replace_op(self, stage: Stage, mutator: Mutator):
        op = stage.op
        body = tuple(mutator.visit(b) for b in op.body)
        self._retarget(stage, ComputeOp(op.name, op.axis, body, op.tag, op.attrs))

    def _retarget(self, stage: Stage, new_op):
        """Point ``stage`` at a rewritten op; old handles (tensors, ops) still find it."""
        old_op = stage.op
        stage.op = new_op
        self._stage_of[id(new_op)] = (new_op, stage)
        self._stage_of.setdefault(id(old_op), (old_op, stage))
        stage.root_iter_vars = list(new_op.axis) + list(new_op.reduce_axis)
        for iv in stage.root_iter_vars:
            if all(iv is not a for a in stage.all_iter_vars):
                stage.all_iter_vars.append(iv)
        stage.leaf_iter_vars = [iv for iv in stage.leaf_iter_vars
                                if iv.kind != "reduce" or any(iv is r for r in new_op.reduce_axis)
                                or _derived_from(stage, iv, new_op.reduce_axis)]
        if self.outputs and any(o is old_op for o in self.outputs):
            self.outputs = [new_op if o is old_op else o for o in self.outputs]
        # consumers that read the old op's tensors now read the new op's tensors
        for s in self.stages:
            if s is not stage and isinstance(s.op, ComputeOp):
                for k, t in enumerate(old_op.outputs):
                    if any(x is t for x in s.op.input_tensors):
                        self._replace_op(s, _ReplaceLoads(t, new_op.outputs[k]))

    def current_tensor(self, tensor: Tensor) -> Tensor:
        """The tensor that now holds what ``tensor`` named (after cache_write/rfactor)."""
        if isinstance(tensor, Tensor) and isinstance(tensor.op, PlaceholderOp) and id(tensor.op) not in self._stage_of:
            return tensor  # an input nothing reads: still a valid (unused) argument of a kernel
        stage = self[tensor]
        return stage.op.outputs[tensor.value_index]


def _derived_from(stage: Stage, ivar: IterVar, roots) -> bool:
    for rel in stage.relations:
        outs = (rel.outer, rel.inner) if isinstance(rel, Split) else (rel.fused,)
        ins = (rel.parent,) if isinstance(rel, Split) else (rel.outer, rel.inner)
        if any(ivar is o for o in outs):
            return any(any(i is r for r in roots) or _derived_from(stage, i, roots) for i in ins)
    return False


def _topo_ops(outputs) -> list:
    order, seen = [], set()

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        for t in op.input_tensors:
            visit(t.op)
        order.append(op)

    for op in outputs:
        visit(op)
    return order


def create_schedule(outputs) -> Schedule:
    """A schedule for ``outputs`` (a tensor or list of tensors), every stage at root."""
    if isinstance(outputs, Tensor):
        outputs = [outputs]
    if not isinstance(outputs, (list, tuple)):
        raise ScheduleError(f"create_schedule takes a tensor or a list of tensors, got {outputs!r}")
    outputs = list(outputs)
    if not outputs or not all(isinstance(t, Tensor) for t in outputs):
        raise ScheduleError(f"create_schedule takes a tensor or a list of tensors, got {outputs!r}")
    return Schedule(outputs)
