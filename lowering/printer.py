"""Text and HTML forms of expressions, loop IR, schedules and tensor definitions.

The text form reads like Python loops; the HTML form is the same text, highlighted,
for Jupyter.
"""
from __future__ import annotations

import html
import re
from typing import Dict, List

from ..dsl.expr import (Binary, Call, Cast, Compare, Const, Expr, Let, Logical, Reduce, Select, TensorLoad,
                        Var)

_BIN = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%"}
_CMP = {"eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4, "add": 5, "sub": 5, "mul": 6, "div": 6, "floordiv": 6,
         "floormod": 6}


def _prec(e) -> int:
    if isinstance(e, Binary):
        return _PREC.get(e.op, 10)
    if isinstance(e, Compare):
        return _PREC["cmp"]
    if isinstance(e, Logical):
        return _PREC[e.op]
    return 10


def expr_to_str(e, names: Dict[int, str] | None = None) -> str:
    def p(x, min_prec):
        s = expr_to_str(x, names)
        return f"({s})" if _prec(x) < min_prec else s

    if isinstance(e, Var):
        return names.get(id(e), e.name) if names else e.name
    if isinstance(e, Const):
        if e.dtype == "bool":
            return str(bool(e.value))
        if e.dtype in ("int64",):
            return str(e.value)
        if e.dtype == "float32":
            return f"{e.value!r}f" if False else repr(float(e.value))
        return f"{e.dtype}({e.value!r})"
    if isinstance(e, Binary):
        if e.op in ("min", "max"):
            return f"{e.op}({expr_to_str(e.a, names)}, {expr_to_str(e.b, names)})"
        prec = _PREC[e.op]
        right = prec + (0 if e.op in ("add", "mul") else 1)
        return f"{p(e.a, prec)} {_BIN[e.op]} {p(e.b, right)}"
    if isinstance(e, Compare):
        return f"{p(e.a, 5)} {_CMP[e.op]} {p(e.b, 5)}"
    if isinstance(e, Logical):
        if e.op == "not":
            return f"not {p(e.a, 3)}"
        prec = _PREC[e.op]
        return f"{p(e.a, prec)} {e.op} {p(e.b, prec + 1)}"
    if isinstance(e, Select):
        return (f"select({expr_to_str(e.condition, names)}, {expr_to_str(e.true_value, names)}, "
                f"{expr_to_str(e.false_value, names)})")
    if isinstance(e, Cast):
        return f"{e.dtype}({expr_to_str(e.value, names)})"
    if isinstance(e, Call):
        return f"{e.name}({', '.join(expr_to_str(a, names) for a in e.args)})"
    if isinstance(e, Let):
        return f"(let {expr_to_str(e.var, names)} = {expr_to_str(e.value, names)} in {expr_to_str(e.body, names)})"
    if isinstance(e, TensorLoad):
        return f"{e.tensor.name}[{', '.join(expr_to_str(i, names) for i in e.indices)}]"
    if isinstance(e, Reduce):
        axes = ", ".join(iv.name for iv in e.axis)
        src = ", ".join(expr_to_str(s, names) for s in e.source)
        src = src if len(e.source) == 1 else f"({src})"
        where = "" if isinstance(e.condition, Const) else f", where={expr_to_str(e.condition, names)}"
        part = "" if len(e.source) == 1 else f"[{e.value_index}]"
        return f"{e.combiner.name}({src}, axis=[{axes}]{where}){part}"
    name = type(e).__name__
    if name == "BufferLoad":
        return f"{e.buffer.name}[{', '.join(expr_to_str(i, names) for i in e.indices)}]"
    if name == "Ramp":
        return f"ramp({expr_to_str(e.base, names)}, {expr_to_str(e.stride, names)}, {e.lanes})"
    if name == "Broadcast":
        return f"x{e.lanes}({expr_to_str(e.value, names)})"
    return f"<{name}>"


def _simplified(e):
    from .passes.simplify import simplify_expr
    return simplify_expr(e)


def stmt_to_str(stmt, indent: int = 0, names=None) -> str:
    lines: List[str] = []
    _stmt_lines(stmt, indent, lines, names)
    return "\n".join(lines)


def _stmt_lines(s, level: int, out: List[str], names):
    pad = "    " * level
    kind = type(s).__name__
    E = lambda e: expr_to_str(e, names)  # noqa: E731
    if kind == "For":
        rng = f"range({E(s.extent)})" if isinstance(s.min, Const) and s.min.value == 0 else \
            f"range({E(s.min)}, {E(_simplified(s.min + s.extent))})"
        note = "" if s.kind == "serial" else f"  # {s.kind}"
        if s.annotations:
            note += ("  #" if not note else ",") + " " + ", ".join(f"{k}={v}" for k, v in s.annotations)
        out.append(f"{pad}for {E(s.var)} in {rng}:{note}")
        _stmt_lines(s.body, level + 1, out, names)
    elif kind == "Seq":
        if not s.stmts:
            out.append(f"{pad}pass")
        for c in s.stmts:
            _stmt_lines(c, level, out, names)
    elif kind == "IfThenElse":
        out.append(f"{pad}if {E(s.condition)}:")
        _stmt_lines(s.then_case, level + 1, out, names)
        if s.else_case is not None:
            out.append(f"{pad}else:")
            _stmt_lines(s.else_case, level + 1, out, names)
    elif kind == "Allocate":
        shape = ", ".join(E(x) for x in s.buffer.shape)
        out.append(f"{pad}{s.buffer.name} = allocate(({shape},), {s.buffer.dtype}, {s.buffer.scope!r})")
        _stmt_lines(s.body, level, out, names)
    elif kind == "BufferStore":
        out.append(f"{pad}{s.buffer.name}[{', '.join(E(i) for i in s.indices)}] = {E(s.value)}")
    elif kind == "LetStmt":
        out.append(f"{pad}{E(s.var)} = {E(s.value)}")
        _stmt_lines(s.body, level, out, names)
    elif kind == "Evaluate":
        out.append(f"{pad}{E(s.value)}")
    else:
        out.append(f"{pad}<{kind}>")


