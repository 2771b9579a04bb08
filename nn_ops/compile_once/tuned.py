"""``tuned_schedule``: a tuning record of static sizes applied to a kernel of symbolic sizes.

The tuner times real runs, so its records are of static kernels (``lw.extract_tasks`` of a
DynamicGraph gives the compile-once kernels at one binding).  A record applies to a compile-once
kernel when its sizes (the record's ``shapes``) are a binding the kernel covers
(``KernelRecipe.binding_of``) and the kernel at that binding is the record's computation (the same
task key: same op, attributes, constant sizes and dtypes).  Its trace is then replayed on the
kernel of ``lw.var`` extents: a split by a constant factor splits a symbolic extent with a tail, as
it does a static one.  What does not replay there (a step the symbolic DAG does not have), does not
lower, fuses loops into one of symbolic extent (whose index is not affine: bound inference would
take whole tensors below it) or would lose a decision (an unrolled or vectorized loop whose extent
is symbolic there stays serial: a ``ScheduleWarning``) is refused and the next record of the
ranking tried (up to ``REFUSALS`` per binding); a kernel that none serves keeps its default
schedule, and a ``RecordWarning`` says why.

Where records of several bindings apply (several shapes were tuned), the largest binding's wins (by
the product of the kernel's sizes there): a compile-once kernel spends its time at its large
bindings, and tiles chosen there run small ones with tails, while tiles chosen for a small binding
can leave a large one's registers and caches idle.  Records written before they carried their sizes
(no ``shapes``) cannot be matched and are not used.
"""
from __future__ import annotations

import warnings
from typing import Dict, List, Optional, Tuple

from ...autoschedule import records
from ...autoschedule.canonical import translate
from ...autoschedule.replay import best_record
from ...autoschedule.task import Task
from ...dsl.expr import Const
from ...dsl.relations import Fuse
from ...dsl.schedule import Schedule
from ...errors import LoopweaveError, ScheduleWarning
from ...lowering.lower import lower
from .instance import KernelRecipe, volume


def tuned_schedule(log, target, recipe: KernelRecipe, args: list) -> Optional[Schedule]:
    """A schedule of ``args`` (the kernel of symbolic sizes ``recipe`` made) from the best record of
    ``log`` that applies to it, or None (see the module docstring)."""
    replayed: Dict[int, Schedule] = {}

    def carries_over(record: dict) -> Optional[str]:
        why, s = _replayed(record, args)
        if s is not None:
            replayed[id(record)] = s
        return None if why is None else f"{recipe.name} over symbolic sizes: {why}"
    for binding in _tuned_bindings(log, target, recipe):
        # (another computation of the same sizes has another key: no record)
        picked = best_record(log, Task(recipe.args_at(binding), target), accept=carries_over, refusals=REFUSALS)
        if picked is not None:
            return replayed[id(picked[0])]
    return None


#: records of one binding replayed on the symbolic kernel before it keeps its default (each a lowering)
REFUSALS = 4


def _replayed(record: dict, args: list) -> Tuple[Optional[str], Optional[Schedule]]:
    """(None, the record's schedule of ``args``), or (why it does not carry over, None): a step the
    DAG refuses, a lowering that fails, or a decision that lowering would drop at a symbolic extent
    (a ``ScheduleWarning``: an unrolled or vectorized loop left serial runs slower than the default)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ScheduleWarning)
        try:
            s = translate(record["trace"], record.get("names"), args)
            fused = _symbolic_fuse(s)
            if fused is not None:
                return fused, None
            lower(s, args)
        except (LoopweaveError, ValueError) as exc:
            return f"{type(exc).__name__}: {exc}"[:300], None
    dropped = [w for w in seen if issubclass(w.category, ScheduleWarning)]
    for w in seen:
        if w not in dropped:
            warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    if dropped:
        return str(dropped[0].message)[:300], None
    return None, s


def _symbolic_fuse(s: Schedule) -> Optional[str]:
    """Why ``s`` cannot run well over symbolic sizes, where it fuses loops into one of symbolic extent:
    the fused index divides by a size, bound inference takes whole tensors below it, and a stage
    computed there is computed whole every iteration (a tuned dense layer ran ~1000x slower)."""
    for stage in s.stages:
        for rel in stage.relations:
            if isinstance(rel, Fuse) and not isinstance(rel.fused.extent, Const):
                return (f"stage {stage.name!r} fuses {rel.outer.var.name!r} and {rel.inner.var.name!r} into a loop of "
                        f"symbolic extent (a fused index of symbolic sizes is not affine: bound inference takes "
                        f"whole tensors below it)")
    return None


def _tuned_bindings(log, target, recipe: KernelRecipe) -> List[Dict[object, int]]:
    """The distinct bindings of ``recipe``'s sizes that records of ``log`` for ``target`` were
    measured at, largest first (ties: the first seen in the log)."""
    found: Dict[tuple, Dict[object, int]] = {}
    for r in records.read(log, target, any_version=True):
        shapes = r.get("shapes")
        if not shapes:
            continue
        key = tuple(tuple(s) for s in shapes)
        if key in found:
            continue
        found[key] = recipe.binding_of(shapes)
    bindings, seen = [], set()
    for b in found.values():
        if b is not None and tuple(b.items()) not in seen:
            seen.add(tuple(b.items()))
            bindings.append(b)
    return sorted(bindings, key=volume, reverse=True)
