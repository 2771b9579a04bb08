"""lowering/schedule_to_loops.py: the accumulator of a reduction computed inside a shifted tile."""
import numpy as np

import loopweave as lw


def test_an_accumulator_inside_a_shifted_tile_is_indexed_by_constants():
    """A reduction computed at the outer loop of a tile whose last one is shifted inwards
    (``min(x.outer * 6, 22) + x.inner``): isl's minimum of its accumulator's region was a select the
    simplifier could not match against the index, so the accumulator took run-time indices and LLVM
    kept a register block of them in memory (AVX2's NCHW conv 2.1x slower).  The region starts where
    the index does, the accumulator's indices are constants, and the result matches numpy."""
    A = lw.placeholder((28, 64), name="A")
    k = lw.reduce_axis((0, 64), name="k")
    C = lw.compute((28,), lambda x: lw.sum(A[x, k], axis=k), name="C")
    D = lw.compute((28,), lambda x: C[x] + 1.0, name="D")
    s = lw.create_schedule(D)
    xo, _ = s[D].split(D.op.axis[0], factor=6, tail="shift")
    s[C].compute_at(s[D], xo)
    s[C].unroll(C.op.axis[0])
    text = str(lw.lower(s, [A, D]))
    assert "select(" not in text, text
    assert "C.acc[0] = C.acc[0] + A[min(x.outer * 6, 22) + 5, k]" in text, text
    a = np.random.default_rng(0).standard_normal((28, 64)).astype("float32")
    d = np.empty(28, "float32")
    lw.build(s, [A, D])(a, d)
    np.testing.assert_allclose(d, a.sum(axis=1) + 1.0, rtol=1e-5, atol=1e-5)
