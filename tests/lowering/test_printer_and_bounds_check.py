"""The loop-IR printer (lowering/printer.py) and the static bounds check (bound_inference)."""
import re

import numpy as np
import pytest

import loopweave as lw


def test_lowered_text_reads_like_python_loops():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    B = lw.compute((n, n), lambda i, j: A[i, j] + 1.0, name="B")
    s = lw.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    text = str(lw.lower(s, [A, B]))
    lines = text.splitlines()
    assert lines[0] == "def main(A: float32[n, n], B: float32[n, n]):"
    assert re.match(r"^    for i in range\(n\):.*# parallel", lines[1])
    assert lines[2] == "        for j in range(n):"
    assert lines[3] == "            B[i, j] = A[i, j] + 1.0"


def test_lowered_text_compiles_as_python_syntax():
    A = lw.placeholder((16,), name="A")
    B = lw.compute((16,), lambda i: lw.if_then_else(i >= 1, A[i - 1], 0.0), name="B")
    s = lw.create_schedule(B)
    s[B].split(B.op.axis[0], factor=4)
    text = str(lw.lower(s, [A, B], name="shift"))
    assert text.startswith("def shift(")
    compile(text.replace(".", "_"), "<lowered>", "exec")   # dotted loop names aside, it is Python


def test_primfunc_has_repr_html():
    A = lw.placeholder((8,), name="A")
    B = lw.compute((8,), lambda i: A[i] * 2.0, name="B")
    f = lw.lower(lw.create_schedule(B), [A, B])
    html = f._repr_html_()
    assert isinstance(html, str) and html.lstrip().startswith("<")
    assert "main" in html
    assert repr(f) == str(f)


def test_lower_function_name_must_be_identifier():
    A = lw.placeholder((8,), name="A")
    B = lw.compute((8,), lambda i: A[i] * 2.0, name="B")
    with pytest.raises(lw.LoweringError, match="function name 'my-fn' is not an identifier"):
        lw.lower(lw.create_schedule(B), [A, B], name="my-fn")


# ------------------------------------------------------------------ static bounds check

def test_read_past_the_end_is_a_bounds_error():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i + 1], name="B")
    with pytest.raises(lw.BoundsError) as info:
        lw.lower(lw.create_schedule(B), [A, B])
    msg = str(info.value)
    assert "compute 'B' reads A[i + 1] outside the extent of 'A' (shape [n])" in msg
    # a concrete counter-example: the index that breaks it, and the extent it breaks
    m = re.search(r"at n = (\d+), i = (\d+) it reads index (\d+) on dimension 0 of extent (\d+)", msg)
    assert m, msg
    n_val, i_val, idx, ext = map(int, m.groups())
    assert idx == i_val + 1 and ext == n_val and idx >= ext
    assert "lw.if_then_else(" in msg
    assert isinstance(info.value, IndexError) and isinstance(info.value, lw.LoweringError)


def test_read_before_the_start_is_a_bounds_error():
    A = lw.placeholder((16, 8), name="A")
    B = lw.compute((16, 8), lambda i, j: A[i, j - 1], name="B")
    with pytest.raises(lw.BoundsError, match=r"reads A\[i, j - 1\].*it reads index -1 on dimension 1 of extent 8"):
        lw.lower(lw.create_schedule(B), [A, B])


def test_guarded_read_is_not_a_bounds_error():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: lw.if_then_else(i >= 1, A[i - 1], 0.0), name="B")
    text = str(lw.lower(lw.create_schedule(B), [A, B]))
    assert "select(i >= 1, A[i - 1], 0.0)" in text


def test_guard_in_false_branch_is_understood():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: lw.if_then_else(i < 1, 0.0, A[i - 1]), name="B")
    s = lw.create_schedule(B)
    assert "select(i < 1, 0.0, A[i - 1])" in str(lw.lower(s, [A, B]))   # no BoundsError: the guard covers it
    f = lw.build(s, [A, B])
    a = np.arange(1, 6, dtype="float32")
    b = np.full(5, np.nan, "float32")
    f(a, b)
    np.testing.assert_array_equal(b, [0, 1, 2, 3, 4])


def test_wrong_guard_still_raises():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: lw.if_then_else(i >= 0, A[i - 1], 0.0), name="B")
    with pytest.raises(lw.BoundsError, match=r"A\[i - 1\]"):
        lw.lower(lw.create_schedule(B), [A, B])


def test_reduction_reads_are_checked():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    k = lw.reduce_axis((0, n + 1), name="k")
    B = lw.compute((1,), lambda i: lw.sum(A[k], axis=k), name="B")
    with pytest.raises(lw.BoundsError, match=r"compute 'B' reads A\[k\]"):
        lw.lower(lw.create_schedule(B), [A, B])


def test_reads_of_intermediate_tensors_are_checked():
    A = lw.placeholder((8,), name="A")
    B = lw.compute((8,), lambda i: A[i] * 2.0, name="B")
    C = lw.compute((8,), lambda i: B[i + 1], name="C")
    with pytest.raises(lw.BoundsError, match=r"compute 'C' reads B\[i \+ 1\] outside the extent of 'B'"):
        lw.lower(lw.create_schedule(C), [A, C])
