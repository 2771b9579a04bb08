"""The sympy adapter (``network/symbolic.py``): sizes, proofs, exact evaluation, printing, and the
conversion to and from DSL expressions (checked by building a kernel whose extent is converted)."""
import numpy as np
import pytest
import sympy

import loopweave as lw
from loopweave.errors import InternalError
from loopweave.nn_ops.network import symbolic as S


H, N, SEQ = S.symbol("H"), S.symbol("N"), S.symbol("seq")


def conv_out(size, k, s, p):
    return S.floordiv(size + 2 * p - k, s) + 1


def test_symbols_are_positive_integers_and_shared_by_name():
    assert S.symbol("H") is H and H.is_integer and H.is_positive
    assert S.dim("H") is H and S.dim(3) == 3 and S.dim(H * 2) == 2 * H
    with pytest.raises(InternalError):
        S.dim(2.5)


def test_proofs_say_true_false_or_cannot_tell():
    assert S.equal(N * SEQ * 256, N * SEQ * 4 * 64) is True
    assert S.equal(SEQ, SEQ + 1) is False
    assert S.equal(2 * SEQ, SEQ) is False           # seq >= 1
    assert S.equal(SEQ, N) is None
    # the two windows of ResNet's strided block (3x3 pad 1 vs 1x1 pad 0, stride 2) agree
    assert S.equal(conv_out(H, 3, 2, 1), conv_out(H, 1, 2, 0)) is True
    assert S.equal(conv_out(H, 3, 2, 1), conv_out(H, 3, 1, 1)) is None
    assert S.prove(sympy.Or(sympy.Eq(SEQ, N), sympy.Eq(SEQ, 1))) is None
    assert S.prove(sympy.Eq(sympy.Mod(256 * N * SEQ, 64), 0)) is True
    assert S.prove(sympy.Eq(sympy.Mod(6 * N, 4), 0)) is None


def test_sizes_whose_floors_differ_by_whole_numbers_are_equal():
    # a pool's output size as its kernel computes it, and as shape inference writes it
    x = S.floordiv(S.floordiv(H - 1, 2), 2)
    half = sympy.Rational(1, 2)
    assert S.equal(sympy.floor(x / 2 + half), sympy.floor(x / 2 - half) + 1) is True
    assert S.equal(sympy.floor(H / 3), sympy.floor((H + 3) / 3) - 1) is True
    assert S.equal(sympy.floor(x / 2 + half), sympy.floor(x / 2 - half) + 2) is not True
    for h in range(1, 40):
        v = S.evaluate(x, {"H": h})
        assert (v + 1) // 2 == (v - 1) // 2 + 1      # the identity the rewrite relies on, at each size
    # a ceil-mode pool's size from shape inference (a ceiling) and from its kernel (a floor)
    assert S.equal(S.ceildiv(H - 3, 2) + 1, S.floordiv(H - 2, 2) + 1) is True
    assert S.equal(S.ceildiv(H, 3), S.floordiv(H + 1, 3)) is not True


