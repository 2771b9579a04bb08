"""Text and HTML forms of the loop IR: ``str(stmt)``, ``str(func)``, and what Jupyter shows for a lowered function.

The text form reads like Python loops and stays stable: the lowered text is also the
structural key of a function.  After ``storage_flatten`` an access to an n-d buffer holds one
flat index; it prints with one index per dimension (``C[i, j]`` for ``C[i * n + j]``) where the
flat index splits exactly along the buffer's strides (``_Unflatten``, which checks that the
split recombines to the flat index), and flat otherwise; an index sum with negative terms
prints as a difference (``n - io * 8``).  A buffer whose strides are not the
plain row-major ones (``storage_align``, ``reorder_storage``) says so where it is allocated.
The structural key prints every index as it is stored (``flat=True``): two layouts that print
alike per dimension differ there.  Expressions inside print through the DSL's
expression printer (``dsl/expr_printer.py``, which knows the IR's ``BufferLoad``,
``Ramp`` and ``Broadcast``); statements are told apart by class name, so ``ir.py``
can define ``__str__`` with this module without the two importing each other.
"""
from __future__ import annotations

import html
from collections import Counter
from typing import Dict, List, Optional, Tuple

from ..dsl.arith import ExprSimplifier, linear_form, simplify_expr
from ..dsl.expr import Binary, Const, Var, const, structural_equal
from ..dsl.expr_printer import expr_to_str
from ..dsl.html_markup import badge, highlight_python
from ..dsl.visitor import Mutator, post_order_visit


def stmt_to_str(stmt, indent: int = 0, names=None, flat: bool = False) -> str:
    lines: List[str] = []
    _stmt_lines(stmt, indent, lines, names, None if flat else _Unflatten())
    return "\n".join(lines)


def _factors(e) -> Tuple[int, Counter]:
    """``e`` as (constant, multiset of the text of its other factors) along its products."""
    if isinstance(e, Const) and isinstance(e.value, int):
        return e.value, Counter()
    if isinstance(e, Binary) and e.op == "mul":
        ca, fa = _factors(e.a)
        cb, fb = _factors(e.b)
        return ca * cb, fa + fb
    return 1, Counter({expr_to_str(e): 1})


def _product(c: int, factors: Counter, exprs: Dict[str, object]):
    result = const(c)
    for text, count in sorted(factors.items()):
        for _ in range(count):
            result = Binary("mul", result, exprs[text])
    return result


