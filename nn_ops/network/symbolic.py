"""The one adapter to sympy: symbolic sizes of a network (``N``, ``seq``, ``N*seq``, ``(H - 1)//2 + 1``).

A size is a Python int or a sympy expression over *dimension symbols*: integer symbols
assumed >= 1 (loopweave refuses empty inputs, so every symbolic size is positive).
Everything else in loopweave reaches sympy through this module:

- building sizes: :func:`dim`, :func:`symbol`, :func:`floordiv`, :func:`ceildiv`, :func:`product`,
  :func:`remainder`, :func:`positive_part`, :func:`divisible_not_by` (the last three: kernel variants' conditions);
- proofs: :func:`prove` answers True, False or None (cannot tell) for a sympy condition,
  e.g. ``Eq(a, b)``; graph-level shape inference proves what it can and records the rest as
  run-time checks; :func:`at_least` is a cheap sufficient test of ``a >= b`` for the memory plan;
- :func:`evaluate`: a size (or condition) at a binding ``{"seq": 128}``, exactly (fractions,
  no floats);
- :func:`show`: a size as Python-like text (``(H - 1)//2 + 1``);
- :func:`to_dsl` / :func:`from_dsl`: the conversion between sympy sizes and loopweave's
  expression IR (``lw.var`` sizes), in this one place.

sympy is not used in hot paths: shapes are inferred once per import; per call only
:func:`evaluate` of a few small expressions runs.
"""
from __future__ import annotations

import math
from fractions import Fraction
from functools import lru_cache
from typing import Dict, Iterable, Mapping, Optional, Union

import sympy

from ...errors import InternalError

Dim = Union[int, sympy.Expr]


@lru_cache(maxsize=None)
def symbol(name: str) -> sympy.Symbol:
    """The dimension symbol ``name`` (an integer >= 1)."""
    return sympy.Symbol(name, integer=True, positive=True)


def dim(value) -> sympy.Expr:
    """``value`` (an int, a symbol name, or a sympy expression) as a sympy size."""
    if isinstance(value, sympy.Basic):
        return value
    if isinstance(value, str):
        return symbol(value)
    if isinstance(value, (bool,)) or not isinstance(value, (int,)) and not hasattr(value, "__index__"):
        raise InternalError(f"a size must be an int, a symbol name or a sympy expression, got {value!r}")
    return sympy.Integer(int(value))


def is_static(value) -> bool:
    """True when ``value`` is a plain integer (no symbols)."""
    return isinstance(value, int) or (isinstance(value, sympy.Basic) and value.is_Integer)


def as_int(value) -> Optional[int]:
    """``value`` as a Python int when it is static, else None."""
    return int(value) if is_static(value) else None


def floordiv(a, b, evaluate: bool = True) -> sympy.Expr:
    """``a // b`` (Python's floor division) on sizes; ``evaluate=False`` for a size only evaluated at
    bindings (sympy's floor of a convolved size asks its assumptions: ms a call)."""
    a, b = dim(a), dim(b)
    if b == 1:
        return a
    return sympy.floor(a / b, evaluate=evaluate)


def ceildiv(a, b, evaluate: bool = True) -> sympy.Expr:
    """``-(-a // b)`` on sizes (``evaluate``: as ``floordiv``'s)."""
    a, b = dim(a), dim(b)
    if b == 1:
        return a
    return sympy.ceiling(a / b, evaluate=evaluate)


# The three below build variants' conditions, which are only evaluated at bindings: left unevaluated,
# as sympy's own ``Mod``, ``Max`` and ``Min`` of a convolved size asked its assumptions for a third of a
# compile-once ResNet-18's walk.

def remainder(a, b) -> sympy.Expr:
    """``a % b`` (Python's, for a positive ``b``) on sizes, unevaluated."""
    return sympy.Mod(dim(a), dim(b), evaluate=False)


