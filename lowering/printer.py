"""Text and HTML forms of expressions, loop IR, schedules, tensor definitions and modules.

The text forms read like Python loops (``str(func)``, ``str(schedule)``) and stay
stable: the lowered text is also the structural key of a function.  The HTML forms
are what Jupyter shows (``_repr_html_`` of tensors, stages, schedules, lowered
functions and compiled modules): the same content, highlighted, as tables and
collapsible sections, with inline styles only.
"""
from __future__ import annotations

import html
import re
from typing import Dict, List

from ..dsl.expr import (Binary, Call, Cast, Compare, Const, Let, Logical, Reduce, Select, TensorLoad, Var)

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
    elif kind == "KernelLaunch":
        grid = ", ".join(E(x) for x in s.grid)
        block = ", ".join(E(x) for x in s.block)
        args = ", ".join([b.name for b in s.params] + [E(v) for v in s.scalars])
        out.append(f"{pad}launch {s.name}[grid=({grid}), block=({block})]({args}):  # device code")
        _stmt_lines(s.body, level + 1, out, names)
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


# ---------------------------------------------------------------------------------------------
# HTML: shared pieces
# ---------------------------------------------------------------------------------------------
# Inline styles only (no <style> blocks): notebook front ends and GitHub's renderer keep them.
# Colours are mid-tones that stay readable on light and dark themes.

_MONO = "font-family:SFMono-Regular,Menlo,Consolas,'Liberation Mono',monospace"
_PRE = f'<pre style="{_MONO};font-size:12px;line-height:1.4;margin:4px 0;white-space:pre;overflow-x:auto">'
_KIND_COLOR = {"parallel": "#2da44e", "vectorized": "#1f6feb", "unrolled": "#bf8700", "thread": "#8250df",
               "bound": "#8250df", "pragma": "#6e7781"}
_STYLE = {
    "comment": "color:#6e7781;font-style:italic",
    "keyword": "color:#cf222e;font-weight:bold",
    "number": "color:#0969da",
    "string": "color:#0a7d4f",
    "call": "color:#8250df",
    "def": "color:#953800;font-weight:bold",
}
_KEYWORD_SET = {"def", "for", "in", "if", "else", "pass", "and", "or", "not", "let", "return"}
_TOKEN = re.compile(r"""(?P<comment>\#[^\n]*)
                      |(?P<string>'[^'\n]*'|"[^"\n]*")
                      |(?P<number>(?<![\w.])\d+(?:\.\d+)?(?:e[+-]?\d+)?(?![\w]))
                      |(?P<word>[A-Za-z_][\w.]*)(?P<paren>\s*\()?
                      """, re.VERBOSE)


def _span(style: str, text: str) -> str:
    return f'<span style="{style}">{text}</span>'


def _badge(text: str, kind: str) -> str:
    color = _KIND_COLOR.get(kind, "#6e7781")
    return (f'<span style="border:1px solid {color};color:{color};border-radius:8px;padding:0 6px;'
            f'font-size:11px;white-space:nowrap">{html.escape(text)}</span>')


def _comment_html(text: str) -> str:
    """A ``# parallel``-style comment: loop kinds become coloured, the rest stays grey."""
    body = text[1:].strip()
    first = re.split(r"[\s,=]", body, maxsplit=1)[0]
    if first in _KIND_COLOR:
        color = _KIND_COLOR[first]
        return _span(f"color:{color};font-weight:bold", html.escape(text))
    return _span(_STYLE["comment"], html.escape(text))


def highlight_code(text: str) -> str:
    """Loop code (the text form of the IR, a schedule, a trace) as highlighted HTML spans.

    One pass over the raw text: every token is escaped once, so ``<`` in a condition
    stays ``&lt;`` and nothing inside a comment or string gets highlighted twice.
    """
    out: List[str] = []
    pos = 0
    previous_word = ""
    for m in _TOKEN.finditer(text):
        out.append(html.escape(text[pos:m.start()]))
        pos = m.end()
        if m.group("comment"):
            out.append(_comment_html(m.group("comment")))
        elif m.group("string"):
            out.append(_span(_STYLE["string"], html.escape(m.group("string"))))
        elif m.group("number"):
            out.append(_span(_STYLE["number"], m.group("number")))
        else:
            word, paren = m.group("word"), m.group("paren") or ""
            if word in _KEYWORD_SET:
                out.append(_span(_STYLE["keyword"], word) + html.escape(paren))
            elif previous_word == "def":
                out.append(_span(_STYLE["def"], html.escape(word)) + html.escape(paren))
            elif paren:
                out.append(_span(_STYLE["call"], html.escape(word)) + html.escape(paren))
            else:
                out.append(html.escape(word))
            previous_word = word
            continue
        previous_word = ""
    out.append(html.escape(text[pos:]))
    return "".join(out)


