"""The text forms of what users write: tensor definitions as math, stages and schedules as loop nests.

``str(schedule)`` lists every stage's loop nest (leaf axes, extents, annotations,
where other stages are computed), then the primitives applied as code comments;
``tensor_definition(C)`` writes ``C[i, j] = Σ_{k∈[0, n)} A[i, k]·B[k, j]``.  Expressions
print through ``expr_printer.py``; the HTML forms (``printer_html.py``) are built from
the same pieces (``definition_parts``, ``stage_loops``).  Objects are read through
their attributes, so this module imports neither tensors nor schedules.
"""
from __future__ import annotations

from typing import List

from .arith import simplify_expr
from .expr import Const, Reduce
from .expr_printer import expr_to_str
from .relations import derive_extents

REDUCE_SYMBOL = {"sum": "Σ", "prod": "Π"}
_ANNOTATION_TEXT = {"vectorize": "vectorized", "parallel": "parallel", "unroll": "unrolled"}


# ---------------------------------------------------------------------------------------------
# Tensor definitions as math
# ---------------------------------------------------------------------------------------------
def _math(text: str) -> str:
    return text.replace(" * ", "·")


def _end(iv) -> str:
    """The exclusive end of an axis' range, simplified (``1 + (n - 1)`` reads ``n``)."""
    return expr_to_str(simplify_expr(iv.min + iv.extent))


def definition_parts(tensor) -> dict:
    """The pieces of ``lhs = [reducer_{ranges}] rhs [if condition]`` as plain text."""
    op = tensor.op
    parts = {"lhs": f"{tensor.name}[{', '.join(iv.name for iv in op.axis)}]", "reducer": "", "ranges": [],
             "rhs": "", "where": ""}
    body = op.body[tensor.value_index]
    if isinstance(body, Reduce):
        sources = [_math(expr_to_str(x)) for x in body.source]
        rhs = sources[0] if len(sources) == 1 else f"({', '.join(sources)})"
        if len(sources) > 1:
            rhs += f"[{body.value_index}]"
        parts["reducer"] = REDUCE_SYMBOL.get(body.combiner.name, body.combiner.name)
        parts["ranges"] = [(iv.name, expr_to_str(iv.min), _end(iv)) for iv in body.axis]
        parts["rhs"] = rhs
        if not isinstance(body.condition, Const):
            parts["where"] = expr_to_str(body.condition)
    else:
        parts["rhs"] = _math(expr_to_str(body))
    return parts


def shape_str(tensor) -> str:
    return f"{tensor.dtype}[{', '.join(expr_to_str(s) for s in tensor.shape)}]"


def tensor_definition(tensor) -> str:
    """``C[i, j] = Σ_{k∈[0, n)} A[i, k]·B[k, j]``-style math for a tensor's definition."""
    if not hasattr(tensor.op, "body"):
        return f"{tensor.name} : {shape_str(tensor)}  (input)"
    p = definition_parts(tensor)
    rhs = p["rhs"]
    if p["reducer"]:
        rng = ", ".join(f"{v}∈[{lo}, {hi})" for v, lo, hi in p["ranges"])
        rhs = f"{p['reducer']}_{{{rng}}} {rhs}"
    if p["where"]:
        rhs += f"  if {p['where']}"
    return f"{p['lhs']} = {rhs}"


def spatial_ranges(tensor) -> str:
    return ", ".join(f"{iv.name}∈[{expr_to_str(iv.min)}, {_end(iv)})" for iv in tensor.op.axis)


# ---------------------------------------------------------------------------------------------
# Stages and schedules
# ---------------------------------------------------------------------------------------------
def stage_loops(stage) -> List[dict]:
    """One dict per leaf loop of ``stage``, outermost first."""
    extents = derive_extents({iv: iv.extent for iv in stage.root_iter_vars}, stage.relations)
    rows = []
    for depth, iv in enumerate(stage.leaf_iter_vars):
        ann = stage.annotations.get(iv, "")
        kind = _ANNOTATION_TEXT.get(ann, ann)
        if ann == "bind":
            kind = "thread"
            note = f"bound to {stage.bound_threads[iv].var.name.replace('_', '.')}"
        else:
            note = kind
        pragmas = [f"pragma {k}" + ("" if v is None else f"={v}") for k, v in stage.pragmas.get(iv, [])]
        attached = [s.name for s in stage.schedule.stages if s.attach_type == "scope" and s.attach_ivar is iv]
        rows.append({"depth": depth, "name": iv.name, "extent": expr_to_str(extents[iv]), "axis": iv.kind,
                     "kind": kind, "note": note, "pragmas": pragmas, "attached": attached})
    return rows


def stage_where(stage) -> str:
    if stage.attach_type == "root":
        return "at root"
    if stage.attach_type == "inline":
        return "inlined"
    return f"computed at {stage.attach_stage.name}.{stage.attach_ivar.name}"


def attached_note(stage) -> str:
    return (f"extents are the full domain; lowering shrinks them to the region one iteration of "
            f"{stage.attach_stage.name}.{stage.attach_ivar.name} needs")


def is_input(stage) -> bool:
    return not stage.root_iter_vars and not hasattr(stage.op, "body")


def stage_lines(stage) -> List[str]:
    """The text form of one stage: a header, then its loop nest with annotations."""
    if is_input(stage):
        return [f"{stage.name}: input {shape_str(stage.op.output(0))}"]
    lines = [f"{stage.name}  ({stage_where(stage)}, scope {stage.scope})"]
    if stage.attach_type == "inline":
        return lines
    if stage.attach_type == "scope":
        lines[0] += f"  # {attached_note(stage)}"
    for row in stage_loops(stage):
        notes = ([row["note"]] if row["note"] else []) + row["pragmas"]
        line = "  " * (row["depth"] + 1) + f"for {row['name']} in range({row['extent']})"
        if notes:
            line += "  # " + ", ".join(notes)
        if row["attached"]:
            line += f"  <- computes {', '.join(row['attached'])} here"
        lines.append(line)
    return lines


def schedule_to_str(schedule) -> str:
    """``str(schedule)``: every stage's loop nest, then the primitives applied, as code comments."""
    out: List[str] = []
    for stage in schedule.stages:
        out += stage_lines(stage)
    if len(schedule.trace):
        out.append("")
        out.append("# primitives applied:")
        out += ["# " + line for line in schedule.trace.code_lines()]
    return "\n".join(out)
