"""``tuned_schedule``: a tuning record of static sizes applied to a kernel of symbolic sizes.

The tuner times real runs, so its records are of static kernels (``lw.extract_tasks`` of a
DynamicGraph gives the compile-once kernels at one binding).  A record applies to a compile-once
kernel when its sizes (the record's ``shapes``) are a binding the kernel covers
(``KernelRecipe.binding_of``) and the kernel at that binding is the record's computation (the same
task key: same op, attributes, constant sizes and dtypes).  Its trace is then replayed on the
kernel of ``lw.var`` extents: a split by a constant factor splits a symbolic extent with a tail, as
it does a static one.  What does not replay there (a step the symbolic DAG does not have), does not
lower, or would lose a decision (an unrolled or vectorized loop whose extent is symbolic there stays
serial: a ``ScheduleWarning``) is refused, the kernel keeps its default
schedule, and one ``RecordWarning`` per kernel says why.

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
from ...dsl.schedule import Schedule
from ...errors import LoopweaveError, ScheduleWarning
from ...lowering.lower import lower
from .instance import KernelRecipe, volume


def tuned_schedule(log, target, recipe: KernelRecipe, args: list) -> Optional[Schedule]:
    """A schedule of ``args`` (the kernel of symbolic sizes ``recipe`` made) from the best record of
    ``log`` that applies to it, or None (see the module docstring)."""
    refused: List[Tuple[Dict[object, int], str]] = []
    for binding in _tuned_bindings(log, target, recipe):
        picked = best_record(log, Task(recipe.args_at(binding), target))
        if picked is None:          # another computation of the same sizes, or no usable record
            continue
        why, s = _replayed(picked[0], args)
        if why is None:
            return s
        refused.append((binding, why))
    if refused:
        binding, why = refused[0]
        at = ", ".join(f"{d}={v}" for d, v in binding.items())
        warnings.warn(f"{log}: {len(refused)} tuning record(s) of kernel {recipe.name!r} do not replay on its "
                      f"symbolic sizes (the first, tuned at {at}: {why}); it keeps its default schedule",
                      records.RecordWarning, stacklevel=4)
    return None


def _replayed(record: dict, args: list) -> Tuple[Optional[str], Optional[Schedule]]:
    """(None, the record's schedule of ``args``), or (why it does not carry over, None): a step the
    DAG refuses, a lowering that fails, or a decision that lowering would drop at a symbolic extent
    (a ``ScheduleWarning``: an unrolled or vectorized loop left serial runs slower than the default)."""
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always", ScheduleWarning)
        try:
            s = translate(record["trace"], record.get("names"), args)
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