def highlight_python(text: str) -> str:
    """``text`` highlighted, in a ``<pre>`` block."""
    return f"{_PRE}{highlight_code(text)}</pre>"


def _box(inner: str, title: str = "") -> str:
    head = (f'<div style="font-weight:bold;margin-bottom:4px">{title}</div>' if title else "")
    return (f'<div style="border-left:3px solid #8c959f;padding:2px 0 2px 10px;margin:4px 0">'
            f"{head}{inner}</div>")


# ---------------------------------------------------------------------------------------------
# Lowered IR
# ---------------------------------------------------------------------------------------------
def _loop_summary(func) -> Dict[str, int]:
    from ..dsl.visitor import post_order_visit
    counts: Dict[str, int] = {}

    def visit(n):
        if type(n).__name__ == "For":
            counts[n.kind] = counts.get(n.kind, 0) + 1
    post_order_visit(func.body, visit)
    return counts


def primfunc_html(func) -> str:
    """The lowered function: its loop code highlighted, with a one-line summary of its loops."""
    text = primfunc_to_str(func)
    counts = _loop_summary(func)
    total = sum(counts.values())
    parts = [f"{total} loop{'s' if total != 1 else ''}"]
    parts += [_badge(f"{n} {k}", k) for k, n in sorted(counts.items()) if k != "serial"]
    summary = (f'<div style="font-size:12px;color:#6e7781">lowered function <b>{html.escape(func.name)}</b>'
               f" · {' '.join(parts)}</div>")
    return f"<div>{summary}{highlight_python(text)}</div>"


# ---------------------------------------------------------------------------------------------
# Tensor definitions as math
# ---------------------------------------------------------------------------------------------
_REDUCE_SYMBOL = {"sum": "Σ", "prod": "Π"}


def _math(text: str) -> str:
    return text.replace(" * ", "·")


def _definition_parts(tensor) -> dict:
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
        parts["reducer"] = _REDUCE_SYMBOL.get(body.combiner.name, body.combiner.name)
        parts["ranges"] = [(iv.name, expr_to_str(iv.min), expr_to_str(_simplified(iv.min + iv.extent)))
                           for iv in body.axis]
        parts["rhs"] = rhs
        if not isinstance(body.condition, Const):
            parts["where"] = expr_to_str(body.condition)
    else:
        parts["rhs"] = _math(expr_to_str(body))
    return parts


def _shape_str(tensor) -> str:
    return f"{tensor.dtype}[{', '.join(expr_to_str(s) for s in tensor.shape)}]"


def tensor_definition(tensor) -> str:
    """``C[i, j] = Σ_{k∈[0, n)} A[i, k]·B[k, j]``-style math for a tensor's definition."""
    if not hasattr(tensor.op, "body"):
        return f"{tensor.name} : {_shape_str(tensor)}  (input)"
    p = _definition_parts(tensor)
    rhs = p["rhs"]
    if p["reducer"]:
        rng = ", ".join(f"{v}∈[{lo}, {hi})" for v, lo, hi in p["ranges"])
        rhs = f"{p['reducer']}_{{{rng}}} {rhs}"
    if p["where"]:
        rhs += f"  if {p['where']}"
    return f"{p['lhs']} = {rhs}"


def _spatial_ranges(tensor) -> str:
    return ", ".join(f"{iv.name}∈[{expr_to_str(iv.min)}, {expr_to_str(_simplified(iv.min + iv.extent))})"
                     for iv in tensor.op.axis)