def _unique_names(func) -> Dict[int, str]:
    """Disambiguate distinct variables that share a name (i, i_1, ...)."""
    from ..dsl.visitor import post_order_visit
    names: Dict[int, str] = {}
    taken: Dict[str, int] = {}

    def visit(n):
        v = getattr(n, "var", None)
        if isinstance(v, Var) and id(v) not in names:
            base = v.name
            count = taken.get(base, 0)
            names[id(v)] = base if count == 0 else f"{base}_{count}"
            taken[base] = count + 1
    post_order_visit(func.body, visit)
    return names


def primfunc_to_str(func, unique_names: bool = False) -> str:
    names = _unique_names(func)
    params = ", ".join(f"{b.name}: {b.dtype}[{', '.join(expr_to_str(s) for s in b.shape)}]" for b in func.params)
    head = f"def {func.name}({params}):"
    return head + "\n" + stmt_to_str(func.body, 1, names)


_KEYWORDS = r"\b(def|for|in|if|else|range|allocate|pass|select|and|or|not)\b"


def highlight_python(text: str) -> str:
    escaped = html.escape(text)
    escaped = re.sub(r"(#[^\n]*)", r'<span style="color:#6a737d">\1</span>', escaped)
    escaped = re.sub(_KEYWORDS, r'<span style="color:#d73a49;font-weight:bold">\1</span>', escaped)
    return f'<pre style="font-size:12px;line-height:1.35">{escaped}</pre>'


def primfunc_html(func) -> str:
    return highlight_python(primfunc_to_str(func))


def tensor_definition(tensor) -> str:
    """``C[i, j] = Σ_{k} A[i, k]·B[k, j]``-style math for a tensor's definition."""
    op = tensor.op
    if not hasattr(op, "body"):
        dims = ", ".join(expr_to_str(s) for s in tensor.shape)
        return f"{tensor.name} : {tensor.dtype}[{dims}]  (input)"
    lhs = f"{tensor.name}[{', '.join(iv.name for iv in op.axis)}]"
    body = op.body[tensor.value_index]
    symbol = {"sum": "Σ", "prod": "Π", "max": "max", "min": "min"}
    if isinstance(body, Reduce):
        src = ", ".join(expr_to_str(s) for s in body.source)
        sym = symbol.get(body.combiner.name, body.combiner.name)
        rng = ", ".join(f"{iv.name}∈[{expr_to_str(iv.min)}, {expr_to_str(iv.min + iv.extent)})" for iv in body.axis)
        where = "" if isinstance(body.condition, Const) else f" if {expr_to_str(body.condition)}"
        rhs = f"{sym}_{{{rng}}} {src.replace(' * ', '·')}{where}"
    else:
        rhs = expr_to_str(body).replace(" * ", "·")
    return f"{lhs} = {rhs}"


def tensor_definition_html(tensor) -> str:
    return (f'<div style="font-family:monospace"><b>{html.escape(tensor.name)}</b>: {tensor.dtype}'
            f'<br>{html.escape(tensor_definition(tensor))}</div>')


def stage_lines(stage) -> List[str]:
    from ..dsl.relations import derive_extents
    if not stage.root_iter_vars:
        return [f"{stage.name}: input"]
    extents = derive_extents({iv: iv.extent for iv in stage.root_iter_vars}, stage.relations)
    where = {"root": "at root", "inline": "inlined"}.get(stage.attach_type)
    if where is None:
        where = f"at {stage.attach_stage.name}.{stage.attach_ivar.name}"
    lines = [f"{stage.name}  ({where}, scope {stage.scope})"]
    for depth, iv in enumerate(stage.leaf_iter_vars):
        note = stage.annotations.get(iv, "")
        if note == "bind":
            note = f"bind {stage.bound_threads[iv].var.name.replace('_', '.')}"
        attached = [s.name for s in stage.schedule.stages
                    if s.attach_type == "scope" and s.attach_ivar is iv]
        extra = f"  <- computes {', '.join(attached)}" if attached else ""
        lines.append("  " * (depth + 1) + f"for {iv.name} in range({expr_to_str(extents[iv])})"
                     + (f"  # {note}" if note else "") + extra)
    return lines


def schedule_to_str(schedule) -> str:
    out = []
    for stage in schedule.stages:
        out += stage_lines(stage)
    if len(schedule.trace):
        out.append("")
        out.append("# primitives applied:")
        out += ["# " + line for line in schedule.trace.code_lines()]
    return "\n".join(out)


def stage_html(stage) -> str:
    return highlight_python("\n".join(stage_lines(stage)))


def schedule_html(schedule) -> str:
    return highlight_python(schedule_to_str(schedule))
