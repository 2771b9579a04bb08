"""The best record of a task in a log written in another spelling, version or key scheme.

A log outlives the compiler that wrote it and the names it was written with.  ``best_schedule``
takes the task's records of every loopweave version, under its key or under the key scheme before
(``Task.legacy_key``), ranks them as ``records.fastest`` does, and walks down the ranking: a record
of this version under the current key is used as it is, translated to the task's names
(``canonical.translate``); any other is replayed, built and run once against the untuned build on
random inputs (``measure.wrong_answer``, the check every measured candidate passes) and used only
if it computes the same.  A record that no longer applies, builds or computes the same is skipped,
and the skips are told in one warning per call naming how many and why, never raised: a stale log
costs its tuning, not the compile.  Verdicts are kept for the process, so a network compiled twice
checks each record once.
"""
from __future__ import annotations

import json
import warnings
from typing import Callable, Dict, List, Optional, Tuple

from ..dsl.schedule import Schedule
from . import records
from .canonical import translate
from .measure import wrong_answer
from .task import Task

_VERDICTS: Dict[tuple, Optional[Tuple[str, str]]] = {}    # (task spelling, record's) -> why skipped, or None


def _trusted(r: dict, task: Task) -> bool:
    """Measured, and checked, by this version for this key scheme."""
    return r.get("version") == records.VERSION and r["task"] == task.key


def _judged(r: dict, task: Task) -> Tuple[Optional[Schedule], Optional[Tuple[str, str]]]:
    """``r``'s schedule for ``task`` and None, or None and (what failed, why)."""
    memo = (task.spelling_key, r.get("version"), json.dumps(r.get("names")), r["trace"])
    known = _VERDICTS.get(memo, "unknown")
    if known not in ("unknown", None):
        return None, known
    try:
        s = translate(r["trace"], r.get("names"), task.args)
    except Exception as exc:     # a step that names what is not there, a primitive now refused, ...
        verdict = ("no longer apply", f"{type(exc).__name__}: {exc}"[:300])
    else:
        verdict = None if known is None or _trusted(r, task) else wrong_answer(task.args, s)
    _VERDICTS[memo] = verdict
    return (s if verdict is None else None), verdict


def best_schedule(log, task: Task) -> Optional[Schedule]:
    """A schedule of ``task``'s own tensors from the fastest usable record of ``log`` for its
    target, or None when none is usable (see the module docstring)."""
    picked = best_record(log, task)
    return picked[1] if picked is not None else None


def best_record(log, task: Task, accept: Optional[Callable[[dict], Optional[str]]] = None,
                refusals: int = 8) -> Optional[Tuple[dict, Schedule]]:
    """The fastest usable record of ``log`` for ``task`` and its schedule of ``task``'s tensors, or
    None (``best_schedule``).  ``accept(record)``: why a usable record does not serve the caller
    (its trace replayed on another DAG of the computation, a kernel of symbolic sizes), or None; the
    walk then goes on down the ranking, giving up after ``refusals`` such records (each costs the
    caller a replay).  Skips and refusals are told in one warning."""
    found = records.read(log, task.target, records.task_keys(log, task), any_version=True)
    candidates = [r for r in records.latest(found)
                  if r["task"] == task.key or r.get("names") is None]   # the old scheme's: this spelling's
    skipped: List[Tuple[dict, Tuple[str, str]]] = []
    refused = 0
    try:
        while refused < refusals:
            pick = records.fastest(candidates)
            if pick is None:
                return None
            schedule, why = _judged(pick, task)
            if why is None and accept is not None:
                reason = accept(pick)
                if reason is not None:
                    why, refused = ("do not carry over", reason), refused + 1
            if why is None:
                return pick, schedule
            skipped.append((pick, why))
            candidates = [r for r in candidates if r is not pick]
        return None
    finally:
        if skipped:
            _warn(log, task, skipped)


def _warn(log, task: Task, skipped) -> None:
    kinds: Dict[str, list] = {}
    for r, (kind, detail) in skipped:
        kinds.setdefault(kind, []).append((r, detail))
    parts = []
    for kind, items in kinds.items():
        r, detail = items[0]
        parts.append(f"{len(items)} {kind} (the first, written by loopweave {r.get('version')!r}: {detail})")
    warnings.warn(f"{log}: skipped {len(skipped)} tuning record(s) of {task!r}: " + "; ".join(parts),
                  records.RecordWarning, stacklevel=3)