def _split_flat(index, shape, strides, constants_inner: bool = False):
    """The per-dimension indices whose sum along ``strides`` is ``index``, or None.  Each term goes to
    the dimension of the largest stride dividing it; with ``constants_inner`` a term that a stride
    divides to a constant (``n`` of ``i * n + n - j - 1``) and the constant go to the unit-stride
    dimension instead (``[i, n - j - 1]``, where the first way gives ``[i + 1, -j - 1]``)."""
    form = linear_form(index)
    if form is None:
        return None
    terms, constant = form
    dims = []
    for d, stride in enumerate(strides):
        c, f = _factors(stride)
        if c <= 0:
            return None
        dims.append((d, c, f))
    order = sorted(dims, key=lambda t: (-sum(t[2].values()), -t[1]))
    parts = [const(0) for _ in shape]
    for term, coef in terms.items():
        tc, tf = _factors(term.expr)
        tc *= coef
        exprs = {}
        post_order_visit(term.expr, lambda n: exprs.setdefault(expr_to_str(n), n))
        for d, c, f in order:
            if tc % c == 0 and not (f - tf) and not (constants_inner and (c > 1 or f) and tf == f):
                parts[d] = Binary("add", parts[d], _product(tc // c, tf - f, exprs))
                break
        else:
            return None
    for d, c, f in (order[-1:] if constants_inner else order):
        if not f and constant:
            q = abs(constant) // c * (1 if constant > 0 else -1)
            parts[d] = Binary("add", parts[d], const(q))
            constant -= q * c
    if constant:
        return None
    return [simplify_expr(p) for p in parts]


class _Unflatten(Mutator):
    """Flat accesses to n-d buffers, for display, with one index per dimension where that is exact
    and, as far as the constant ranges of the enclosing loops tell, each index within its dimension
    (``B[i // 3]`` of a 4 x 8 buffer with ``i < 32`` stays flat rather than read ``B[0, i // 3]``)."""

    def __init__(self):
        self.facts = ExprSimplifier()       # its ``ranges``: the enclosing loops' constant ranges

    def enter(self, loop):
        """Note the range of ``loop``'s variable (constant bounds only); returns what to ``leave``."""
        saved = self.facts.ranges.get(id(loop.var))
        if isinstance(loop.min, Const) and isinstance(loop.extent, Const) and loop.extent.value >= 1:
            self.facts.ranges[id(loop.var)] = (loop.min.value, loop.min.value + loop.extent.value - 1)
        return saved

    def leave(self, loop, saved) -> None:
        if saved is None:
            self.facts.ranges.pop(id(loop.var), None)
        else:
            self.facts.ranges[id(loop.var)] = saved

    @staticmethod
    def exact(parts, buffer, flat) -> bool:
        """Whether ``parts`` along the strides of ``buffer`` recombine to ``flat``."""
        total = const(0)
        for p, stride in zip(parts, buffer.strides):
            total = Binary("add", total, Binary("mul", p, stride))
        return structural_equal(simplify_expr(total), simplify_expr(flat))

    def inside(self, parts, shape) -> bool:
        for index, extent in zip(parts, shape):
            b = self.facts.bound(index) if type(index).__name__ != "Ramp" else None
            if b is not None and isinstance(extent, Const) and (b[0] < 0 or b[1] >= extent.value):
                return False
        return True

    def indices(self, buffer, indices) -> tuple:
        indices = tuple(self.visit(i) for i in indices)
        if len(indices) != 1 or len(buffer.shape) < 2 or buffer.strides is None:
            return indices
        split = self.split(buffer, indices[0])
        return indices if split is None else tuple(self.visit(p) for p in split)

    def split(self, buffer, index) -> Optional[list]:
        ramp = index if type(index).__name__ == "Ramp" else None
        base = ramp.base if ramp is not None else index
        for constants_inner in (False, True):
            parts = _split_flat(base, buffer.shape, buffer.strides, constants_inner)
            if parts is not None and self.exact(parts, buffer, base) and self.inside(parts, buffer.shape):
                break
        else:
            return None
        if ramp is not None:
            unit = [d for d, stride in enumerate(buffer.strides) if isinstance(stride, Const) and stride.value == 1]
            if not unit:
                return None
            parts[unit[0]] = type(ramp)(parts[unit[0]], ramp.stride, ramp.lanes)
        return parts

    def visit_Binary(self, node):
        """An index sum with negative terms as a difference: ``n - io * 8``, not ``io * -8 + n``."""
        if node.op in ("add", "sub") and node.dtype == "int64":
            form = linear_form(node)
            if form is not None and any(c < 0 for c in form[0].values()) \
                    and (any(c > 0 for c in form[0].values()) or form[1] > 0):
                return self.difference(*form)
        return self.generic_visit(node)

    def difference(self, terms, constant):
        def term(expr, c):
            expr = self.visit(expr)
            return expr if c == 1 else Binary("mul", expr, const(c))
        plus = [term(t.expr, c) for t, c in terms.items() if c > 0] + ([const(constant)] if constant > 0 else [])
        minus = [term(t.expr, -c) for t, c in terms.items() if c < 0] + ([const(-constant)] if constant < 0 else [])
        result = plus[0]
        for e in plus[1:]:
            result = Binary("add", result, e)
        for e in minus:
            result = Binary("sub", result, e)
        return result

    def visit_BufferLoad(self, node):
        indices = self.indices(node.buffer, node.indices)
        if len(indices) == len(node.indices) and all(a is b for a, b in zip(indices, node.indices)):
            return node
        return type(node)(node.buffer, indices)


def _row_major(buffer) -> bool:
    running = const(1)
    for extent, stride in reversed(list(zip(buffer.shape, buffer.strides))):
        if not structural_equal(simplify_expr(stride), simplify_expr(running)):
            return False
        running = Binary("mul", running, extent)
    return True


def _stmt_lines(s, level: int, out: List[str], names, unflatten: Optional[_Unflatten]):
    pad = "    " * level
    kind = type(s).__name__
    if unflatten is None:
        E = lambda e: expr_to_str(e, names)  # noqa: E731
    else:
        E = lambda e: expr_to_str(unflatten.visit(e), names)  # noqa: E731
    if kind == "For":
        rng = f"range({E(s.extent)})" if isinstance(s.min, Const) and s.min.value == 0 else \
            f"range({E(s.min)}, {E(simplify_expr(s.min + s.extent))})"
        note = "" if s.kind == "serial" else f"  # {s.kind}"
        if s.annotations:
            note += ("  #" if not note else ",") + " " + ", ".join(f"{k}={v}" for k, v in s.annotations)
        out.append(f"{pad}for {E(s.var)} in {rng}:{note}")
        saved = unflatten.enter(s) if unflatten is not None else None
        _stmt_lines(s.body, level + 1, out, names, unflatten)
        if unflatten is not None:
            unflatten.leave(s, saved)
    elif kind == "Seq":
        if not s.stmts:
            out.append(f"{pad}pass")
        for c in s.stmts:
            _stmt_lines(c, level, out, names, unflatten)
    elif kind == "IfThenElse":
        out.append(f"{pad}if {E(s.condition)}:")
        _stmt_lines(s.then_case, level + 1, out, names, unflatten)
        if s.else_case is not None:
            out.append(f"{pad}else:")
            _stmt_lines(s.else_case, level + 1, out, names, unflatten)
    elif kind == "Allocate":
        if unflatten is None:
            shape = ", ".join(E(x) for x in s.buffer.shape)
            out.append(f"{pad}{s.buffer.name} = allocate(({shape},), {s.buffer.dtype}, {s.buffer.scope!r})")
        else:
            shape = ", ".join(E(x) for x in s.buffer.shape) + ("," if len(s.buffer.shape) == 1 else "")
            layout = ""
            if s.buffer.strides is not None and len(s.buffer.shape) > 1 and not _row_major(s.buffer):
                layout = f", strides=({', '.join(E(x) for x in s.buffer.strides)})"
            out.append(f"{pad}{s.buffer.name} = allocate(({shape}), {s.buffer.dtype}, {s.buffer.scope!r}{layout})")
        _stmt_lines(s.body, level, out, names, unflatten)
    elif kind == "BufferStore":
        indices = s.indices if unflatten is None else unflatten.indices(s.buffer, s.indices)
        out.append(f"{pad}{s.buffer.name}[{', '.join(E(i) for i in indices)}] = {E(s.value)}")
    elif kind == "LetStmt":
        out.append(f"{pad}{E(s.var)} = {E(s.value)}")
        _stmt_lines(s.body, level, out, names, unflatten)
    elif kind == "Evaluate":
        out.append(f"{pad}{E(s.value)}")
    elif kind == "KernelLaunch":
        grid = ", ".join(E(x) for x in s.grid)
        block = ", ".join(E(x) for x in s.block)
        args = ", ".join([b.name for b in s.params] + [E(v) for v in s.scalars])
        out.append(f"{pad}launch {s.name}[grid=({grid}), block=({block})]({args}):  # device code")
        _stmt_lines(s.body, level + 1, out, names, unflatten)
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


def primfunc_to_str(func, unique_names: bool = False, flat: bool = False) -> str:
    """The function as text; ``flat``: every index as stored (the structural key's form)."""
    names = _unique_names(func)
    params = ", ".join(f"{b.name}: {b.dtype}[{', '.join(expr_to_str(s) for s in b.shape)}]" for b in func.params)
    head = f"def {func.name}({params}):"
    return head + "\n" + stmt_to_str(func.body, 1, names, flat)


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

