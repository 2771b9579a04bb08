"""Tuning records: JSON Lines, one measured candidate a line, append-only.

A line holds the task key, the names of the task's stages and axes the trace uses (``names``,
see ``canonical.spelling``), the target (CPU name and features), the decisions, the
trace (as its JSON text), the measured seconds (null on error), the error, the CPU model and host
that measured it (``measured_on``: a time counts only from a machine of the target's CPU), the
loopweave version, and the sizes of the task's arguments (``shapes``: the key, a hash, cannot give
them back, and the compile-once compiler matches records to kernels of symbolic sizes by them).
Reading skips a corrupt line (not JSON, or a field of the wrong type: a target
that is not ``{"cpu": str, "features": str}``, a trace that is not a list of steps, seconds that are
not a number, ...) with a warning naming its number, and ignores lines of another target.  Lines of
another loopweave version are kept apart (``read(..., any_version=True)``): the tuner resumes only
from its own version's, and ``replay.best_schedule`` uses the others once they are checked.
"""
from __future__ import annotations

import json
import os
import warnings
from importlib import metadata
from typing import Dict, Iterator, List, Optional

from ..errors import ArgumentError, LoopweaveWarning
from ..target import Target

try:
    VERSION = metadata.version("loopweave")
except metadata.PackageNotFoundError:   # running from a source tree without an install
    VERSION = "unknown"


class RecordWarning(LoopweaveWarning):
    """A tuning log line could not be read and was skipped."""


def make_record(task_key: str, target: Target, choice: dict, trace_json: str, seconds: Optional[float],
                error: Optional[str], trial: int, build_seconds: float = 0.0,
                measured_on: Optional[dict] = None, names: Optional[list] = None,
                shapes: Optional[list] = None) -> dict:
    """One line of the log; ``measured_on``: the CPU model and host that timed it, when it ran;
    ``names``: the spelling of the task the trace is written in; ``shapes``: its arguments' sizes
    (what the compile-once compiler matches kernels of symbolic sizes by; a record without them
    applies to kernels of static sizes only)."""
    r = {"task": task_key, "target": {"cpu": target.cpu, "features": target.features},
         "choice": choice, "trace": trace_json, "seconds": seconds, "error": error, "trial": trial,
         "build_seconds": round(build_seconds, 4), "version": VERSION}
    if measured_on:
        r["measured_on"] = measured_on
    if names is not None:
        r["names"] = names
    if shapes is not None:
        r["shapes"] = [[int(d) for d in shape] for shape in shapes]
    return r


def prepare(path) -> None:
    """Make ``path`` ready to append to before any tuning starts (its folders created), or raise an
    ArgumentError naming it: a log that cannot be written should fail in the first second, not
    after the first round of measurements."""
    if not path:
        return
    if os.path.isdir(path):
        raise ArgumentError(f"tuning log {path!r} is a directory, not a JSON Lines file")
    folder = os.path.dirname(os.path.abspath(path))
    try:
        os.makedirs(folder, exist_ok=True)
        with open(path, "a", encoding="utf-8"):
            pass
    except OSError as exc:
        raise ArgumentError(f"tuning log {path!r} cannot be written ({exc.strerror or exc}); "
                            "give a log path in a writable folder") from None


def append(path, records: List[dict]) -> None:
    if not path or not records:
        return
    with open(path, "a", encoding="utf-8") as fh:
        for r in records:
            fh.write(json.dumps(r, sort_keys=True) + "\n")
        fh.flush()


def read(path, target: Optional[Target] = None, task_key=None, any_version: bool = False) -> Iterator[dict]:
    """The usable records of ``path`` of this loopweave version (of every version with
    ``any_version``), optionally of one target and of one task key (or any of a collection of keys)."""
    keys = None if task_key is None else ({task_key} if isinstance(task_key, str) else set(task_key))
    for r in _parsed(path):
        if not any_version and r.get("version") != VERSION:
            continue
        if target is not None and (r["target"].get("cpu") != target.cpu
                                   or r["target"].get("features") != target.features):
            continue
        if keys is not None and r["task"] not in keys:
            continue
        yield r


def task_keys(path, task) -> tuple:
    """The keys ``task``'s records may carry in ``path``: its key, and its key of the scheme before
    (``Task.legacy_key``, one more lowering) only when the log has records of that time, the ones
    without ``names``."""
    if any(r.get("names") is None for r in _parsed(path)):
        return task.key, task.legacy_key
    return (task.key,)


_PARSED: Dict[str, tuple] = {}     # path -> (mtime_ns, size, its records)


def check_exists(path, who: str) -> None:
    """An ``ArgumentError`` naming ``who`` when the log ``path`` to read records from does not exist
    (a mistyped name would otherwise read as a log without a matching record)."""
    if not isinstance(path, (str, os.PathLike)) or not os.fspath(path):
        raise ArgumentError(f"{who}: give the path of a tuning log (written by tune / 'loopweave tune'), "
                            f"got {path!r}")
    if not os.path.exists(path):
        raise ArgumentError(f"{who}: the tuning log {str(path)!r} does not exist (working directory "
                            f"{os.getcwd()!r}); give the path of a log written by tune / 'loopweave tune'")


