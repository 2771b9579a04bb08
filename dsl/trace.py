"""The replayable record of schedule primitives.

Each step names the primitive, the stage it applied to and its arguments, with axes
referred to by name.  ``str(trace)`` prints the steps as the user's Python code;
``to_json``/``from_json`` round-trip; ``apply(schedule)`` replays the steps on a fresh
schedule of the same computation (the autoscheduler and tuning records use this).
"""
from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Dict, List

from ..errors import ScheduleError
from .tensor import thread_axis

TRACE_VERSION = 1


@dataclass
class Step:
    primitive: str
    stage: str
    args: Dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        return {"primitive": self.primitive, "stage": self.stage, "args": self.args}


def _ident(name: str) -> str:
    return name.replace(".", "_")


class Trace:
    def __init__(self, steps: List[Step] | None = None):
        self.steps: List[Step] = list(steps or [])

    def record(self, primitive: str, stage: str, args: dict):
        self.steps.append(Step(primitive, stage, {k: v for k, v in args.items() if v is not None}))

    def __len__(self):
        return len(self.steps)

    def __iter__(self):
        return iter(self.steps)

    def of_stage(self, stage: str) -> "Trace":
        """The steps applied to the stage named ``stage``, in order."""
        return Trace([st for st in self.steps if st.stage == stage])

    def to_json(self) -> str:
        return json.dumps({"version": TRACE_VERSION, "steps": [s.to_dict() for s in self.steps]})

    @classmethod
    def from_json(cls, text: str) -> "Trace":
        data = json.loads(text)
        if data.get("version") != TRACE_VERSION:
            raise ScheduleError(f"trace version {data.get('version')!r} is not supported (expected {TRACE_VERSION})")
        return cls([Step(d["primitive"], d["stage"], d.get("args", {})) for d in data["steps"]])

    def __repr__(self):
        return f"Trace({len(self.steps)} steps)"

    def __str__(self) -> str:
        return "\n".join(self.code_lines())

    def code_lines(self) -> List[str]:
        """The steps as Python code against a schedule named ``s``."""
        # which (stage, axis name) each Python identifier holds now: stages share axis names
        # ('i' of two stages), so an identifier is rebound when another stage's axis took it
        lines, bound = [], {}

        def axis(stage: str, name: str) -> str:
            ident = _ident(name)
            if bound.get(ident) != (stage, name):
                lines.append(f"{ident} = s[{_ident(stage)}].axis_by_name({name!r})")
                bound[ident] = (stage, name)
            return ident

        def outputs(stage: str, names) -> str:
            for n in names:
                bound[_ident(n)] = (stage, n)
            return ", ".join(_ident(n) for n in names) + ("," if len(names) == 1 else "")

        for st in self.steps:
            a, S = st.args, f"s[{_ident(st.stage)}]"
            p = st.primitive
            if p == "split":
                parent = axis(st.stage, a["parent"])
                arg = f"factor={_fmt(a['factor'])}" if "factor" in a else f"nparts={_fmt(a['nparts'])}"
                if "tail" in a:
                    arg += f", tail={a['tail']!r}"
                lines.append(f"{outputs(st.stage, a['outputs'])} = {S}.split({parent}, {arg})")
            elif p == "fuse":
                axes = ", ".join(axis(st.stage, n) for n in a["axes"])
                lines.append(f"{_ident(a['outputs'][0])} = {S}.fuse({axes})")
                bound[_ident(a["outputs"][0])] = (st.stage, a["outputs"][0])
            elif p in ("reorder", "reorder_storage"):
                lines.append(f"{S}.{p}({', '.join(axis(st.stage, n) for n in a['axes'])})")
            elif p in ("vectorize", "parallel", "unroll"):
                lines.append(f"{S}.{p}({axis(st.stage, a['axis'])})")
            elif p == "bind":
                lines.append(f"{S}.bind({axis(st.stage, a['axis'])}, lw.thread_axis({a['thread']!r}))")
            elif p == "pragma":
                lines.append(f"{S}.pragma({axis(st.stage, a['axis'])}, {a['key']!r}, {a.get('value')!r})")
            elif p == "storage_align":
                lines.append(f"{S}.storage_align({axis(st.stage, a['axis'])}, {a['factor']}, {a['offset']})")
            elif p == "compute_at":
                lines.append(f"{S}.compute_at(s[{_ident(a['parent'])}], {axis(a['parent'], a['axis'])})")
            elif p == "double_buffer" and a.get("asynchronous"):
                lines.append(f"{S}.double_buffer(asynchronous=True)")
            elif p in ("compute_inline", "compute_root", "double_buffer"):
                lines.append(f"{S}.{p}()")
            elif p == "set_scope":
                lines.append(f"{S}.set_scope({a['scope']!r})")
            elif p == "cache_read":
                readers = ", ".join(_ident(r) for r in a["readers"])
                lines.append(f"{_ident(a['outputs'][0])} = s.cache_read({_ident(st.stage)}, {a['scope']!r}, [{readers}])")
            elif p == "cache_write":
                lines.append(f"{_ident(a['outputs'][0])} = s.cache_write({_ident(st.stage)}, {a['scope']!r})")
            elif p == "rfactor":
                lines.append(f"{_ident(a['outputs'][0])} = s.rfactor({_ident(st.stage)}, "
                             f"{axis(st.stage, a['axis'])}, factor_axis={a.get('factor_axis', 0)})")
            else:
                lines.append(f"# unknown step {p} {a}")
        return lines

    def apply(self, schedule) -> None:
        """Replay these steps on ``schedule`` (a fresh schedule of the same computation)."""
        for st in self.steps:
            a, p = st.args, st.primitive
            try:
                if p in ("cache_read", "cache_write", "rfactor"):
                    tensor = schedule.stage_by_name(st.stage).op.outputs[0]
                    if p == "cache_read":
                        readers = [schedule.stage_by_name(r).op for r in a["readers"]]
                        schedule.cache_read(tensor, a["scope"], readers)
                    elif p == "cache_write":
                        schedule.cache_write(tensor, a["scope"])
                    else:
                        stage = schedule.stage_by_name(st.stage)
                        schedule.rfactor(tensor, stage.axis_by_name(a["axis"]), a.get("factor_axis", 0))
                    continue
                stage = schedule.stage_by_name(st.stage)
                ax = stage.axis_by_name
                if p == "split":
                    stage.split(ax(a["parent"]), factor=_value(a.get("factor"), schedule),
                                nparts=_value(a.get("nparts"), schedule), tail=a.get("tail", "guard"))
                elif p == "fuse":
                    stage.fuse(*[ax(n) for n in a["axes"]])
                elif p in ("reorder", "reorder_storage"):
                    getattr(stage, p)(*[ax(n) for n in a["axes"]])
                elif p in ("vectorize", "parallel", "unroll"):
                    getattr(stage, p)(ax(a["axis"]))
                elif p == "bind":
                    stage.bind(ax(a["axis"]), thread_axis(a["thread"]))
                elif p == "pragma":
                    stage.pragma(ax(a["axis"]), a["key"], a.get("value"))
                elif p == "storage_align":
                    stage.storage_align(ax(a["axis"]), a["factor"], a["offset"])
                elif p == "compute_at":
                    parent = schedule.stage_by_name(a["parent"])
                    stage.compute_at(parent, parent.axis_by_name(a["axis"]))
                elif p == "double_buffer":
                    stage.double_buffer(asynchronous=bool(a.get("asynchronous", False)))
                elif p in ("compute_inline", "compute_root"):
                    getattr(stage, p)()
                elif p == "set_scope":
                    stage.set_scope(a["scope"])
                else:
                    raise ScheduleError(f"unknown trace step {p!r}")
            except ScheduleError as exc:
                raise ScheduleError(f"replaying step '{p}' on stage '{st.stage}' failed: {exc}") from exc


def _fmt(value) -> str:
    if isinstance(value, dict):
        return value["var"]
    return repr(value)


def _value(value, schedule):
    if isinstance(value, dict):
        name = value["var"]
        if name not in schedule.vars:
            raise ScheduleError(f"the trace splits by the size {name!r}, which this computation does not have")
        return schedule.vars[name]
    return value
