"""The one place loopweave talks to islpy.

Expressions become isl text (affine parts only: +, -, * by constants, floor division
and modulo by positive constants, min/max); isl answers come back as loopweave
expressions.  Variables are named by an :class:`IslNames` table so that two loop
variables that share a user-visible name never collide.  Non-affine expressions yield
``None``, and callers fall back explicitly.
"""
from __future__ import annotations

from fractions import Fraction
from functools import lru_cache
from typing import Dict, Iterable, List, Optional, Sequence

import islpy as isl

from ..dsl import dtypes
from ..dsl.arith import simplify_expr
from ..dsl.expr import Binary, Cast, Compare, Const, Expr, Logical, Select, Var, binary, const, logical_and, logical_or, select
from ..errors import InternalError


class IslNames:
    """A bijection between loopweave Vars and isl identifiers."""

    def __init__(self):
        self.name_of: Dict[int, str] = {}
        self.var_of: Dict[str, Var] = {}

    def __call__(self, v: Var) -> str:
        key = id(v)
        if key not in self.name_of:
            base = "".join(c if c.isalnum() else "_" for c in v.name) or "v"
            name = f"{base}_{len(self.name_of)}"
            self.name_of[key] = name
            self.var_of[name] = v
        return self.name_of[key]


def affine(e: Expr, names: IslNames) -> Optional[str]:
    """isl text for an integer expression, or None if it is not quasi-affine."""
    if isinstance(e, Const):
        if not dtypes.is_int(e.dtype):
            return None
        return f"({e.value})"
    if isinstance(e, Var):
        return names(e) if dtypes.is_int(e.dtype) else None
    if isinstance(e, Cast):
        if dtypes.is_int(e.dtype) and dtypes.is_int(e.value.dtype) and dtypes.bits(e.dtype) >= dtypes.bits(e.value.dtype):
            return affine(e.value, names)
        return None
    if isinstance(e, Binary) and dtypes.is_int(e.dtype):
        if e.op == "mul" and isinstance(e.a, Const):
            b = affine(e.b, names)
            return None if b is None else f"({e.a.value} * {b})"
        a = affine(e.a, names)
        if a is None:
            return None
        if e.op in ("add", "sub", "min", "max"):
            b = affine(e.b, names)
            if b is None:
                return None
            if e.op == "add":
                return f"({a} + {b})"
            if e.op == "sub":
                return f"({a} - {b})"
            return f"{e.op}({a}, {b})"
        if e.op == "mul":
            if isinstance(e.b, Const):
                return f"({e.b.value} * {a})"
            return None
        if e.op in ("floordiv", "floormod") and isinstance(e.b, Const) and e.b.value > 0:
            if e.op == "floordiv":
                return f"floor({a} / {e.b.value})"
            return f"({a} mod {e.b.value})"
    return None


def condition(e: Expr, names: IslNames) -> Optional[str]:
    """isl constraint text for a boolean expression, or None if not affine."""
    if isinstance(e, Const) and e.dtype == dtypes.BOOL:
        return "1 = 1" if e.value else "1 = 0"
    if isinstance(e, Compare):
        a, b = affine(e.a, names), affine(e.b, names)
        if a is None or b is None:
            return None
        op = {"eq": "=", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}[e.op]
        if op == "!=":
            return f"({a} < {b} or {a} > {b})"
        return f"{a} {op} {b}"
    if isinstance(e, Logical):
        a = condition(e.a, names)
        if a is None:
            return None
        if e.op == "not":
            return None  # isl text has no general negation; callers fall back
        b = condition(e.b, names)
        if b is None:
            return None
        return f"(({a}) {e.op} ({b}))"
    return None


_NEGATED = {"eq": "ne", "ne": "eq", "lt": "ge", "le": "gt", "gt": "le", "ge": "lt"}


def negated_condition(e: Expr, names: IslNames) -> Optional[str]:
    """isl constraint text for ``not e``, or None (isl text has no general negation)."""
    if isinstance(e, Const) and e.dtype == dtypes.BOOL:
        return condition(Const(not e.value, dtypes.BOOL), names)
    if isinstance(e, Compare):
        return condition(Compare(_NEGATED[e.op], e.a, e.b), names)
    if isinstance(e, Logical) and e.op in ("and", "or"):
        a, b = negated_condition(e.a, names), negated_condition(e.b, names)
        if a is None or b is None:
            return None
        return f"(({a}) {'or' if e.op == 'and' else 'and'} ({b}))"
    if isinstance(e, Logical) and e.op == "not":
        return condition(e.a, names)
    return None


