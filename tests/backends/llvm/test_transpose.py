"""Transposed tiles (``backends/llvm/transpose.py``): a loop marked ``"transpose"`` whose iterations
read the columns of a tile stored in rows is emitted as row loads and in-register shuffles, with the
same result as the loop as written; a loop of any other shape under the pragma is emitted as usual."""
import numpy as np
import pytest

import loopweave as lw


def _transpose_kernel(rows: int, cols: int, lanes: int, epilogue: bool = False, stride_pad: int = 0):
    """B[c, r] = A[r, c] (times 2 plus a per-column bias with ``epilogue``): tiles of ``lanes`` rows
    (vectorized) x ``lanes`` columns (the transposed loop).  A's rows are ``cols + stride_pad`` long."""
    A = lw.placeholder((rows, cols + stride_pad), name="A")
    bias = lw.placeholder((cols,), name="bias")
    if epilogue:
        B = lw.compute((cols, rows), lambda c, r: A[r, c] * 2.0 + bias[c], name="B")
    else:
        B = lw.compute((cols, rows), lambda c, r: A[r, c], name="B")
    s = lw.create_schedule(B)
    c, r = B.op.axis
    co, ci = s[B].split(c, factor=lanes)
    ro, ri = s[B].split(r, factor=lanes)
    s[B].reorder(co, ro, ci, ri)
    s[B].vectorize(ri)
    s[B].pragma(ci, "transpose")
    return lw.build(s, [A, bias, B]), A, B


@pytest.mark.parametrize("lanes", [4, 8, 16])
@pytest.mark.parametrize("epilogue", [False, True])
def test_transposed_tile_matches_numpy_without_gathers(lanes, epilogue):
    rows, cols = 3 * lanes, 2 * lanes
    f, _, _ = _transpose_kernel(rows, cols, lanes, epilogue, stride_pad=3)
    rng = np.random.default_rng(lanes)
    a = rng.standard_normal((rows, cols + 3)).astype("float32")
    bias = rng.standard_normal(cols).astype("float32")
    out = np.empty((cols, rows), "float32")
    f(a, bias, out)
    expected = a[:, :cols].T * 2 + bias[:, None] if epilogue else a[:, :cols].T
    np.testing.assert_allclose(out, expected, rtol=1e-6)
    ll = f.get_source("ll")
    assert "masked.gather" not in ll and "shufflevector" in ll


def test_rows_not_a_multiple_of_the_tile():
    """20 rows in tiles of 16: loop_partition gives the last tile a loop of 4 rows, transposed in
    4 x 4 blocks; no gathers anywhere."""
    f, _, _ = _transpose_kernel(20, 16, 16)
    a = np.random.default_rng(0).standard_normal((20, 16)).astype("float32")
    out = np.empty((16, 20), "float32")
    f(a, np.zeros(16, "float32"), out)
    np.testing.assert_array_equal(out, a.T)
    assert "masked.gather" not in f.get_source("ll")


def test_the_pragma_on_a_loop_of_another_shape_changes_nothing():
    """A contiguous copy under the pragma (no strided read) is emitted as usual."""
    A = lw.placeholder((64,), name="A")
    B = lw.compute((64,), lambda i: A[i] + 1.0, name="B")
    s = lw.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=16)
    s[B].vectorize(i)
    s[B].pragma(o, "transpose")
    a = np.arange(64, dtype="float32")
    b = np.empty(64, "float32")
    lw.build(s, [A, B])(a, b)
    np.testing.assert_array_equal(b, a + 1)
