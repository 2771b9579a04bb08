"""dsl/arith.py: the expression simplifier's folding of quotients isl writes."""
from hypothesis import given, settings, strategies as st

import loopweave as lw
from loopweave.dsl.arith import simplify_expr
from loopweave.dsl.expr import Const, Var, binary, const
from loopweave.dsl.visitor import substitute


def _value(e, x, v):
    out = simplify_expr(substitute(e, {x: lw.const(v)}))
    assert isinstance(out, Const), out
    return out.value


def test_an_origin_isl_writes_as_one_quotient_cancels_against_the_index():
    """isl writes ``x - x // 56`` as ``(55*x + 55) // 56``: an index relative to that origin must
    fold to a constant (a fused loop's register tile carried three divisions per access)."""
    x = lw.var("x")
    assert str(simplify_expr((x * 55 + 55) // 56)) == "x - x // 56"
    folded = simplify_expr(x * 12544 - x // 56 * 12544 - (x * 55 + 55) // 56 * 12544 + 224)
    assert isinstance(folded, Const) and folded.value == 224


@settings(max_examples=200, deadline=None)
@given(a=st.integers(1, 40), c=st.integers(0, 40), d=st.integers(2, 40), x=st.integers(-500, 500))
def test_one_term_quotients_keep_their_value(a, c, d, x):
    """Whatever form the quotient takes, its value at every integer (negative ones too) is kept."""
    v = lw.var("x")
    e = simplify_expr((v * a + c) // d)
    assert _value(e, v, x) == (a * x + c) // d


def test_a_quotient_of_a_negated_sum_cancels_against_the_plain_one():
    """isl writes the origin of a fused (image, row) loop's tile as ``(-f - 1) // 28``: it is
    ``-(f // 28) - 1``, so ``f // 28 + (-f - 1) // 28`` is the constant -1 (the Winograd tile of a
    batch carried two divisions per access, and ran 3x slower at batch 4)."""
    f = lw.var("f")
    folded = simplify_expr(f // 28 * -200704 + (f * -1 - 1) // 28 * -200704 + 7)
    assert isinstance(folded, Const) and folded.value == 200704 + 7


@settings(max_examples=200, deadline=None)
@given(a=st.integers(1, 40), b=st.integers(0, 40), c=st.integers(-60, 60), d=st.integers(2, 40),
       x=st.integers(-500, 500), y=st.integers(-500, 500))
def test_quotients_of_negated_sums_keep_their_value(a, b, c, d, x, y):
    """``(c - a*x - b*y) // d`` at every integer x, y (b = 0: one term)."""
    vx, vy = lw.var("x"), lw.var("y")
    e = simplify_expr((vx * -a - vy * b + c) // d) if b else simplify_expr((vx * -a + c) // d)
    out = simplify_expr(substitute(e, {vx: lw.const(x), vy: lw.const(y)}))
    assert isinstance(out, Const) and out.value == (c - a * x - b * y) // d


def test_a_minimum_written_in_either_order_cancels_against_itself():
    """A shifted tile's start, ``min(t * 7, V // 2)``, as the index's and as the region's origin
    with its operands the other way round: the index relative to the origin is the constant part."""
    v, t, x = Var("V"), Var("t"), Var("x")
    a = binary("min", binary("mul", t, const(7)), binary("floordiv", v, const(2)))
    b = binary("min", binary("floordiv", v, const(2)), binary("mul", t, const(7)))
    assert str(simplify_expr(binary("sub", binary("add", a, x), b))) == "x"
    assert str(simplify_expr(binary("sub", binary("max", v, t), binary("max", t, v)))) == "0"
    assert "min" in str(simplify_expr(binary("sub", a, binary("max", v, t))))
