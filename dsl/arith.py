"""Arithmetic on expressions: canonical affine forms, integer ranges, and expression simplification.

The lowest rung of simplification, on expressions alone (TVM's ``arith``): integer
expressions that are affine in variables are rewritten as a canonical sum
``c0 + c1*v1 + ...`` (so ``(i*4 + j) - i*4`` becomes ``j``), floor division and modulo
by a constant are folded where the known ranges of the variables prove the result,
comparisons those ranges decide become constants.  It lives in ``dsl`` because
printing a tensor's definition already needs it (``min + extent`` of an axis); the
loop-IR pass ``lowering/passes/simplify.py`` extends :class:`ExprSimplifier` with the
ranges that enclosing loops give.
"""
from __future__ import annotations

import functools
from typing import Dict, Optional, Tuple

from . import dtypes
from .expr import Binary, Compare, Const, Expr, Logical, Select, Var, binary, compare, const, logical_and, logical_or
from .visitor import Mutator


def linear_form(e: Expr) -> Optional[Tuple[Dict[object, int], int]]:
    """``e`` as ({term: coefficient}, constant) if it is a sum of terms; terms are Vars or opaque nodes."""
    if isinstance(e, Const) and e.dtype == dtypes.INDEX:
        return {}, e.value
    if not (isinstance(e, Expr) and e.dtype == dtypes.INDEX):
        return None
    if isinstance(e, Binary) and e.op in ("add", "sub"):
        a, b = linear_form(e.a), linear_form(e.b)
        if a is None or b is None:
            return None
        sign = 1 if e.op == "add" else -1
        terms = dict(a[0])
        for t, c in b[0].items():
            terms[t] = terms.get(t, 0) + sign * c
        return {t: c for t, c in terms.items() if c}, a[1] + sign * b[1]
    if isinstance(e, Binary) and e.op == "mul":
        a, b = linear_form(e.a), linear_form(e.b)
        if a is not None and b is not None:
            if not b[0]:
                return {t: c * b[1] for t, c in a[0].items() if c * b[1]}, a[1] * b[1]
            if not a[0]:
                return {t: c * a[1] for t, c in b[0].items() if c * a[1]}, a[1] * b[1]
    return {_TermKey(e): 1}, 0


class _TermKey:
    """Hashes a non-linear term structurally (Vars by identity); a minimum or maximum in either
    order of its operands (a shifted tile's start, written both ways, cancels against itself)."""

    __slots__ = ("expr", "_hash")

    def __init__(self, expr):
        self.expr = expr
        self._hash = hash((expr.op, frozenset((hash(expr.a), hash(expr.b))))) if _commutes(expr) else hash(expr)

    def __hash__(self):
        return self._hash

    def __eq__(self, other):
        if not isinstance(other, _TermKey):
            return False
        a, b = self.expr, other.expr
        if _commutes(a) and _commutes(b) and a.op == b.op:
            return bool(a.a == b.b) and bool(a.b == b.a) or bool(a == b)
        return bool(a == b)


def _commutes(e) -> bool:
    return isinstance(e, Binary) and e.op in ("min", "max")


def from_linear(terms: Dict[object, int], constant: int) -> Expr:
    result: Optional[Expr] = None
    ordered = sorted(terms.items(), key=lambda tc: -abs(tc[1]))
    for term, c in ordered:
        e = term.expr
        if c == 1:
            part = e
        elif c == -1 and result is not None:
            result = binary("sub", result, e)
            continue
        else:
            part = binary("mul", e, const(c))
        result = part if result is None else binary("add", result, part)
    if result is None:
        return const(constant)
    if constant > 0:
        return binary("add", result, const(constant))
    if constant < 0:
        return binary("sub", result, const(-constant))
    return result


def _fold_div_mod_pairs(terms: Dict[object, int], constant: int):
    """``k*d*(x // d) + k*(x % d)`` -> ``k*x`` (floor division), e.g. a fused index split back and re-joined."""
    for key, k in list(terms.items()):
        e = key.expr
        if not (isinstance(e, Binary) and e.op == "floormod" and isinstance(e.b, Const) and e.b.value > 0):
            continue
        div_key = _TermKey(Binary("floordiv", e.a, e.b))
        if key not in terms or terms.get(div_key) != k * e.b.value:
            continue
        inner = linear_form(e.a)
        if inner is None:
            continue
        del terms[key], terms[div_key]
        for t, c in inner[0].items():
            terms[t] = terms.get(t, 0) + k * c
        terms = {t: c for t, c in terms.items() if c}
        constant += k * inner[1]
    return terms, constant