def equals(var: str, e: Expr, names: IslNames) -> Optional[str]:
    """isl constraint text for ``var = e``, where ``e`` may be a select between quasi-affine
    values under affine conditions (a shifted tail's tile start under a fused loop)."""
    value = affine(e, names)
    if value is not None:
        return f"{var} = {value}"
    split = _split_select(e)
    if split is not None:
        cond, when_true, when_false = split
        c, nc = condition(cond, names), negated_condition(cond, names)
        if c is None or nc is None:
            return None
        t, f = equals(var, when_true, names), equals(var, when_false, names)
        if t is not None and f is not None:
            return f"((({c}) and ({t})) or (({nc}) and ({f})))"
    return None


def range_constraint(var: Var, lo: Expr, extent: Expr, tag: str, names: IslNames) -> Optional[str]:
    """isl text for ``lo <= var < lo + extent`` (a loop's range), or None.  A bound with a select in
    it (the tail tiles of a shifted split under a symbolic extent start at ``select(n <= 31, -1,
    n // 32 - 1) + 1``) becomes a disjunction through existential bounds named after ``tag``."""
    lo_t, ext_t = affine(lo, names), affine(extent, names)
    v = names(var)
    if lo_t is not None and ext_t is not None:
        return f"{lo_t} <= {v} < {lo_t} + {ext_t}"
    lo_c = equals(f"lo{tag}_", lo, names)
    end_c = equals(f"end{tag}_", binary("add", lo, extent), names)
    if lo_c is None or end_c is None:
        return None
    return f"exists (lo{tag}_, end{tag}_ : ({lo_c}) and ({end_c}) and lo{tag}_ <= {v} < end{tag}_)"


def _split_select(e: Expr):
    """(c, e with its first select taken as true, as false) for a select inside integer
    arithmetic (``select(c, a, b) + j``), or None."""
    if isinstance(e, Select) and dtypes.is_int(e.dtype):
        return e.condition, e.true_value, e.false_value
    if isinstance(e, Binary) and dtypes.is_int(e.dtype):
        for side in ("a", "b"):
            inner = _split_select(getattr(e, side))
            if inner is not None:
                c, t, f = inner
                other = e.b if side == "a" else e.a
                pair = (lambda x: Binary(e.op, x, other)) if side == "a" else (lambda x: Binary(e.op, other, x))
                return c, pair(t), pair(f)
    return None


def make_set(params: Sequence[str], dims: Sequence[str], constraints: Iterable[str]) -> isl.Set:
    body = " and ".join(f"({c})" for c in constraints) or "1 = 1"
    return _parse_set(f"[{', '.join(params)}] -> {{ [{', '.join(dims)}] : {body} }}")


@lru_cache(maxsize=4096)
def _parse_set(text: str) -> isl.Set:
    """isl sets are values (operations return new sets), so parsed ones can be shared: the
    prefix/main/suffix copies of a partitioned loop ask the same questions again."""
    try:
        return isl.Set(text)
    except isl.Error as exc:
        raise InternalError(f"isl could not parse {text!r}: {exc}") from exc


# ---------------------------------------------------------------- isl -> expr

def _val(v: isl.Val) -> Fraction:
    return Fraction(int(v.get_num_si()), int(v.get_den_val().to_python()))


def aff_to_expr(aff: isl.Aff, names: IslNames) -> Expr:
    space = aff.get_space()
    terms: List[tuple] = []
    for kind in (isl.dim_type.param, isl.dim_type.in_):
        for k in range(aff.dim(kind)):
            c = _val(aff.get_coefficient_val(kind, k))
            if c:
                terms.append((c, names.var_of[space.get_dim_name(kind, k)]))
    for k in range(aff.dim(isl.dim_type.div)):
        c = _val(aff.get_coefficient_val(isl.dim_type.div, k))
        if c:
            terms.append((c, aff_to_expr(aff.get_div(k), names)))
    constant = _val(aff.get_constant_val())
    denominators = [t[0].denominator for t in terms] + [constant.denominator]
    d = 1
    for q in denominators:
        d = d * q // _gcd(d, q)
    total = const(int(constant * d))
    for c, e in terms:
        total = binary("add", total, binary("mul", const(int(c * d)), e) if c * d != 1 else e)
    if d != 1:
        total = binary("floordiv", total, const(d))
    return total


