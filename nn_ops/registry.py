"""Default schedules: a table from (op tag, target kind) to a schedule function.

Ops tag their compute (``ComputeOp.tag``); ``schedule(outputs, target)`` creates a
schedule, inlines elementwise stages and applies the registered schedule of every
tagged stage.  Schedule functions are plain functions ``(s, op, target) -> None``
over the public schedule API, readable as examples of how to schedule.
"""
from __future__ import annotations

from typing import Callable, Dict, Tuple

from ..dsl.schedule import Schedule, create_schedule
from ..dsl.tensor import ComputeOp, Tensor
from ..target import resolve_target

_SCHEDULES: Dict[Tuple[str, str], Callable] = {}

INJECTIVE_TAGS = ("elemwise", "broadcast", "injective")


def register_schedule(tag: str, target_kind: str = "llvm"):
    def decorate(fn: Callable) -> Callable:
        _SCHEDULES[(tag, target_kind)] = fn
        return fn
    return decorate


def schedule(outputs, target="llvm") -> Schedule:
    """A schedule for ``outputs`` with every op's default schedule for ``target`` applied."""
    tgt = resolve_target(target)
    outs = [outputs] if isinstance(outputs, Tensor) else list(outputs)
    s = create_schedule(outs)
    out_ops = {id(t.op) for t in outs}
    for stage in list(s.stages):
        op = stage.op
        if not isinstance(op, ComputeOp):
            continue
        if op.tag in INJECTIVE_TAGS and id(op) not in out_ops:
            stage.compute_inline()
    for stage in list(s.stages):
        op = stage.origin_op
        if not isinstance(op, ComputeOp) or stage.attach_type == "inline":
            continue
        fn = _SCHEDULES.get((op.tag, tgt.kind))
        if fn is not None:
            fn(s, op, tgt)
        elif id(op) in out_ops and op.tag in INJECTIVE_TAGS:
            schedule_injective(s, op, tgt)
    return s


def schedule_injective(s: Schedule, op: ComputeOp, target) -> None:
    """Fuse the outer axes into one parallel loop, vectorize the innermost axis."""
    stage = s[op]
    axes = list(stage.leaf_iter_vars)
    if not axes:
        return
    lanes = target.lanes(op.outputs[0].dtype)
    inner = axes[-1]
    from ..dsl.expr import Const
    if isinstance(inner.extent, Const) and inner.extent.value >= lanes:
        outer, vec = stage.split(inner, factor=lanes)
        stage.vectorize(vec)
        axes = axes[:-1] + [outer]
    if len(axes) > 1:
        fused = stage.fuse(*axes)
        stage.parallel(fused)
    elif axes:
        stage.parallel(axes[0])