def positive_part(value) -> sympy.Expr:
    """``max(0, value)``, unevaluated: a variant's condition adds these up, each 0 where its part holds."""
    return sympy.Max(0, dim(value), evaluate=False)


def divisible_not_by(a, p: int, q: int) -> sympy.Expr:
    """A size that is 0 exactly where ``p`` divides ``a`` and ``q`` does not (else positive), unevaluated:
    the condition (``<= 0``) of a kernel variant for rows that blocks of ``p`` fit and blocks of ``q`` not."""
    a = dim(a)
    return sympy.Mod(a, p, evaluate=False) + 1 - sympy.Min(1, sympy.Mod(a, q, evaluate=False), evaluate=False)


def product(dims: Iterable) -> sympy.Expr:
    result = sympy.Integer(1)
    for d in dims:
        result = result * dim(d)
    return result


def simplify(value) -> sympy.Expr:
    """A cheap canonical form: expanded polynomial parts (sympy's automatic rules do the rest)."""
    value = dim(value)
    if value.is_Integer or value.is_Symbol:
        return value
    return sympy.expand(value)


def prove(condition) -> Optional[bool]:
    """True when ``condition`` (a sympy relation or boolean) holds for every binding of its symbols
    (each >= 1), False when it never holds, None when that depends on the binding or cannot be shown."""
    if condition is True or condition is sympy.true:
        return True
    if condition is False or condition is sympy.false:
        return False
    if isinstance(condition, sympy.Eq):
        diff = simplify(condition.lhs - condition.rhs)
        if diff == 0:
            return True
        if diff.is_zero is False or diff.is_positive or diff.is_negative:
            return False
        return None
    if isinstance(condition, sympy.Or):
        answers = [prove(c) for c in condition.args]
        if any(a is True for a in answers):
            return True
        return False if all(a is False for a in answers) else None
    if isinstance(condition, sympy.And):
        answers = [prove(c) for c in condition.args]
        if any(a is False for a in answers):
            return False
        return True if all(a is True for a in answers) else None
    if isinstance(condition, (sympy.GreaterThan, sympy.StrictGreaterThan, sympy.LessThan, sympy.StrictLessThan)):
        big, small = ((condition.lhs, condition.rhs) if isinstance(condition, (sympy.GreaterThan,
                                                                               sympy.StrictGreaterThan))
                      else (condition.rhs, condition.lhs))
        strict = isinstance(condition, (sympy.StrictGreaterThan, sympy.StrictLessThan))
        low = lower_bound(big - small)
        if low is not None and (low > 0 if strict else low >= 0):
            return True
        high = lower_bound(small - big)         # big - small <= -high
        if high is not None and (high >= 0 if strict else high > 0):
            return False
        return None
    return None          # not a kind of condition sizes need; sympy.simplify took seconds on a few


def lower_bound(value) -> Optional[Fraction]:
    """A lower bound of ``value`` over every binding of its symbols (each >= 1), by interval
    arithmetic (floor/ceil/Mod/Max/Min and monotone sums and products); None when unbounded below."""
    e = dim(value)
    if e.is_Rational:
        return Fraction(int(e.p), int(e.q))
    if e.is_Symbol:
        return Fraction(1)
    if isinstance(e, sympy.Add):
        lows = [lower_bound(a) for a in e.args]
        return None if any(x is None for x in lows) else sum(lows, Fraction(0))
    if isinstance(e, sympy.Mul):          # a product is bounded below when every factor is >= 0
        lows = [lower_bound(a) for a in e.args]
        if any(x is None or x < 0 for x in lows):
            return None
        return math.prod(lows, start=Fraction(1))
    if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
        low = lower_bound(e.base)
        return low ** int(e.exp) if low is not None and low >= 0 else None
    if isinstance(e, sympy.floor):
        low = lower_bound(e.args[0])
        return None if low is None else Fraction(math.floor(low))
    if isinstance(e, sympy.ceiling):
        low = lower_bound(e.args[0])
        return None if low is None else Fraction(math.ceil(low))
    if isinstance(e, sympy.Mod):
        return Fraction(0)
    if isinstance(e, sympy.Max):
        lows = [x for x in (lower_bound(a) for a in e.args) if x is not None]
        return max(lows) if lows else None
    if isinstance(e, sympy.Min):
        lows = [lower_bound(a) for a in e.args]
        return None if any(x is None for x in lows) else min(lows)
    return None


