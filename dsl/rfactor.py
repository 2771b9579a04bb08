"""rfactor: turn one reduction axis into a spatial axis of a new stage.

``CF = s.rfactor(C, ki)`` for ``C[i] = sum_k A[i, k]`` split as ``k = ko*f + ki``
makes ``CF[ki, i] = sum_ko A[i, ko*f + ki]`` (guarded where the split has a tail)
and rewrites ``C[i] = sum_ki CF[ki, i]``.  The partial sums are independent, so the
factored axis can be vectorized or run in parallel.
"""
from __future__ import annotations

from ..errors import ScheduleError
from .expr import Const, Reduce, Var, const, logical_and, select
from .relations import Split, derive_extents, needs_guard, root_values
from .tensor import ComputeOp, IterVar
from .visitor import substitute


def rfactor(schedule, tensor, axis, factor_axis: int = 0):
    stage = schedule[tensor]
    op = stage.op
    where = f"rfactor on stage '{stage.name}'"
    if not isinstance(op, ComputeOp) or not op.reduce_axis:
        raise ScheduleError(f"{where}: the stage is not a reduction")
    if op.num_outputs != 1:
        raise ScheduleError(f"{where}: tuple reductions cannot be factored")
    stage._check_leaf("rfactor", axis)
    if axis.kind != "reduce":
        raise ScheduleError(f"{where}: axis '{axis.name}' is spatial; rfactor takes a reduction axis")
    spatial_relations = [r for r in stage.relations if (r.parent if isinstance(r, Split) else r.outer).kind != "reduce"]
    if spatial_relations or stage.annotations or stage.attach_type != "root":
        raise ScheduleError(f"{where}: call rfactor before scheduling the stage's spatial axes "
                            f"(only splits/fuses of reduction axes may come first)")
    if not isinstance(factor_axis, int) or not 0 <= factor_axis <= len(op.axis):
        raise ScheduleError(f"{where}: factor_axis must be an int in [0, {len(op.axis)}], got {factor_axis!r}")
    body: Reduce = op.body[0]
    extents = derive_extents({iv: iv.extent for iv in op.reduce_axis}, stage.relations)
    reduce_leaves = [iv for iv in stage.leaf_iter_vars if iv.kind == "reduce"]
    rf_var = IterVar(Var(axis.name + ".rf"), const(0), extents[axis], "spatial")
    new_reduce = {iv: IterVar(Var(iv.name + ".r"), const(0), extents[iv], "reduce")
                  for iv in reduce_leaves if iv is not axis}
    leaf_values = {iv: nv.var for iv, nv in new_reduce.items()}
    leaf_values[axis] = rf_var.var
    values = root_values(leaf_values, stage.relations, extents)
    new_axis = [IterVar(Var(iv.name), iv.min, iv.extent, "spatial") for iv in op.axis]
    spatial_map = {old.var: new.var for old, new in zip(op.axis, new_axis)}
    mapping = {iv.var: iv.min + values[iv] for iv in op.reduce_axis}
    mapping.update(spatial_map)  # the condition may use spatial axes too (e.g. where=k <= i)
    guard = const(True)
    for rel in stage.relations:
        if isinstance(rel, Split) and needs_guard(rel, extents):
            guard = logical_and(guard, values[rel.parent] < extents[rel.parent])
    # the guard comes first and protects the where= condition, which may read tensors (where=A[i, k] > 0)
    # at the indices of the split's tail: a select evaluates it only inside the domain
    where = substitute(body.condition, mapping)
    condition = guard if isinstance(where, Const) and where.value else select(guard, where, const(False))
    source = tuple(substitute(src, mapping) for src in body.source)
    rf_axes = new_axis[:factor_axis] + [rf_var] + new_axis[factor_axis:]
    name = schedule._fresh_stage_name(f"{op.name}.rf")
    if new_reduce:
        rf_body = Reduce(body.combiner, source, tuple(new_reduce.values()), condition, 0)
        rf_op = ComputeOp(name, rf_axes, (rf_body,), op.tag, op.attrs)
    else:
        rf_op = ComputeOp(name, rf_axes, (select(condition, source[0], body.combiner.identity[0]),), op.tag, op.attrs)
    rf_tensor = rf_op.outputs[0]
    schedule._new_stage(rf_op, before=stage)
    # the original stage now sums the partial results over the factored axis
    k_final = IterVar(Var(axis.name + ".v"), const(0), extents[axis], "reduce")
    idx = [iv.var for iv in op.axis]
    idx = idx[:factor_axis] + [k_final.var] + idx[factor_axis:]
    final = Reduce(body.combiner, (rf_tensor[tuple(idx)],), (k_final,), const(True), 0)
    new_op = ComputeOp(op.name, op.axis, (final,), op.tag, op.attrs)
    stage.relations = []
    stage.annotations = {}
    stage.all_iter_vars = list(op.axis) + [k_final]
    stage.leaf_iter_vars = list(op.axis) + [k_final]
    schedule._retarget(stage, new_op)
    schedule.trace.record("rfactor", stage.name, {"axis": axis.name, "factor_axis": factor_axis, "outputs": [name]})
    return rf_tensor