def _gcd(a: int, b: int) -> int:
    while b:
        a, b = b, a % b
    return a


def constraint_to_expr(c: isl.Constraint, names: IslNames) -> Expr:
    value = aff_to_expr(c.get_aff(), names)
    if c.is_equality():
        return Compare("eq", value, const(0))
    return Compare("ge", value, const(0))


def set_to_condition(s: isl.Set, names: IslNames) -> Expr:
    """A boolean expression over the set's parameters (the set has no set dims)."""
    result = None
    for bset in s.get_basic_sets():
        part = const(True)
        for c in bset.get_constraints():
            part = logical_and(part, constraint_to_expr(c, names))
        result = part if result is None else logical_or(result, part)
    return const(False) if result is None else result


def _as_min_or_max(pw: isl.PwAff, pieces, names: IslNames) -> Optional[Expr]:
    """``min(a, b)`` / ``max(a, b)`` when a two-piece bound is exactly that (isl stays affine)."""
    (_, a), (_, b) = pieces
    domain = pw.domain()
    pa = isl.PwAff.from_aff(a).intersect_domain(domain)
    pb = isl.PwAff.from_aff(b).intersect_domain(domain)
    for op, combined in (("min", pa.min(pb)), ("max", pa.max(pb))):
        if combined.is_equal(pw):
            return binary(op, aff_to_expr(a, names), aff_to_expr(b, names))
    return None


def one_piece(pw: isl.PwAff, nonnegative: Sequence[str]) -> isl.PwAff:
    """``pw`` as a single quasi-affine piece where one piece's formula gives its value everywhere the
    parameters named in ``nonnegative`` (sizes) are >= 0; else ``pw`` itself.

    A non-dividing split's main range ends at ``{ -1 : n <= 7; n//8 - 1 : n >= 8 }``, which prints
    as ``select(n <= 7, -1, n // 8 - 1)``; for every size ``n >= 0`` that is ``n // 8 - 1``.  Exact:
    the two are proven equal by isl over every valid size, and a negative size is not a shape.
    """
    pieces = pw.get_pieces()
    if len(pieces) < 2:
        return pw
    domain = pw.domain()
    params = [domain.get_dim_name(isl.dim_type.param, k) for k in range(domain.dim(isl.dim_type.param))]
    facts = " and ".join(f"{n} >= 0" for n in nonnegative if n in params)
    valid = isl.Set(f"[{', '.join(params)}] -> {{ : {facts or '1 = 1'} }}")
    if not valid.is_subset(domain):
        return pw
    expected = pw.intersect_params(valid)
    for _, aff in pieces:
        candidate = isl.PwAff.from_aff(aff)
        if candidate.intersect_params(valid).is_equal(expected):
            return candidate
    return pw


def pw_aff_to_expr(pw: isl.PwAff, names: IslNames) -> Expr:
    """A loopweave expression for an isl piecewise quasi-affine function (simplified)."""
    return simplify_expr(_pw_aff_to_expr(pw, names))


def _pw_aff_to_expr(pw: isl.PwAff, names: IslNames) -> Expr:
    pieces = pw.get_pieces()
    if not pieces:
        raise InternalError(f"empty piecewise bound {pw}")
    if len(pieces) == 2 and pieces[0][1].dim(isl.dim_type.div) == 0 and pieces[1][1].dim(isl.dim_type.div) == 0:
        try:
            found = _as_min_or_max(pw, pieces, names)
        except isl.Error:
            found = None
        if found is not None:
            return found
    expr = aff_to_expr(pieces[-1][1], names)
    for piece_set, aff in reversed(pieces[:-1]):
        expr = select(set_to_condition(piece_set, names), aff_to_expr(aff, names), expr)
    return expr
