"""A task's DAG under other names: positional ones for its key, a record's for replaying it.

Names are the user's spelling, not the computation: ``A @ B`` written with ``X``, ``Y`` and a
reduction axis ``r`` is the same kernel as with ``A``, ``B`` and ``k``, and a record tuned on one
must apply to the other.  ``spelling(args)`` lists a DAG's names in a canonical order (the
placeholders in argument order, then the compute stages producers first, each with its axes,
spatial then reduction); ``renamed(args, names)`` rebuilds the same DAG with other names in that
order.  The task key hashes the lowered IR of ``renamed(args, positional names)``, so it is the
same for every spelling; a record keeps its spelling, and ``translate`` replays its trace on the
record's spelling and the task's side by side, step by step, to say it in the task's names.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional

from ..dsl.expr import Reduce, TensorLoad, Var
from ..dsl.schedule import Schedule, create_schedule
from ..dsl.tensor import ComputeOp, IterVar, PlaceholderOp
from ..dsl.trace import Step, Trace
from ..dsl.visitor import Mutator
from ..errors import ScheduleError

Spelling = List[list]      # [[stage name, [axis names]], ...] in canonical order (JSON-able)


def _compute_ops(args) -> list:
    """The compute ops of ``args``'s DAG, producers first (inputs in first-use order)."""
    seen, order = set(), []

    def visit(op):
        if id(op) in seen:
            return
        seen.add(id(op))
        if isinstance(op, ComputeOp):
            for t in op.input_tensors:
                visit(t.op)
            order.append(op)
    for t in args:
        if isinstance(t.op, ComputeOp):
            visit(t.op)
    return order


def ordered_ops(args) -> list:
    """Every op of the DAG in canonical order: placeholders in argument order (then any other
    placeholder in first-use order), then the compute ops, producers first."""
    computes = _compute_ops(args)
    placeholders: list = []
    for op in [t.op for t in args] + [t.op for c in computes for t in c.input_tensors]:
        if isinstance(op, PlaceholderOp) and all(op is not p for p in placeholders):
            placeholders.append(op)
    return placeholders + computes


def _axes(op) -> list:
    return list(op.axis) + list(op.reduce_axis)


def spelling(args) -> Spelling:
    """The names of ``args``'s DAG in canonical order: each op's name and its axes' names."""
    return [[op.name, [iv.name for iv in _axes(op)]] for op in ordered_ops(args)]


def positional(args) -> Spelling:
    """Names that say only where a stage or axis is: ``p0`` for the first placeholder, ``c1`` for
    the second compute stage, its axes ``i0, i1, ...`` then reductions ``r0, ...``."""
    out, n_in, n_out = [], 0, 0
    for op in ordered_ops(args):
        if isinstance(op, PlaceholderOp):
            out.append([f"p{n_in}", []])
            n_in += 1
        else:
            out.append([f"c{n_out}", [f"i{d}" for d in range(len(op.axis))] +
                        [f"r{d}" for d in range(len(op.reduce_axis))]])
            n_out += 1
    return out


class _Rebuild(Mutator):
    """A body with new variables for the axes, new tensors for the loads; with ``canonical``, the
    variables ``Let`` binds named by first use and a checked index's message blanked (it names a
    tensor and axis of the user's)."""

    def __init__(self, ops: Dict[int, object], axes: Dict[int, IterVar], canonical: bool):
        self.ops, self.axes, self.canonical = ops, axes, canonical
        self.vars: Dict[int, Var] = {}

    def visit_Var(self, node):
        iv = self.axes.get(id(node))
        return iv.var if iv is not None else self.vars.get(id(node), node)

    def visit_Let(self, node):
        if self.canonical and id(node.var) not in self.vars:
            self.vars[id(node.var)] = Var(f"v{len(self.vars)}", node.var.dtype)
        return self.generic_visit(node)

    def visit_TensorLoad(self, node):
        op = self.ops[id(node.tensor.op)]
        return TensorLoad(op.outputs[node.tensor.value_index], tuple(self.visit(i) for i in node.indices))

    def visit_Reduce(self, node):
        return Reduce(node.combiner, tuple(self.visit(s) for s in node.source),
                      tuple(self.axes[id(a.var)] for a in node.axis), self.visit(node.condition), node.value_index)

    def visit_CheckedIndex(self, node):
        node = self.generic_visit(node)
        return dataclasses.replace(node, what="") if self.canonical else node


