"""Tuning makes a kernel with a bad default schedule clearly faster, timed for real."""
from __future__ import annotations

import numpy as np

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.backends.timing import interleaved


def test_a_tuned_matmul_runs_at_least_1_5x_the_untuned_build(tmp_path):
    """A 256^3 matmul written as a plain compute runs as the naive triple loop (scalar, a strided
    column of B per output): 16 trials find a schedule that beats it by far more than 1.5x.  The
    two builds are timed alternately and the median of the per-pair ratios is compared, so a
    loaded machine slows both sides alike; the floor is a small part of the gap (about a hundred
    times on an idle machine)."""
    n = 256
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    C = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    args = [A, B, C]
    res = auto.tune(args, trials=16, log=str(tmp_path / "mm.jsonl"), progress=False, seed=0)
    tuned = res.build()
    untuned = lw.build(lw.create_schedule(C), args)
    a, b = np.random.default_rng(5).standard_normal((2, n, n)).astype("float32")
    c_tuned, c_untuned = np.empty((n, n), "float32"), np.empty((n, n), "float32")
    tuned(a, b, c_tuned)
    untuned(a, b, c_untuned)
    np.testing.assert_allclose(c_tuned, a @ b, rtol=1e-3, atol=1e-3)
    # the untuned build as "ours": both sides then run as many calls per sample as it needs (a
    # few), not as many as the fast one needs (hundreds of slow calls); its ratio is untuned/tuned
    cmp = interleaved(lambda: untuned(a, b, c_untuned), lambda: tuned(a, b, c_tuned),
                      pairs=9, min_seconds=0.05, pause=0.0)
    speedup = 1.0 / cmp.ratio
    assert speedup >= 1.5, (speedup, cmp, res)
