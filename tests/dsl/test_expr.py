"""Expressions (loopweave.dsl.expr): dtype rules, folding, structural equality, Vars by identity."""
import pytest

import loopweave as lw
from loopweave.dsl.expr import Binary, Cast, Compare, Const, Select, structural_equal, structural_hash


@pytest.fixture
def tensors():
    n = lw.var("n")
    F = lw.placeholder((n,), name="F", dtype="float32")
    I = lw.placeholder((n,), name="I", dtype="int32")
    return n, F, I


# ------------------------------------------------------------------ dtype promotion

def test_float_expr_plus_int_literal_adopts_float(tensors):
    n, F, I = tensors
    e = F[0] + 1
    assert e.dtype == "float32"
    assert isinstance(e.b, Const) and e.b.dtype == "float32" and e.b.value == 1.0


def test_int_expr_plus_int_literal_keeps_int(tensors):
    n, F, I = tensors
    assert (I[0] + 2).dtype == "int32"
    assert (2 * I[0]).dtype == "int32"


def test_float_expr_plus_int_expr_raises(tensors):
    n, F, I = tensors
    with pytest.raises(lw.DTypeError, match=r"'\+' mixes float32 and int32.*lw\.cast"):
        F[0] + I[0]


def test_int_expr_plus_non_integer_float_literal_raises(tensors):
    n, F, I = tensors
    with pytest.raises(lw.DTypeError, match=r"float literal 1\.5 meets an expression of dtype int32"):
        I[0] + 1.5


def test_explicit_cast_allows_mixing(tensors):
    n, F, I = tensors
    e = lw.cast("float32", I[0]) + F[0]
    assert e.dtype == "float32" and isinstance(e.a, Cast)


def test_int_true_division_raises(tensors):
    n, F, I = tensors
    with pytest.raises(lw.DTypeError, match=r"'/' on integer dtype int32 is ambiguous.*'//'"):
        I[0] / I[1]
    with pytest.raises(lw.DTypeError, match=r"'/' on integer"):
        n / 2


def test_float_true_division_ok(tensors):
    n, F, I = tensors
    assert (F[0] / 2).dtype == "float32"


def test_same_kind_promotes_to_wider():
    a = lw.var("a", "int16")
    b = lw.var("b", "int64")
    assert (a + b).dtype == "int64"
    x = lw.var("x", "float16")
    y = lw.var("y", "float64")
    assert (x * y).dtype == "float64"


def test_bool_arithmetic_raises():
    n = lw.var("n")
    with pytest.raises(lw.DTypeError, match="arithmetic '\\+' on bool"):
        (n < 1) + (n < 2)


def test_logical_ops_need_bool():
    n = lw.var("n")
    with pytest.raises(lw.DTypeError, match="'&' needs a bool operand"):
        (n < 1) & n


def test_float_intrinsic_on_int_raises(tensors):
    n, F, I = tensors
    with pytest.raises(lw.DTypeError, match="lw.exp needs a float argument, got dtype int32"):
        lw.exp(I[0])


def test_index_arithmetic_is_int64():
    n = lw.var("n")
    assert n.dtype == "int64"
    assert (n * 4 + 1).dtype == "int64"


# ------------------------------------------------------------------ constant folding

