"""validate_schedule: the checks that judge a schedule as a whole, run when it is lowered.

A primitive checks at call time only what concerns that call: its arguments, that an
axis is a leaf axis of its stage now, that an output stays at root.  Whether a stage
may be computed at a loop depends on where *other* stages end up (its consumers must
run inside that loop; the loop must still exist; the host must not be inlined), and
those may change with later calls.  So these checks run here, once the schedule is
complete: the order of the calls that made a legal schedule does not matter (TOPI's
softmax attaches the row max, the exponentials and their sum at the output's row loop
in that order, each before its consumer is placed).

Messages name the stage, the axis, the stage that breaks the rule, the call as code,
and where the stage could be computed instead.
"""
from __future__ import annotations

from typing import List, Tuple

from ..errors import ScheduleError


def validate_schedule(schedule) -> None:
    """Raise ScheduleError for the first stage whose placement the whole schedule does not allow."""
    for stage in schedule.stages:
        if stage.attach_type == "scope":
            _check_attach_point(schedule, stage)


def computed_within(stage, host, axis) -> bool:
    """Whether ``stage`` is computed (transitively) inside loop ``axis`` of ``host``."""
    current, seen = stage, set()
    while current.attach_type == "scope" and id(current) not in seen:
        seen.add(id(current))
        if current.attach_stage is host:
            leaves = host.leaf_iter_vars
            return (current.attach_ivar in leaves and axis in leaves
                    and leaves.index(current.attach_ivar) >= leaves.index(axis))
        current = current.attach_stage
    return False


def legal_attach_points(schedule, stage) -> List[Tuple[object, object]]:
    """Every (host stage, leaf axis) where ``stage`` could be computed, the rest of the schedule as it is."""
    consumers = schedule.consumers_of(stage)
    if not consumers:
        return []
    points = []
    for host in schedule.stages:
        if host is stage or host.attach_type == "inline" or not host.leaf_iter_vars or _inside(host, stage):
            continue
        for axis in host.leaf_iter_vars:
            if all(c is host or computed_within(c, host, axis) for c in consumers):
                points.append((host, axis))
    return points


def _inside(stage, ancestor) -> bool:
    """Whether ``stage`` is computed inside a loop of ``ancestor`` (following compute_at links)."""
    current, seen = stage, set()
    while current.attach_type == "scope" and id(current) not in seen:
        seen.add(id(current))
        current = current.attach_stage
        if current is ancestor:
            return True
    return False


def _ident(name: str) -> str:
    return name.replace(".", "_")


def _error(stage, message: str, fix: str) -> ScheduleError:
    host, axis = stage.attach_stage, stage.attach_ivar
    call = f"s[{_ident(stage.name)}].compute_at(s[{_ident(host.name)}], {_ident(axis.name)})"
    return ScheduleError(f"compute_at on stage '{stage.name}': {message}\n  the call: {call}\n  fix: {fix}")


def _alternatives(schedule, stage) -> str:
    points = legal_attach_points(schedule, stage)
    if not points:
        return f"compute it at root (s[{_ident(stage.name)}].compute_root())"
    shown = ", ".join(f"{host.name}.{axis.name}" for host, axis in points[:8])
    more = f" (and {len(points) - 8} more)" if len(points) > 8 else ""
    return f"compute it at root, or at one of {shown}{more}"


def _check_attach_point(schedule, stage) -> None:
    host, axis = stage.attach_stage, stage.attach_ivar
    if _inside(host, stage):
        raise _error(stage, f"'{host.name}' is itself computed inside '{stage.name}'; that would be a cycle",
                     f"compute one of them at root: {_alternatives(schedule, stage)}")
    if host.attach_type == "inline":
        raise _error(stage, f"'{host.name}' is inlined (compute_inline), so it has no loop '{axis.name}' "
                            f"to compute '{stage.name}' in",
                     f"keep '{host.name}' as a stage, or {_alternatives(schedule, stage)}")
    if all(axis is not iv for iv in host.leaf_iter_vars):
        became = host._became(axis) or ": it is no longer one of its loops"
        raise _error(stage, f"axis '{axis.name}' of '{host.name}' is not a leaf axis when the schedule is "
                            f"lowered{became}",
                     f"split or fuse first, then compute_at one of the leaf axes of '{host.name}': "
                     f"{', '.join(iv.name for iv in host.leaf_iter_vars)}")
    consumers = schedule.consumers_of(stage)
    names = ", ".join(f"'{c.name}'" for c in consumers) or "no stage"
    outside = [c for c in consumers if c is not host and not computed_within(c, host, axis)]
    if len(outside) == len(consumers) and host not in consumers:
        raise _error(stage, f"stage '{host.name}' does not read '{stage.name}' (it is read by {names}), and no "
                            f"stage that does is computed inside loop '{axis.name}' of '{host.name}'",
                     f"compute_at one of the stages that read it ({names}), or a stage they are computed "
                     f"inside, at a loop that encloses them: {_alternatives(schedule, stage)}")
    if outside:
        raise _error(stage, f"'{stage.name}' is also read by {', '.join(repr(c.name) for c in outside)}, which "
                            f"is not computed inside loop '{axis.name}' of '{host.name}'; a stage computed there "
                            f"is not visible to it",
                     f"compute those readers inside that loop too, or cache_read it once per consumer, or "
                     f"{_alternatives(schedule, stage)}")