def at_least(a, b) -> bool:
    """A cheap, sufficient test of ``a >= b`` for sizes: each term of ``b`` (the arguments of a
    ``Max``) is below some term of ``a`` as polynomials in symbols >= 1 (``x - y`` with every symbol
    written ``1 + t``, t >= 0, has no negative coefficient).  False means "not shown", not "false";
    floors and other non-polynomial terms are never shown.  Used where ``prove`` (sympy's
    ``simplify`` on inequalities, seconds on a few dozen of them) would be too slow."""
    a_terms = dim(a).args if isinstance(dim(a), sympy.Max) else (dim(a),)
    b_terms = dim(b).args if isinstance(dim(b), sympy.Max) else (dim(b),)
    return all(any(_nonnegative(x - y) for x in a_terms) for y in b_terms)


def _nonnegative(e) -> bool:
    e = sympy.expand(e)
    if e.is_number:
        return bool(e >= 0)
    symbols = sorted(e.free_symbols, key=lambda s: s.name)
    if not e.is_polynomial(*symbols):
        return False
    shifted = sympy.expand(e.subs({s: s + 1 for s in symbols}, simultaneous=True))
    return all(c >= 0 for c in sympy.Poly(shifted, *symbols).coeffs())


def equal(a, b) -> Optional[bool]:
    """:func:`prove` of ``a == b`` on two sizes."""
    a, b = dim(a), dim(b)
    if a == b:
        return True
    if (a.has(sympy.floor, sympy.ceiling) or b.has(sympy.floor, sympy.ceiling)) and \
            _whole_parts_out(a) == _whole_parts_out(b):
        return True
    return prove(sympy.Eq(a, b, evaluate=False))


def _whole_parts_out(e):
    """``e`` with each ``floor(x + c)`` (``c`` a rational constant) written ``floor(x + frac(c)) +
    floor(c)``: the same size, in a form where ``floor(x/2 - 1/2) + 1`` and ``floor(x/2 + 1/2)`` (a
    pool's output size computed two ways) are equal as expressions."""
    if not isinstance(e, sympy.Expr) or not e.args:
        return e
    args = [_whole_parts_out(a) for a in e.args]
    if isinstance(e, sympy.ceiling):        # ceil(y) = floor(y + (q - 1)/q) where q*y is an integer
        inner = sympy.expand(args[0])
        q = 1
        for term, coeff in inner.as_coefficients_dict().items():
            if not coeff.is_Rational or not (term == 1 or term.is_integer):
                return sympy.ceiling(inner)
            q = math.lcm(q, int(coeff.q))
        return _whole_parts_out(sympy.floor(inner + sympy.Rational(q - 1, q)))
    if isinstance(e, sympy.floor):
        inner = sympy.expand(args[0])
        c = inner.as_coeff_Add()[0]
        if c.is_Rational and c != 0:
            whole = sympy.floor(c)
            return sympy.floor(inner - whole) + whole
        return sympy.floor(inner)
    return sympy.expand(e.func(*args))


def free_symbols(value) -> list:
    """The names of the dimension symbols ``value`` depends on, sorted."""
    return sorted(s.name for s in dim(value).free_symbols) if isinstance(value, sympy.Basic) else []


# ----------------------------------------------------------------------------- evaluation
def evaluate(value, binding: Mapping[str, int]):
    """``value`` (a size or a condition) at ``binding`` ({symbol name: int}): an int (or bool), exactly."""
    if isinstance(value, (bool, int)):
        return value
    result = _exact(value, binding)
    if isinstance(result, bool):
        return result
    if isinstance(result, Fraction):
        if result.denominator != 1:
            raise InternalError(f"size {show(value)} is not a whole number at {dict(binding)}: {result}")
        return int(result)
    return result


