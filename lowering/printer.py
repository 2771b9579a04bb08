"""Text and HTML forms of the loop IR: ``str(stmt)``, ``str(func)``, and what Jupyter shows for a lowered function.

The text form reads like Python loops and stays stable: the lowered text is also the
structural key of a function.  Expressions inside print through the DSL's
expression printer (``dsl/expr_printer.py``, which knows the IR's ``BufferLoad``,
``Ramp`` and ``Broadcast``); statements are told apart by class name, so ``ir.py``
can define ``__str__`` with this module without the two importing each other.
"""
from __future__ import annotations

import html
from typing import Dict, List

from ..dsl.arith import simplify_expr
from ..dsl.expr import Const, Var
from ..dsl.expr_printer import expr_to_str
from ..dsl.html_markup import badge, highlight_python
from ..dsl.visitor import post_order_visit


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
            f"range({E(s.min)}, {E(simplify_expr(s.min + s.extent))})"
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


def _loop_summary(func) -> Dict[str, int]:
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
    parts += [badge(f"{n} {k}", k) for k, n in sorted(counts.items()) if k != "serial"]
    summary = (f'<div style="font-size:12px;color:#6e7781">lowered function <b>{html.escape(func.name)}</b>'
               f" · {' '.join(parts)}</div>")
    return f"<div>{summary}{highlight_python(text)}</div>"