def _parsed(path) -> List[dict]:
    """The file's records, parsed once per change of the file: a network compile asks
    for every kernel's best record, and a log of thousands of lines should be read once, with each
    corrupt line reported once."""
    if path is None or not os.path.exists(path):
        return []
    if os.path.isdir(path):
        raise ArgumentError(f"tuning log {path!r} is a directory, not a JSON Lines file")
    stat = os.stat(path)
    cached = _PARSED.get(str(path))
    if cached is not None and cached[:2] == (stat.st_mtime_ns, stat.st_size):
        return cached[2]
    with open(path, "rb") as fh:
        head = fh.read(1)
    if head and head not in b"{ \n\r\t":
        raise ArgumentError(f"tuning log {path!r} is not JSON Lines (its first byte is {head!r}; "
                            "a log has one JSON object per line)")
    found = []
    with open(path, encoding="utf-8", errors="replace") as fh:
        for lineno, line in enumerate(fh, 1):
            if not line.strip():
                continue
            try:
                r = json.loads(line)
                problem = record_problem(r)
                if problem is not None:
                    raise ValueError(problem)
            except ValueError as exc:
                warnings.warn(f"{path}:{lineno}: skipped a corrupt tuning record ({exc})", RecordWarning, stacklevel=3)
                continue
            found.append(r)
    _PARSED[str(path)] = (stat.st_mtime_ns, stat.st_size, found)
    return found


def _number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _is_spelling(names) -> bool:
    return isinstance(names, list) and all(
        isinstance(n, list) and len(n) == 2 and isinstance(n[0], str) and isinstance(n[1], list)
        and all(isinstance(a, str) for a in n[1]) for n in names)


def _are_shapes(shapes) -> bool:
    return isinstance(shapes, list) and all(
        isinstance(s, list) and all(isinstance(d, int) and not isinstance(d, bool) and d >= 0 for d in s)
        for s in shapes)


def _trace_problem(text) -> Optional[str]:
    """What is wrong with a record's trace (its JSON text: ``{"version", "steps": [{"primitive",
    "stage", "args"}, ...]}``), or None."""
    if not isinstance(text, str):
        return f"a trace of type {type(text).__name__}, not the trace's JSON text"
    try:
        data = json.loads(text)
    except ValueError:
        return "a trace that is not JSON"
    steps = data.get("steps") if isinstance(data, dict) else None
    if not isinstance(steps, list):
        return "a trace without a list of steps"
    for k, step in enumerate(steps):
        if not (isinstance(step, dict) and isinstance(step.get("primitive"), str) and isinstance(step.get("stage"), str)
                and isinstance(step.get("args", {}), dict)):
            return f"a trace whose step {k} is not {{'primitive': str, 'stage': str, 'args': dict}}"
    return None


def record_problem(r) -> Optional[str]:
    """Why ``r`` (a parsed line) is not a usable tuning record, or None."""
    if not isinstance(r, dict):
        return f"not a tuning record (a JSON {type(r).__name__})"
    missing = [k for k in ("task", "trace", "target") if k not in r]
    if missing:
        return f"not a tuning record (no {', '.join(repr(k) for k in missing)})"
    target = r["target"]
    if not (isinstance(target, dict) and isinstance(target.get("cpu"), str) and isinstance(target.get("features"), str)):
        return f"a target that is not {{'cpu': str, 'features': str}}: {target!r:.60}"
    if not isinstance(r["task"], str):
        return f"a task key of type {type(r['task']).__name__}"
    if r.get("seconds") is not None and not (_number(r["seconds"]) and r["seconds"] >= 0):
        return f"seconds that are not a non-negative number: {r['seconds']!r:.40}"
    if r.get("ratio_to_default") is not None and not _number(r["ratio_to_default"]):
        return f"a ratio_to_default that is not a number: {r['ratio_to_default']!r:.40}"
    if r.get("error") is not None and not isinstance(r["error"], str):
        return f"an error of type {type(r['error']).__name__}"
    if "choice" in r and not isinstance(r["choice"], dict):
        return f"a choice of type {type(r['choice']).__name__}"
    if r.get("names") is not None and not _is_spelling(r["names"]):
        return f"names that are not [[stage, [axis, ...]], ...]: {r['names']!r:.60}"
    if r.get("shapes") is not None and not _are_shapes(r["shapes"]):
        return f"shapes that are not [[size, ...], ...] of whole numbers >= 0: {r['shapes']!r:.60}"
    return _trace_problem(r["trace"])


def best(path, target: Target, task_key: str) -> Optional[dict]:
    """The fastest schedule for the task key among this version's records, each schedule (trace)
    at its newest measurement (``latest``): a verification that re-measured a schedule next to the
    default supersedes its first, possibly lucky, time, and once the task has verified records
    only those are considered."""
    return fastest(latest(read(path, target, task_key)))


def latest(found) -> List[dict]:
    """Each schedule (trace) of ``found`` at its newest record."""
    out = {}
    for r in found:
        out[r.get("trace")] = r
    return list(out.values())


def fastest(candidates) -> Optional[dict]:
    """The fastest measured record of ``candidates`` (one per schedule).

    Once some were verified side by side with the default (``TaskTuner.verify_against``), only
    those count, and a pick that won its comparison beats the default by its ratio, not by its
    median: two verifications' medians come from different runs (a later one timed a 64-us
    conv's default below the median of a pick that had won 1.043x beside it).  Of several
    winners, the largest ratio."""
    found = [r for r in candidates if r.get("seconds") is not None and not r.get("error")]
    verified = [r for r in found if r.get("verified")]
    winners = [r for r in verified if r.get("ratio_to_default")]
    if winners:
        return max(winners, key=lambda r: r["ratio_to_default"])
    found = verified or found
    return min(found, key=lambda r: r["seconds"]) if found else None