def renamed(args, names: Spelling, canonical: bool = False) -> list:
    """``args`` rebuilt with the stage and axis names ``names`` (a ``spelling`` of the same
    structure); ``canonical`` also renames the variables that are no axis (see ``_Rebuild``).  A
    ``ValueError`` when ``names`` does not fit the DAG (another number of stages or axes)."""
    ops = ordered_ops(args)
    if len(names) != len(ops) or any(len(n[1]) != len(_axes(op)) for n, op in zip(names, ops)):
        raise ValueError(f"the names of {len(names)} stages do not fit this computation's {len(ops)}")
    new_ops: Dict[int, object] = {}
    for op, (name, axis_names) in zip(ops, names):
        if isinstance(op, PlaceholderOp):
            new_ops[id(op)] = PlaceholderOp(name, op.shape, op.dtype)
            continue
        axes = {id(iv.var): IterVar(Var(n, iv.var.dtype), iv.min, iv.extent, iv.kind)
                for iv, n in zip(_axes(op), axis_names)}
        rebuild = _Rebuild(new_ops, axes, canonical)
        body = tuple(rebuild.visit(b) for b in op.body)
        new_ops[id(op)] = ComputeOp(name, [axes[id(iv.var)] for iv in op.axis], body, op.tag, op.attrs)
    return [new_ops[id(t.op)].outputs[t.value_index] for t in args]


def _outputs(args) -> list:
    return [t for t in args if isinstance(t.op, ComputeOp)]


# which arguments of a trace step name an axis of the step's stage, and which name stages
_AXIS_ARGS = {"split": ("parent",), "vectorize": ("axis",), "parallel": ("axis",), "unroll": ("axis",),
              "bind": ("axis",), "pragma": ("axis",), "storage_align": ("axis",), "rfactor": ("axis",)}
_AXIS_LIST_ARGS = {"fuse": "axes", "reorder": "axes", "reorder_storage": "axes"}


def _names_now(old: Schedule, new: Schedule):
    """Stage and (per stage) axis names of ``old`` -> the same things' names in ``new`` (two
    schedules of one structure, built by the same steps: position says what corresponds)."""
    if len(old.stages) != len(new.stages):
        raise ScheduleError("the schedules of the two spellings diverged")
    stages = {a.name: b.name for a, b in zip(old.stages, new.stages)}
    axes = {a.name: {x.name: y.name for x, y in zip(a.all_iter_vars, b.all_iter_vars)}
            for a, b in zip(old.stages, new.stages)}
    return stages, axes


def _step_in(step: Step, stages: dict, axes: dict) -> Step:
    """``step`` with the names it refers to translated (the names it makes, ``outputs``, are left to
    the schedule that replays it)."""
    def stage(name):
        if name not in stages:
            raise ScheduleError(f"no stage named {name!r}")
        return stages[name]

    def axis(stage_name, name):
        table = axes.get(stage_name, {})
        if name not in table:
            raise ScheduleError(f"stage {stage_name!r} has no axis named {name!r}")
        return table[name]
    a = {k: v for k, v in step.args.items() if k != "outputs"}
    p = step.primitive
    for k in _AXIS_ARGS.get(p, ()):
        if k in a:
            a[k] = axis(step.stage, a[k])
    if p in _AXIS_LIST_ARGS:
        a[_AXIS_LIST_ARGS[p]] = [axis(step.stage, n) for n in a[_AXIS_LIST_ARGS[p]]]
    if p == "compute_at":
        a["axis"] = axis(a["parent"], a["axis"])
        a["parent"] = stage(a["parent"])
    if p == "cache_read":
        a["readers"] = [stage(r) for r in a["readers"]]
    return Step(p, stage(step.stage), a)


def translate(trace_json: str, names: Optional[Spelling], args) -> Schedule:
    """A schedule of ``args``'s own tensors with the trace of a record made for the spelling
    ``names`` of the same computation (None or ``args``'s own spelling: applied as it is).  A
    ``ScheduleError`` (or ``ValueError`` for names that do not fit) when the trace does not apply."""
    outputs = _outputs(args)
    target = create_schedule(outputs)
    trace = Trace.from_json(trace_json)
    if names is None or names == spelling(args):
        trace.apply(target)
        return target
    source = create_schedule(_outputs(renamed(args, names)))
    for step in trace:
        stages, axes = _names_now(source, target)
        Trace([step]).apply(source)
        Trace([_step_in(step, stages, axes)]).apply(target)
    return target
