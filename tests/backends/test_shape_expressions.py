"""Shape expressions checked at run time (a saved kernel's parameter shapes, read from a file) take
only integer constants, the sizes' names, + - * // %, negation and min/max; nothing reaches eval."""
import pytest

from loopweave.backends.runtime import _eval_shape_expr
from loopweave.errors import ArgumentError


@pytest.mark.parametrize("text, value", [("n + 2", 10), ("n // 3", 2), ("(n - 1) % 4", 3), ("-n + 20", 12),
                                         ("2 * n * m", 48), ("max(n, m * 4)", 12), ("min(n, 5, m)", 3)])
def test_shape_arithmetic(text, value):
    assert _eval_shape_expr(text, {"n": 8, "m": 3}) == value


@pytest.mark.parametrize("text", ['"7" * n', "'x' * 100000000", "1.5 * n", "True + n", "b'1' * n", "n ** 2",
                                  "n.bit_length()", "__import__('os')", "max(n, key=abs)", "[n][0]",
                                  "n // 0", "n % (m - 3)", "(lambda: 1)()", "n if n else m", "max()"])
def test_anything_else_is_an_argument_error(text):
    with pytest.raises(ArgumentError, match="cannot check the shape expression"):
        _eval_shape_expr(text, {"n": 8, "m": 3})


def test_an_unbound_size_is_a_name_error_for_the_caller_to_name():
    with pytest.raises(NameError):
        _eval_shape_expr("k * 4", {"n": 8})


def test_a_long_text_is_refused_unparsed():
    with pytest.raises(ArgumentError, match="not a short text"):
        _eval_shape_expr("n + " * 10000 + "1", {"n": 1})