def binary_bound(op: str, a: Tuple[int, int], b: Tuple[int, int]) -> Optional[Tuple[int, int]]:
    """The inclusive range of ``a op b`` over integer ranges ``a`` and ``b`` (None when unbounded
    here: a division by anything but a positive constant)."""
    if op == "add":
        return a[0] + b[0], a[1] + b[1]
    if op == "sub":
        return a[0] - b[1], a[1] - b[0]
    if op == "mul":
        products = [x * y for x in a for y in b]
        return min(products), max(products)
    if op == "floordiv" and b[0] == b[1] and b[0] > 0:
        return a[0] // b[0], a[1] // b[0]
    if op == "floormod" and b[0] == b[1] and b[0] > 0:
        if a[0] // b[0] == a[1] // b[0]:
            return a[0] % b[0], a[1] % b[0]
        return 0, b[0] - 1
    if op == "min":
        return min(a[0], b[0]), min(a[1], b[1])
    if op == "max":
        return max(a[0], b[0]), max(a[1], b[1])
    return None


#: the largest divisor ``_one_term_quotient`` tries (it evaluates the quotient at each remainder)
ONE_TERM_DIVISOR_LIMIT = 1024


def _one_term_quotient(terms: Dict[object, int], c: int, d: int) -> Optional[Expr]:
    """``(a*x + c) // d``, 0 < a, 0 <= c < d, as a sum of ``x`` and ``x // d`` where that is
    exact: with ``x = d*q + r``, the quotient is ``a*q + (a*r + c) // d``, and where the second part
    is linear in ``r`` over its range [0, d) (``r*k + m``) the whole is ``k*x + (a - k*d)*q + m``.
    isl writes ``x - x // 56`` as ``(55*x + 55) // 56``; so written, a region origin and the index
    taken relative to it did not cancel, and every access of a fused loop's register tile carried
    three divisions (DenseNet's 1x1 convs: 207 KB of LLVM IR each).  Holds for any integer ``x``
    (floor division)."""
    if len(terms) != 1 or not 1 < d <= ONE_TERM_DIVISOR_LIMIT:
        return None
    (key, a), = terms.items()
    linear = _remainder_part_linear(a, c, d)
    if linear is None:
        return None
    k, m = linear
    q = _TermKey(Binary("floordiv", key.expr, const(d)))
    return from_linear({t: v for t, v in ((key, k), (q, a - k * d)) if v}, m)


