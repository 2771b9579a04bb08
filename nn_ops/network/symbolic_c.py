"""Sizes and conditions over the symbols as C: what an exported compile-once library evaluates.

``symbolic.evaluate`` computes a size exactly with ``Fraction`` s; the C here does the same with
64-bit rationals (``lwq``: numerator, denominator > 0, kept reduced), so a floor, a ceiling, a
``Mod`` or a ``Max`` gives in C what it gives in Python.  Every operation checks for overflow and
sets ``lwq_overflow`` instead of wrapping: a caller reads it after evaluating and refuses the
sizes (they are too large for the network) rather than run with a wrong arena size.
``c_size(expr, symbols)`` is a C expression of type ``lwq``; ``c_condition`` one of type ``int``;
symbol ``k`` of ``symbols`` is read as ``s[k]`` (an ``int64_t`` array).
"""
from __future__ import annotations

from typing import Sequence

import sympy

from ...errors import InternalError

C_RATIONALS = r"""
typedef struct { int64_t n, d; } lwq;      /* n / d, d > 0, reduced */
static __thread int lwq_overflow;

static int64_t lwq_gcd(int64_t a, int64_t b) {
    if (a < 0) a = -a;
    while (b) { int64_t t = a % b; a = b; b = t; }
    return a;
}
static int64_t lwq_mul_i(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_mul_overflow(a, b, &r)) { lwq_overflow = 1; return 1; }
    return r;
}
static int64_t lwq_add_i(int64_t a, int64_t b) {
    int64_t r;
    if (__builtin_add_overflow(a, b, &r)) { lwq_overflow = 1; return 0; }
    return r;
}
static lwq lwq_make(int64_t n, int64_t d) {
    lwq r;
    int64_t g;
    if (d == 0 || n == INT64_MIN || d == INT64_MIN) { lwq_overflow = 1; n = 0; d = 1; }
    if (d < 0) { n = -n; d = -d; }
    g = lwq_gcd(n, d);
    if (g > 1) { n /= g; d /= g; }
    r.n = n; r.d = d;
    return r;
}
static lwq lwq_int(int64_t n) { return lwq_make(n, 1); }
static lwq lwq_add(lwq a, lwq b) {
    return lwq_make(lwq_add_i(lwq_mul_i(a.n, b.d), lwq_mul_i(b.n, a.d)), lwq_mul_i(a.d, b.d));
}
static lwq lwq_mul(lwq a, lwq b) { return lwq_make(lwq_mul_i(a.n, b.n), lwq_mul_i(a.d, b.d)); }
static lwq lwq_div(lwq a, lwq b) { return lwq_make(lwq_mul_i(a.n, b.d), lwq_mul_i(a.d, b.n)); }
static lwq lwq_pow(lwq a, int k) {
    lwq r = lwq_int(1);
    int i;
    for (i = 0; i < (k < 0 ? -k : k); i++) r = lwq_mul(r, a);
    return k < 0 ? lwq_div(lwq_int(1), r) : r;
}
static int64_t lwq_floor_i(lwq a) { return a.n / a.d - (a.n % a.d != 0 && a.n < 0); }
static lwq lwq_floor(lwq a) { return lwq_int(lwq_floor_i(a)); }
static lwq lwq_ceil(lwq a) { return lwq_int(-lwq_floor_i(lwq_make(-a.n, a.d))); }
static lwq lwq_mod(lwq a, lwq b) {
    if (b.n == 0) { lwq_overflow = 1; return lwq_int(0); }
    return lwq_add(a, lwq_mul(lwq_int(-1), lwq_mul(b, lwq_floor(lwq_div(a, b)))));
}
static int lwq_cmp(lwq a, lwq b) {
    int64_t x = lwq_mul_i(a.n, b.d), y = lwq_mul_i(b.n, a.d);
    return (x > y) - (x < y);
}
static lwq lwq_max(lwq a, lwq b) { return lwq_cmp(a, b) >= 0 ? a : b; }
static lwq lwq_min(lwq a, lwq b) { return lwq_cmp(a, b) <= 0 ? a : b; }
/* a size: a whole number (anything else is an overflow: the sizes do not fit the network) */
static int64_t lwq_whole(lwq a) {
    if (a.d != 1) lwq_overflow = 1;
    return a.n;
}
"""

_COMPARE = {sympy.Eq: "==", sympy.Ne: "!=", sympy.GreaterThan: ">=", sympy.StrictGreaterThan: ">",
            sympy.LessThan: "<=", sympy.StrictLessThan: "<"}


def c_size(expr, symbols: Sequence[str]) -> str:
    """``expr`` (a sympy size) as a C expression of type ``lwq``."""
    e = sympy.sympify(expr)
    if e.is_Integer:
        return f"lwq_int(INT64_C({int(e)}))"
    if e.is_Rational:
        return f"lwq_make(INT64_C({int(e.p)}), INT64_C({int(e.q)}))"
    if e.is_Symbol:
        if e.name not in symbols:
            raise InternalError(f"size {e} names a symbol the library does not take ({', '.join(symbols)})")
        return f"lwq_int(s[{list(symbols).index(e.name)}])"
    args = [c_size(a, symbols) for a in e.args] if not isinstance(e, sympy.Pow) else []
    folds = {sympy.Add: "lwq_add", sympy.Mul: "lwq_mul", sympy.Max: "lwq_max", sympy.Min: "lwq_min"}
    for kind, fn in folds.items():
        if isinstance(e, kind):
            out = args[0]
            for a in args[1:]:
                out = f"{fn}({out}, {a})"
            return out
    if isinstance(e, sympy.Pow):
        if not e.exp.is_Integer:
            raise InternalError(f"size {e} has a power that is not a whole number")
        return f"lwq_pow({c_size(e.base, symbols)}, {int(e.exp)})"
    if isinstance(e, sympy.floor):
        return f"lwq_floor({args[0]})"
    if isinstance(e, sympy.ceiling):
        return f"lwq_ceil({args[0]})"
    if isinstance(e, sympy.Mod):
        return f"lwq_mod({args[0]}, {args[1]})"
    raise InternalError(f"cannot write size {e!r} ({type(e).__name__}) in C: not a size expression")


def c_condition(expr, symbols: Sequence[str]) -> str:
    """``expr`` (a sympy condition over sizes) as a C expression of type ``int``."""
    e = sympy.sympify(expr)
    if e is sympy.true:
        return "1"
    if e is sympy.false:
        return "0"
    for kind, op in _COMPARE.items():
        if isinstance(e, kind):
            return f"(lwq_cmp({c_size(e.args[0], symbols)}, {c_size(e.args[1], symbols)}) {op} 0)"
    if isinstance(e, sympy.And):
        return "(" + " && ".join(c_condition(a, symbols) for a in e.args) + ")"
    if isinstance(e, sympy.Or):
        return "(" + " || ".join(c_condition(a, symbols) for a in e.args) + ")"
    if isinstance(e, sympy.Not):
        return f"(!{c_condition(e.args[0], symbols)})"
    raise InternalError(f"cannot write condition {e!r} ({type(e).__name__}) in C")