def test_evaluate_is_exact_and_matches_python():
    e = conv_out(conv_out(H, 7, 2, 3), 3, 2, 1)          # ResNet's stem + max pool
    for h in range(1, 300):
        assert S.evaluate(e, {"H": h}) == ((h + 6 - 7) // 2 + 1 + 2 - 3) // 2 + 1
    assert S.evaluate(S.ceildiv(H, 3), {"H": 7}) == 3
    assert S.evaluate(sympy.Max(H, N) * 2, {"H": 3, "N": 5}) == 10
    assert S.evaluate(sympy.Or(sympy.Eq(H, N), sympy.Eq(H, 1)), {"H": 1, "N": 5}) is True
    assert S.evaluate(sympy.Eq(H, N), {"H": 2, "N": 5}) is False
    with pytest.raises(InternalError, match="no value"):
        S.evaluate(H + 1, {"N": 1})


def test_show_reads_like_python():
    assert S.show(conv_out(H, 7, 2, 3)) == "(H - 1)//2 + 1"
    assert S.show(N * SEQ) == "N*seq"
    assert S.show(5) == "5"
    assert S.show(sympy.Max(H, N)) in ("max(H, N)", "max(N, H)")


@pytest.mark.parametrize("size", [
    N * SEQ, conv_out(H, 7, 2, 3), conv_out(conv_out(H, 7, 2, 3), 3, 2, 1), S.ceildiv(H + 1, 4),
    sympy.Mod(H, 16), sympy.Max(H, N), sympy.Min(H, 7) + N ** 2, 3 * H - 2])
def test_dsl_round_trip(size):
    variables = S.dsl_variables(["H", "N", "seq"])
    expr = S.to_dsl(size, variables)
    back = S.from_dsl(expr)
    for h, n in ((1, 1), (2, 3), (7, 4), (224, 1), (17, 9)):
        binding = {"H": h, "N": n, "seq": 5}
        assert S.evaluate(back, binding) == S.evaluate(size, binding)


def test_from_dsl_refuses_what_is_not_a_size():
    with pytest.raises(InternalError, match="cannot convert"):
        S.from_dsl(lw.exp(lw.var("x", "float32")))


def test_a_converted_extent_builds_and_runs():
    """The conversion's DSL side is real: a kernel whose output extent is a pooled size of H."""
    variables = S.dsl_variables(["H"])
    out = conv_out(H, 3, 2, 1)
    n = variables["H"]
    A = lw.placeholder((n,), name="A", dtype="float32")
    B = lw.compute((S.to_dsl(out, variables),), lambda i: A[i * 2], name="B")
    f = lw.build(lw.create_schedule(B), [A, B])
    for h in (1, 2, 7, 8, 33):
        a = np.arange(h, dtype="float32")
        b = np.empty(S.evaluate(out, {"H": h}), "float32")
        f(a, b)
        np.testing.assert_array_equal(b, a[::2])


def test_dsl_variables_mangle_names_that_are_not_identifiers():
    v = S.dsl_variables(["input.0", "seq"])
    assert v["input.0"].name == "input_0" and v["seq"].name == "seq"
    assert S.evaluate(S.from_dsl(S.to_dsl(S.symbol("input.0") * 2, v)), {"input_0": 4}) == 8


def test_at_least_is_a_cheap_sufficient_test():
    assert S.at_least(256 * N * SEQ, 128 * N)                 # seq >= 1
    assert S.at_least(sympy.Max(4 * N * SEQ, 16 * N), 8 * N)  # one argument of the Max covers it
    assert S.at_least(N * SEQ, N + SEQ - 1)                   # (N - 1)(seq - 1) >= 0
    assert not S.at_least(N, SEQ)                             # not shown (and not true for every binding)
    assert not S.at_least(128 * N, 256 * N * SEQ)
    assert not S.at_least(conv_out(H, 3, 2, 1), 1)            # floors are never shown
    assert S.at_least(7, 3) and not S.at_least(3, 7)


def test_lower_bounds_and_inequalities_without_simplify():
    assert S.lower_bound(conv_out(H, 3, 2, 1)) == 1               # (H - 1)//2 + 1 with H >= 1
    assert S.lower_bound(conv_out(H, 3, 2, 0)) == 0                # (H - 3)//2 + 1: 0 at H = 1
    assert S.lower_bound(2 * N * SEQ - 1) == 1 and S.lower_bound(N - SEQ) is None
    assert S.lower_bound(sympy.Max(H - 5, 3)) == 3 and S.lower_bound(sympy.Min(H, 2)) == 1
    assert S.prove(sympy.Ge(conv_out(conv_out(H, 7, 2, 3), 3, 2, 1), 1)) is True
    assert S.prove(sympy.Gt(N * SEQ, 0)) is True
    assert S.prove(sympy.Lt(N + 1, 1)) is False
    assert S.prove(sympy.Ge(H, 3)) is None
