"""The HTML forms of tensors, stages and schedules (what Jupyter shows for them).

The same content as the text forms of ``printer.py``, as typeset math (a tensor's
definition) and tables (a schedule's loop nests, with badges for loop kinds), then
the primitives applied as highlighted code.
"""
from __future__ import annotations

import html
from typing import List

from .html_markup import MONO, STYLE, badge, box, highlight_code, highlight_python, span
from .printer import (REDUCE_SYMBOL, attached_note, definition_parts, is_input, shape_str, spatial_ranges,
                      stage_loops, stage_where)

_TH = "text-align:left;padding:2px 10px;border-bottom:1px solid #8c959f;font-weight:600"
_TD = "text-align:left;padding:1px 10px;vertical-align:top"


def tensor_definition_html(tensor) -> str:
    """The definition as typeset math: Σ with its range as a subscript, ``·`` for products."""
    e = html.escape
    title = f'<b>{e(tensor.name)}</b> <span style="color:#6e7781">: {e(shape_str(tensor))}</span>'
    if not hasattr(tensor.op, "body"):
        return box('<div style="color:#6e7781">input (placeholder)</div>', title)
    p = definition_parts(tensor)
    rhs = e(p["rhs"])
    if p["reducer"]:
        rng = ", ".join(f"{e(v)}∈[{e(lo)}, {e(hi)})" for v, lo, hi in p["ranges"])
        big = p["reducer"] in REDUCE_SYMBOL.values()
        sym = (f'<span style="font-size:1.35em;vertical-align:-0.1em">{e(p["reducer"])}</span>' if big
               else f"<b>{e(p['reducer'])}</b>")
        rhs = f"{sym}<sub>{rng}</sub>&thinsp;{rhs}"
    if p["where"]:
        rhs += f' &nbsp;<span style="color:#6e7781">if</span> {e(p["where"])}'
    math = (f'<div style="font-family:\'Cambria Math\',\'STIX Two Math\',\'Latin Modern Math\',serif;'
            f'font-size:1.15em;padding:2px 0">{e(p["lhs"])} = {rhs}</div>')
    ranges = spatial_ranges(tensor)
    note = (f'<div style="font-size:11px;color:#6e7781">for {e(ranges)}</div>' if ranges else "")
    return box(math + note, title)


def _stage_rows(stage) -> List[str]:
    """Table rows (``<tr>``) for one stage: a header row, then one row per loop."""
    e = html.escape
    where = stage_where(stage)
    shape = ", ".join(f"{e(t.name)}: {e(shape_str(t))}" for t in stage.op.outputs)
    head_style = "text-align:left;padding:6px 10px 2px 10px;border-top:1px solid #d0d7de"
    head = (f'<tr><td colspan="5" style="{head_style}"><b>{e(stage.name)}</b> '
            f'<span style="color:#6e7781">— {e(where)}, {e(stage.scope)} scope · {shape}</span></td></tr>')
    if stage.attach_type == "inline":
        return [head, f'<tr><td colspan="5" style="{_TD};color:#6e7781">no loops: substituted into the '
                      f'stages that read it</td></tr>']
    rows = [head]
    if stage.attach_type == "scope":
        rows.append(f'<tr><td colspan="5" style="{_TD};color:#6e7781;font-size:11px">'
                    f"{e(attached_note(stage))}</td></tr>")
    for row in stage_loops(stage):
        pad = 0.6 + 1.2 * row["depth"]
        loop = (f'<td style="{_TD};padding-left:{pad:.1f}em;{MONO};font-size:12px;white-space:nowrap">'
                f'{span(STYLE["keyword"], "for")} {e(row["name"])}</td>')
        extent = f'<td style="{_TD};{MONO};font-size:12px">{highlight_code(row["extent"])}</td>'
        axis = f'<td style="{_TD};color:#6e7781;font-size:12px">{e(row["axis"])}</td>'
        badges = [badge(row["note"], row["kind"])] if row["note"] else []
        badges += [badge(p, "pragma") for p in row["pragmas"]]
        ann = f'<td style="{_TD}">{" ".join(badges)}</td>'
        attached = ""
        if row["attached"]:
            names = ", ".join(f"<b>{e(n)}</b>" for n in row["attached"])
            attached = f'← computes {names} here'
        rows.append(f"<tr>{loop}{extent}{axis}{ann}<td style=\"{_TD};font-size:12px\">{attached}</td></tr>")
    return rows


def _table(rows: List[str]) -> str:
    header = "".join(f'<th style="{_TH}">{h}</th>' for h in ("loop", "extent", "axis", "annotation", "attached"))
    return (f'<table style="border-collapse:collapse;font-size:13px;margin:4px 0">'
            f"<thead><tr>{header}</tr></thead><tbody>{''.join(rows)}</tbody></table>")


def _trace_details(lines: List[str], title: str) -> str:
    if not lines:
        return f'<div style="color:#6e7781;font-size:12px">{html.escape(title)}: none</div>'
    return (f"<details open><summary>{html.escape(title)} ({len(lines)} line{'s' if len(lines) != 1 else ''})"
            f"</summary>{highlight_python(chr(10).join(lines))}</details>")


def stage_html(stage) -> str:
    """One stage: its loop nest as a table, then the primitives applied to it."""
    if is_input(stage):
        return box(f'<span style="color:#6e7781">input {html.escape(shape_str(stage.op.output(0)))}</span>',
                   html.escape(stage.name))
    lines = stage.schedule.trace.of_stage(stage.name).code_lines()
    return box(_table(_stage_rows(stage)) + _trace_details(lines, "primitives applied"),
               f"stage {html.escape(stage.name)}")


def schedule_html(schedule) -> str:
    """The whole schedule: inputs, each computed stage's loop nest, then the trace as code."""
    e = html.escape
    inputs = [s for s in schedule.stages if is_input(s)]
    stages = [s for s in schedule.stages if not is_input(s)]
    parts = []
    if inputs:
        items = ", ".join(f"<b>{e(s.name)}</b>: {e(shape_str(s.op.output(0)))}" for s in inputs)
        parts.append(f'<div style="font-size:12px;margin-bottom:2px">inputs: {items}</div>')
    rows: List[str] = []
    for s in stages:
        rows += _stage_rows(s)
    parts.append(_table(rows))
    parts.append(_trace_details(schedule.trace.code_lines(), "primitives applied"))
    title = f"schedule of {e(', '.join(op.name for op in schedule.outputs))}"
    return box("".join(parts), title)
