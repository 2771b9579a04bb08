"""pad_tail_tiles (``lowering/passes/pad_tail_tiles.py``): the last tile of a symbolic extent keeps
its register tile (rows padded, columns one masked vector) and every result stays numpy's."""
import functools

import numpy as np
import pytest
from hypothesis import given, settings, strategies as st

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops.matmul import batch_matmul
from loopweave.nn_ops.ops.shape import softmax


@functools.lru_cache(maxsize=None)
def _score():
    """The attention score of a shape-polymorphic encoder: [b, s, 64] x [b, 64, s] (built once)."""
    b, s = lw.var("b"), lw.var("s")
    A = lw.placeholder((b, s, 64), name="A")
    B = lw.placeholder((b, 64, s), name="B")
    C = batch_matmul(A, B)
    return lw.build(nn_ops.schedule(C), [A, B, C])


def test_the_last_tile_is_vector_code_with_masks():
    f = _score()
    lowered = f.get_source("lowered")
    assert "its extent is not a constant" not in lowered, lowered     # each tail column loop: a masked vector
    assert "pad_tails" in lowered
    ll = f.get_source("ll")
    assert "llvm.masked.store" in ll and "llvm.masked.load" in ll


@settings(max_examples=12, deadline=None)
@given(st.integers(1, 3), st.integers(1, 70))
def test_batch_matmul_of_any_size_matches_numpy(batch, seq):
    rng = np.random.default_rng(batch * 100 + seq)
    a = rng.standard_normal((batch, seq, 64)).astype(np.float32)
    b = rng.standard_normal((batch, 64, seq)).astype(np.float32)
    c = np.full((batch, seq, seq), np.nan, np.float32)
    _score()(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("rows, n", [(3, 1), (5, 7), (2, 16), (4, 17), (1, 33), (6, 200)])
def test_softmax_tail_keeps_masked_lanes(rows, n):
    """All-negative rows: a masked-off lane read as 0 would win the maximum; the masked vector's
    lanes past the row must keep the partial maximum's value."""
    r, s = lw.var("r"), lw.var("s")
    X = lw.placeholder((r, s), name="X")
    Y = softmax(X)
    f = lw.build(nn_ops.schedule(Y), [X, Y])
    assert "its extent is not a constant" not in f.get_source("lowered")
    x = -5 - np.abs(np.random.default_rng(n).standard_normal((rows, n))).astype(np.float32) * 3
    y = np.empty_like(x)
    f(x, y)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


def test_softmax_over_rows_of_two_symbolic_sizes_computes_statistics_per_row():
    """[b, s, s]: the rows are not fused across the symbolic ``s`` (a fused index divided by a
    run-time size: every row computed the statistics of all rows, b*s times the work)."""
    b, s = lw.var("b"), lw.var("s")
    X = lw.placeholder((b, s, s), name="X")
    Y = softmax(X)
    f = lw.build(nn_ops.schedule(Y), [X, Y])
    lowered = f.get_source("lowered")
    assert "allocate((b, s" not in lowered, lowered
    x = np.random.default_rng(0).standard_normal((2, 9, 9)).astype(np.float32)
    y = np.empty_like(x)
    f(x, y)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-7)


@pytest.mark.parametrize("marked", [False, True])
def test_an_elementwise_tail_is_one_masked_vector_only_where_marked(marked):
    """Marked with ``pad_tails``, a symbolic tail is one masked vector that writes nothing past the
    end; unmarked, it stays a scalar loop (the pass is asked for, per schedule)."""
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] * 2.0, name="B")
    s = lw.create_schedule(B)
    outer, inner = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(inner)
    if marked:
        s[B].pragma(outer, "pad_tails")
    f = lw.build(s, [A, B])
    assert ("its extent is not a constant" in f.get_source("lowered")) != marked
    for size in (1, 15, 16, 21, 40):
        a = np.arange(size, dtype=np.float32)
        out = np.full(size + 1, -1.0, np.float32)      # one element past the end: must stay untouched
        f(a, out[:size])
        np.testing.assert_array_equal(out[:size], a * 2)
        assert out[size] == -1.0