def tensor_definition_html(tensor) -> str:
    """The definition as typeset math: Σ with its range as a subscript, ``·`` for products."""
    e = html.escape
    title = f'<b>{e(tensor.name)}</b> <span style="color:#6e7781">: {e(_shape_str(tensor))}</span>'
    if not hasattr(tensor.op, "body"):
        return _box('<div style="color:#6e7781">input (placeholder)</div>', title)
    p = _definition_parts(tensor)
    rhs = e(p["rhs"])
    if p["reducer"]:
        rng = ", ".join(f"{e(v)}∈[{e(lo)}, {e(hi)})" for v, lo, hi in p["ranges"])
        big = p["reducer"] in _REDUCE_SYMBOL.values()
        sym = (f'<span style="font-size:1.35em;vertical-align:-0.1em">{e(p["reducer"])}</span>' if big
               else f"<b>{e(p['reducer'])}</b>")
        rhs = f"{sym}<sub>{rng}</sub>&thinsp;{rhs}"
    if p["where"]:
        rhs += f' &nbsp;<span style="color:#6e7781">if</span> {e(p["where"])}'
    math = (f'<div style="font-family:\'Cambria Math\',\'STIX Two Math\',\'Latin Modern Math\',serif;'
            f'font-size:1.15em;padding:2px 0">{e(p["lhs"])} = {rhs}</div>')
    ranges = _spatial_ranges(tensor)
    note = (f'<div style="font-size:11px;color:#6e7781">for {e(ranges)}</div>' if ranges else "")
    return _box(math + note, title)


# ---------------------------------------------------------------------------------------------
# Schedules
# ---------------------------------------------------------------------------------------------
_ANNOTATION_TEXT = {"vectorize": "vectorized", "parallel": "parallel", "unroll": "unrolled"}


def _stage_loops(stage) -> List[dict]:
    """One dict per leaf loop of ``stage``, outermost first."""
    from ..dsl.relations import derive_extents
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


def _stage_where(stage) -> str:
    if stage.attach_type == "root":
        return "at root"
    if stage.attach_type == "inline":
        return "inlined"
    return f"computed at {stage.attach_stage.name}.{stage.attach_ivar.name}"


def _attached_note(stage) -> str:
    return (f"extents are the full domain; lowering shrinks them to the region one iteration of "
            f"{stage.attach_stage.name}.{stage.attach_ivar.name} needs")


def _is_input(stage) -> bool:
    return not stage.root_iter_vars and not hasattr(stage.op, "body")


def stage_lines(stage) -> List[str]:
    """The text form of one stage: a header, then its loop nest with annotations."""
    if _is_input(stage):
        return [f"{stage.name}: input {_shape_str(stage.op.output(0))}"]
    lines = [f"{stage.name}  ({_stage_where(stage)}, scope {stage.scope})"]
    if stage.attach_type == "inline":
        return lines
    if stage.attach_type == "scope":
        lines[0] += f"  # {_attached_note(stage)}"
    for row in _stage_loops(stage):
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


_TH = "text-align:left;padding:2px 10px;border-bottom:1px solid #8c959f;font-weight:600"
_TD = "text-align:left;padding:1px 10px;vertical-align:top"


def _stage_rows(stage) -> List[str]:
    """Table rows (``<tr>``) for one stage: a header row, then one row per loop."""
    e = html.escape
    where = _stage_where(stage)
    shape = ", ".join(f"{e(t.name)}: {e(_shape_str(t))}" for t in stage.op.outputs)
    head_style = "text-align:left;padding:6px 10px 2px 10px;border-top:1px solid #d0d7de"
    head = (f'<tr><td colspan="5" style="{head_style}"><b>{e(stage.name)}</b> '
            f'<span style="color:#6e7781">— {e(where)}, {e(stage.scope)} scope · {shape}</span></td></tr>')
    if stage.attach_type == "inline":
        return [head, f'<tr><td colspan="5" style="{_TD};color:#6e7781">no loops: substituted into the '
                      f'stages that read it</td></tr>']
    rows = [head]
    if stage.attach_type == "scope":
        rows.append(f'<tr><td colspan="5" style="{_TD};color:#6e7781;font-size:11px">'
                    f"{e(_attached_note(stage))}</td></tr>")
    for row in _stage_loops(stage):
        pad = 0.6 + 1.2 * row["depth"]
        loop = (f'<td style="{_TD};padding-left:{pad:.1f}em;{_MONO};font-size:12px;white-space:nowrap">'
                f'{_span(_STYLE["keyword"], "for")} {e(row["name"])}</td>')
        extent = f'<td style="{_TD};{_MONO};font-size:12px">{highlight_code(row["extent"])}</td>'
        axis = f'<td style="{_TD};color:#6e7781;font-size:12px">{e(row["axis"])}</td>'
        badges = [_badge(row["note"], row["kind"])] if row["note"] else []
        badges += [_badge(p, "pragma") for p in row["pragmas"]]
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