def test_constant_folding():
    assert structural_equal(lw.const(2) + lw.const(3), lw.const(5))
    assert structural_equal(lw.const(7) // lw.const(2), lw.const(3))
    assert structural_equal(lw.const(-7) % lw.const(3), lw.const(2))  # Python semantics
    assert structural_equal(lw.const(-7) // lw.const(2), lw.const(-4))
    assert structural_equal(lw.const(2.0) * 1.5, lw.const(3.0))


def test_folding_wraps_like_native_ints():
    e = lw.const(127, "int8") + lw.const(1, "int8")
    assert isinstance(e, Const) and e.value == -128 and e.dtype == "int8"


def test_identities():
    n = lw.var("n")
    assert (n + 0) is n
    assert (0 + n) is n
    assert (n * 1) is n
    assert structural_equal(n * 0, lw.const(0))
    assert structural_equal(n - n, lw.const(0))
    assert structural_equal(n % 1, lw.const(0))


def test_constant_compare_and_select_fold():
    assert lw.const(2) < 3
    assert structural_equal(lw.select(lw.const(1) < 2, lw.const(1.0), lw.const(2.0)), lw.const(1.0))


def test_cast_of_constant_folds_and_truncates():
    assert structural_equal(lw.cast("int32", lw.const(2.7)), lw.const(2, "int32"))
    assert structural_equal(lw.cast("int32", lw.const(-2.7)), lw.const(-2, "int32"))
    assert structural_equal(lw.cast("uint8", lw.const(300)), lw.const(44, "uint8"))


def test_astype_is_cast(tensors):
    n, F, I = tensors
    e = I[0].astype("float32")
    assert isinstance(e, Cast) and e.dtype == "float32" and structural_equal(e, lw.cast("float32", I[0]))
    x = F[0]
    assert x.astype("float32") is x                                                  # same dtype: no Cast node
    k = lw.reduce_axis((0, n), name="k")
    assert structural_equal(k.astype("int32"), lw.cast("int32", k.var))               # IterVars too, as in TVM
    assert structural_equal(lw.const(2.7).astype("int32"), lw.const(2, "int32"))      # folds like lw.cast


def test_cast_in_topi_order_is_a_dtype_error(tensors):
    n, F, I = tensors
    with pytest.raises(lw.DTypeError, match=r"lw.cast\('int32', F\[0\]\) or F\[0\].astype\('int32'\)"):
        lw.cast(F[0], "int32")


def test_division_by_constant_zero_raises():
    n = lw.var("n")
    with pytest.raises(lw.ExprError, match="division by the constant zero"):
        n // 0


# ------------------------------------------------------------------ structural equality / hashing

def test_structurally_equal_exprs_are_equal_and_hash_alike():
    n = lw.var("n")
    a, b = n * 4 + 1, n * 4 + 1
    assert a is not b
    assert structural_equal(a, b)
    assert hash(a) == hash(b) == structural_hash(a)
    assert not structural_equal(n * 4 + 1, n * 4 + 2)


def test_vars_compare_by_identity():
    n1, n2 = lw.var("n"), lw.var("n")
    assert not structural_equal(n1, n2)
    assert not structural_equal(n1 + 1, n2 + 1)
    assert bool(n1 == n1)
    assert not bool(n1 == n2)
    assert hash(n1) != hash(n2) or n1 is n2


def test_eq_builds_compare_but_answers_structurally():
    n = lw.var("n")
    c = (n + 1) == (n + 1)
    assert isinstance(c, Compare) and c.op == "eq"
    assert bool(c) is True
    assert bool((n + 1) == (n + 2)) is False
    assert bool((n + 1) != (n + 2)) is True


def test_exprs_work_in_dicts_and_containers():
    n, m = lw.var("n"), lw.var("n")
    d = {n + 1: "a", n * 2: "b"}
    assert d[n + 1] == "a"
    assert d[n * 2] == "b"
    assert (m + 1) not in d           # another var of the same name
    assert (n + 1) in [n + 2, n + 1]
    assert {n: 1}.get(m) is None


def test_other_comparisons_have_no_truth_value():
    n = lw.var("n")
    with pytest.raises(lw.ExprError, match="has no truth value.*if_then_else"):
        bool(n < 1)
    with pytest.raises(lw.ExprError, match="no truth value"):
        if n:
            pass


def test_expressions_are_immutable():
    n = lw.var("n")
    e = n + 1
    with pytest.raises(Exception):
        e.a = n


def test_select_needs_matching_branch_dtypes(tensors):
    n, F, I = tensors
    s = lw.if_then_else(n >= 1, F[n - 1], 0.0)
    assert isinstance(s, Select) and s.dtype == "float32"
    with pytest.raises(lw.DTypeError, match="select mixes float32 and int32"):
        lw.select(n < 2, F[0], I[0])


def test_str_reads_like_python():
    n = lw.var("n")
    assert str((n * 4 + 1) // 2) == "(n * 4 + 1) // 2"
    assert str(lw.max(n, 3)) == "max(n, 3)"


def test_var_name_must_be_identifier_and_dtype_known():
    with pytest.raises(lw.ExprError, match="identifier"):
        lw.var("1x")
    with pytest.raises(lw.DTypeError, match="unknown dtype 'foo'"):
        lw.var("x", "foo")


def test_const_dtypes():
    assert lw.const(1).dtype == "int64"
    assert lw.const(1.0).dtype == "float32"
    assert lw.const(True).dtype == "bool"
    with pytest.raises(lw.DTypeError, match="not an integer"):
        lw.const(1.5, "int32")


def test_constant_exprs_work_in_dicts_and_containers():
    # `==` on two constants folds to a bool constant, which must still answer containers
    assert {lw.const(2): "x"}[lw.const(2)] == "x"
    assert lw.const(2) in [lw.const(3), lw.const(2)]
    assert lw.const(4) not in [lw.const(3)]
    with pytest.raises(lw.ExprError, match="no truth value"):
        bool(lw.const(3))