def _exact(e, binding):
    if e is sympy.true or e is True:
        return True
    if e is sympy.false or e is False:
        return False
    if e.is_Integer:
        return Fraction(int(e))
    if e.is_Rational:
        return Fraction(int(e.p), int(e.q))
    if e.is_Symbol:
        if e.name not in binding:
            raise InternalError(f"symbol {e.name!r} has no value in {dict(binding)}")
        return Fraction(int(binding[e.name]))
    args = [_exact(a, binding) for a in e.args]
    if isinstance(e, sympy.Add):
        return sum(args, Fraction(0))
    if isinstance(e, sympy.Mul):
        return math.prod(args, start=Fraction(1))
    if isinstance(e, sympy.Pow):
        return args[0] ** int(args[1])
    if isinstance(e, sympy.floor):
        return Fraction(math.floor(args[0]))
    if isinstance(e, sympy.ceiling):
        return Fraction(math.ceil(args[0]))
    if isinstance(e, sympy.Mod):
        return args[0] - args[1] * math.floor(args[0] / args[1])
    if isinstance(e, sympy.Max):
        return max(args)
    if isinstance(e, sympy.Min):
        return min(args)
    if isinstance(e, sympy.Eq):
        return args[0] == args[1]
    if isinstance(e, sympy.Ne):
        return args[0] != args[1]
    if isinstance(e, (sympy.GreaterThan, sympy.StrictGreaterThan, sympy.LessThan, sympy.StrictLessThan)):
        ops = {sympy.GreaterThan: lambda x, y: x >= y, sympy.StrictGreaterThan: lambda x, y: x > y,
               sympy.LessThan: lambda x, y: x <= y, sympy.StrictLessThan: lambda x, y: x < y}
        return ops[type(e)](args[0], args[1])
    if isinstance(e, sympy.Or):
        return any(args)
    if isinstance(e, sympy.And):
        return all(args)
    if isinstance(e, sympy.Not):
        return not args[0]
    raise InternalError(f"cannot evaluate {e!r} ({type(e).__name__}): not a size expression")


# ----------------------------------------------------------------------------- printing
def show(value) -> str:
    """A size as Python-like text: ``N*seq``, ``(H - 1)//2 + 1``, ``max(a, b)``."""
    if isinstance(value, int):
        return str(value)
    return _show(dim(value))


def _show(e) -> str:
    if isinstance(e, (sympy.floor, sympy.ceiling)):
        num, den = sympy.fraction(sympy.together(e.args[0]))
        text = f"({_show(num)})" if not (num.is_Symbol or num.is_Integer) else _show(num)
        if isinstance(e, sympy.floor):
            return f"{text}//{_show(den)}"
        return f"-(-{text}//{_show(den)})"
    if isinstance(e, sympy.Mod):
        return f"({_show(e.args[0])}) % {_show(e.args[1])}"
    if isinstance(e, (sympy.Max, sympy.Min)):
        return f"{type(e).__name__.lower()}({', '.join(_show(a) for a in e.args)})"
    if isinstance(e, sympy.Eq):
        return f"{_show(e.lhs)} == {_show(e.rhs)}"
    if isinstance(e, (sympy.Or, sympy.And)):
        joiner = " or " if isinstance(e, sympy.Or) else " and "
        return joiner.join(_show(a) for a in e.args)
    if isinstance(e, sympy.Add) and any(isinstance(a, (sympy.floor, sympy.ceiling, sympy.Mod, sympy.Max, sympy.Min))
                                        for a in e.args):
        parts = sorted(e.args, key=lambda a: a.is_Number)      # the constant last: (H - 1)//2 + 1
        text = _show(parts[0])
        for a in parts[1:]:
            text += f" - {_show(-a)}" if a.could_extract_minus_sign() else f" + {_show(a)}"
        return text
    return sympy.sstr(e)