def _stage_trace_lines(stage) -> List[str]:
    from ..dsl.trace import Trace
    return Trace([st for st in stage.schedule.trace if st.stage == stage.name]).code_lines()


def stage_html(stage) -> str:
    """One stage: its loop nest as a table, then the primitives applied to it."""
    if _is_input(stage):
        return _box(f'<span style="color:#6e7781">input {html.escape(_shape_str(stage.op.output(0)))}</span>',
                    html.escape(stage.name))
    return _box(_table(_stage_rows(stage)) + _trace_details(_stage_trace_lines(stage), "primitives applied"),
                f"stage {html.escape(stage.name)}")


def schedule_html(schedule) -> str:
    """The whole schedule: inputs, each computed stage's loop nest, then the trace as code."""
    e = html.escape
    inputs = [s for s in schedule.stages if _is_input(s)]
    stages = [s for s in schedule.stages if not _is_input(s)]
    parts = []
    if inputs:
        items = ", ".join(f"<b>{e(s.name)}</b>: {e(_shape_str(s.op.output(0)))}" for s in inputs)
        parts.append(f'<div style="font-size:12px;margin-bottom:2px">inputs: {items}</div>')
    rows: List[str] = []
    for s in stages:
        rows += _stage_rows(s)
    parts.append(_table(rows))
    parts.append(_trace_details(schedule.trace.code_lines(), "primitives applied"))
    title = f"schedule of {e(', '.join(op.name for op in schedule.outputs))}"
    return _box("".join(parts), title)


# ---------------------------------------------------------------------------------------------
# Compiled modules
# ---------------------------------------------------------------------------------------------
MAX_HTML_SOURCE = 200_000


def _source_pre(text: str, fmt: str, highlight: bool) -> str:
    note = ""
    if len(text) > MAX_HTML_SOURCE:
        note = (f'<div style="color:#6e7781;font-size:12px">first {MAX_HTML_SOURCE:,} of {len(text):,} characters; '
                f"the rest: <code>f.get_source({fmt!r})</code></div>")
        text = text[:MAX_HTML_SOURCE]
    body = highlight_code(text) if highlight else html.escape(text)
    return f"{note}{_PRE}{body}</pre>"


def module_html(module) -> str:
    """A compiled module: its signature, then the lowered IR, LLVM IR and assembly, collapsed.

    ``module`` is duck-typed (``name``, ``params``, ``target``, ``get_source``): the
    printer does not import the backends.  Sources are fetched when the HTML is built;
    the assembly is generated then, once per display.
    """
    e = html.escape
    params = ", ".join(f"<b>{e(p.name)}</b>: {e(p.dtype)}[{e(', '.join(str(s) for s in p.shape))}]"
                       + (' <span style="color:#6e7781">(out)</span>' if p.is_output else "")
                       for p in module.params)
    signature = (f'<div style="{_MONO};font-size:13px">{_span(_STYLE["def"], e(module.name))}({params})</div>'
                 f'<div style="color:#6e7781;font-size:12px">compiled for {e(str(module.target))}</div>')
    sections = []
    kinds = getattr(module, "html_sources", (("lowered", "lowered IR", True), ("ll", "LLVM IR", False),
                                             ("asm", "assembly", False)))
    for fmt, title, highlight in kinds:
        try:
            text = module.get_source(fmt)
        except Exception as exc:  # a missing or failing source must not break the display
            body = f'<div style="color:#cf222e">{e(type(exc).__name__)}: {e(str(exc))}</div>'
            lines = ""
        else:
            body = _source_pre(text, fmt, highlight)
            lines = f" ({text.count(chr(10)) + 1:,} lines)"
        sections.append(f"<details><summary>{e(title)}{lines}</summary>{body}</details>")
    return _box(signature + "".join(sections), "loopweave module")
