"""dsl/arith.py: the expression simplifier's folding of quotients isl writes."""
from hypothesis import given, settings, strategies as st

import loopweave as lw
from loopweave.dsl.arith import simplify_expr
from loopweave.dsl.expr import Const
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