@functools.lru_cache(maxsize=4096)
def _remainder_part_linear(a: int, c: int, d: int) -> Optional[Tuple[int, int]]:
    """(k, m) where ``(a*r + c) // d == k*r + m`` for every r in [0, d) and k != 0, else None
    (k == 0: ``a*(x // d) + m`` is no simpler than the quotient as it is)."""
    values = [(a * r + c) // d for r in range(d)]
    m, k = values[0], values[1] - values[0]
    if k == 0 or any(v != m + k * r for r, v in enumerate(values)):
        return None
    return k, m


class ExprSimplifier(Mutator):
    """Expression simplification with known inclusive ranges of integer variables (``ranges``)."""

    def __init__(self):
        self.ranges: Dict[int, Tuple[int, int]] = {}  # id(var) -> (lo, hi) inclusive

    def bound(self, e: Expr) -> Optional[Tuple[int, int]]:
        if isinstance(e, Const) and dtypes.is_int(e.dtype):
            return e.value, e.value
        if isinstance(e, Var):
            return self.ranges.get(id(e))
        if isinstance(e, Binary) and e.dtype == dtypes.INDEX:
            a, b = self.bound(e.a), self.bound(e.b)
            if a is None or b is None:
                return None
            return binary_bound(e.op, a, b)
        return None

    def visit_Var(self, node):
        """A variable whose range is one value (a loop of extent 1, e.g. the only block) is that value."""
        r = self.ranges.get(id(node))
        if r is not None and r[0] == r[1] and node.dtype == dtypes.INDEX:
            return const(r[0], node.dtype)
        return node

    def visit_Binary(self, node):
        a, b = self.visit(node.a), self.visit(node.b)
        if node.op in ("floordiv", "floormod") and isinstance(b, Const) and b.value == 0 and dtypes.is_int(b.dtype):
            # a divisor that folds to 0 is a fused axis's inner extent that is empty here (a
            # region of extent 0): the fused loop has extent 0 and this code never runs
            return const(0, node.dtype)
        e = binary(node.op, a, b) if (a is not node.a or b is not node.b) else node
        if not isinstance(e, Binary):
            return e
        if e.dtype == dtypes.INDEX:
            if e.op in ("add", "sub", "mul"):
                form = linear_form(e)
                if form is not None:
                    return from_linear(*_fold_div_mod_pairs(*form))
            if e.op in ("floordiv", "floormod") and isinstance(e.b, Const) and e.b.value > 0:
                return self._divmod(e)
            if e.op in ("min", "max"):
                if isinstance(e.a, Const) and not isinstance(e.b, Const):
                    e = Binary(e.op, e.b, e.a)  # canonical order: constant last, so equal terms cancel
                ba, bb = self.bound(e.a), self.bound(e.b)
                if ba is not None and bb is not None:
                    if ba[1] <= bb[0]:
                        return e.a if e.op == "min" else e.b
                    if bb[1] <= ba[0]:
                        return e.b if e.op == "min" else e.a
        return e

    def _divmod(self, e: Binary) -> Expr:
        d = e.b.value
        form = linear_form(e.a)
        if form is None:
            return e
        terms, c = form
        # split the sum into the part divisible by d and the rest
        multiple = {t: k for t, k in terms.items() if k % d == 0}
        rest = {t: k for t, k in terms.items() if k % d != 0}
        rest_expr = from_linear(rest, c % d)
        rb = self.bound(rest_expr)
        if rb is not None and 0 <= rb[0] and rb[1] < d:
            if e.op == "floordiv":
                return from_linear({t: k // d for t, k in multiple.items()}, c // d)
            return rest_expr
        whole = self.bound(e.a)
        if whole is not None and 0 <= whole[0] and whole[1] < d:
            return e.a if e.op == "floormod" else const(0)
        # canonical form: every coefficient and the constant reduced mod d, the whole multiples
        # taken out (floor((128a + i) / 56) = 2a + floor((16a + i) / 56)), as isl writes region
        # bounds; so an index and the origin it is taken relative to cancel term by term
        # (only for non-negative sums: negative coefficients would come out as (3i + 3) // 4 forms)
        if terms and all(k < 0 for k in terms.values()) and e.op == "floordiv":
            # a negated sum: floor((c - y) / d) = -floor((y - c + d - 1) / d), so isl's
            # ``(-f - 1) // 28`` is ``-(f // 28) - 1`` and cancels against ``f // 28`` (a batch's
            # fused (image, row) loop left two divisions in every access of the Winograd tile)
            flipped = self._divmod(Binary("floordiv", from_linear({t: -k for t, k in terms.items()}, d - 1 - c), e.b))
            return binary("sub", const(0, e.dtype), flipped)
        if any(k < 0 for k in terms.values()) or c < 0:
            return e
        if all(k < d for k in terms.values()) and c < d:
            folded = _one_term_quotient(terms, c, d) if e.op == "floordiv" else None
            return e if folded is None else folded
        reduced = Binary(e.op, from_linear({t: k % d for t, k in terms.items() if k % d}, c % d), e.b)
        if e.op == "floormod":
            return reduced
        outside = {t: k // d for t, k in terms.items() if k // d}
        outside[_TermKey(reduced)] = 1
        return from_linear(outside, c // d)

    def visit_Compare(self, node):
        a, b = self.visit(node.a), self.visit(node.b)
        e = node if (a is node.a and b is node.b) else Compare(node.op, a, b)
        if dtypes.is_int(e.a.dtype):
            diff = self.bound(self.visit(binary("sub", e.a, e.b))) if e.a.dtype == dtypes.INDEX else None
            if diff is not None:
                lo, hi = diff
                verdict = {"lt": (hi < 0, lo >= 0), "le": (hi <= 0, lo > 0), "gt": (lo > 0, hi <= 0),
                           "ge": (lo >= 0, hi < 0), "eq": (lo == hi == 0, lo > 0 or hi < 0),
                           "ne": (lo > 0 or hi < 0, lo == hi == 0)}[e.op]
                if verdict[0]:
                    return const(True)
                if verdict[1]:
                    return const(False)
        if isinstance(e.a, Const) and isinstance(e.b, Const):
            return compare(e.op, e.a, e.b)
        return e

    def visit_Logical(self, node):
        a = self.visit(node.a)
        if node.op == "not":
            if isinstance(a, Const):
                return const(not a.value)
            return node if a is node.a else Logical("not", a)
        b = self.visit(node.b)
        return (logical_and if node.op == "and" else logical_or)(a, b)

    def visit_Select(self, node):
        c = self.visit(node.condition)
        if isinstance(c, Const):
            return self.visit(node.true_value if c.value else node.false_value)
        t, f = self.visit(node.true_value), self.visit(node.false_value)
        if t.same_as(f):
            return t
        if c is node.condition and t is node.true_value and f is node.false_value:
            return node
        return Select(c, t, f)


def simplify_expr(e: Expr) -> Expr:
    """``e`` simplified with no range facts (constant folding and affine canonical form)."""
    return ExprSimplifier().visit(e)