# ----------------------------------------------------------------------------- DSL conversion
def to_dsl(value, variables: Mapping[str, object]):
    """A size as a DSL index expression; ``variables`` maps each symbol name to its ``lw.var``.

    Rational coefficients only occur inside floor/ceiling/Mod (sizes are whole numbers), where
    the division becomes ``//`` by the common denominator."""
    from ...dsl.expr import as_expr, binary, const
    e = dim(value)

    def conv(e):
        if e.is_Integer:
            return const(int(e), "int64")
        if e.is_Symbol:
            if e.name not in variables:
                raise InternalError(f"no DSL variable for symbol {e.name!r} (have {sorted(variables)})")
            return as_expr(variables[e.name])
        if isinstance(e, sympy.Add):
            return _fold(binary, "add", [conv(a) for a in e.args])
        if isinstance(e, sympy.Mul):
            if any(a.is_Rational and not a.is_Integer for a in e.args):
                raise InternalError(f"size {show(e)} is not a whole-number expression")
            return _fold(binary, "mul", [conv(a) for a in e.args])
        if isinstance(e, sympy.Pow) and e.exp.is_Integer and e.exp > 0:
            return _fold(binary, "mul", [conv(e.base)] * int(e.exp))
        if isinstance(e, (sympy.floor, sympy.ceiling)):
            num, den = sympy.fraction(sympy.together(e.args[0]))
            if not den.is_Integer:
                raise InternalError(f"cannot divide by the symbolic {den} in {show(e)}")
            n, d = conv(sympy.expand(num)), int(den)
            if isinstance(e, sympy.ceiling):
                return binary("floordiv", binary("add", n, const(d - 1, "int64")), const(d, "int64"))
            return binary("floordiv", n, const(d, "int64"))
        if isinstance(e, sympy.Mod):
            return binary("floormod", conv(e.args[0]), conv(e.args[1]))
        if isinstance(e, (sympy.Max, sympy.Min)):
            return _fold(binary, "max" if isinstance(e, sympy.Max) else "min", [conv(a) for a in e.args])
        raise InternalError(f"cannot convert size {e!r} ({type(e).__name__}) to a DSL expression")

    return conv(e)


def _fold(binary, op, items):
    result = items[0]
    for item in items[1:]:
        result = binary(op, result, item)
    return result


def from_dsl(expr) -> sympy.Expr:
    """A DSL index expression (vars, constants, + - * // % min max) as a sympy size."""
    from ...dsl.expr import Binary, Cast, Const, Var
    if isinstance(expr, int):
        return sympy.Integer(expr)
    if isinstance(expr, Var):
        return symbol(expr.name)
    if isinstance(expr, Const):
        if isinstance(expr.value, bool) or not isinstance(expr.value, int):
            raise InternalError(f"{expr!r} is not an integer size")
        return sympy.Integer(expr.value)
    if isinstance(expr, Cast):
        return from_dsl(expr.value)
    if isinstance(expr, Binary):
        a, b = from_dsl(expr.a), from_dsl(expr.b)
        ops = {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "floordiv": lambda: floordiv(a, b),
               "floormod": lambda: sympy.Mod(a, b), "min": lambda: sympy.Min(a, b), "max": lambda: sympy.Max(a, b)}
        if expr.op in ops:
            return ops[expr.op]()
    raise InternalError(f"cannot convert {expr!r} to a sympy size (only + - * // % min max of vars and ints)")


def dsl_variables(names: Iterable[str]) -> Dict[str, object]:
    """One ``lw.var`` per symbol name (names that are not identifiers, like ``input.0``, are mangled)."""
    from ...dsl.expr import var
    out = {}
    for name in names:
        ident = "".join(c if c.isalnum() or c == "_" else "_" for c in name)
        if not ident.isidentifier():
            ident = "s_" + ident
        out[name] = var(ident)
    return out
