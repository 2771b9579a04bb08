"""Output reductions with few points (a full sum, a row sum) may be rfactor-ed into vector partial
results, in parallel parts: correct for every option, and what tuning a full sum picks."""
from __future__ import annotations

import random

import numpy as np

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.autoschedule.space import Space
from loopweave.autoschedule.task import Task
from loopweave.backends.timing import interleaved


def full_sum(n):
    A = lw.placeholder((n,), name="A")
    k = lw.reduce_axis((0, n), name="k")
    return [A, lw.compute((1,), lambda _: lw.sum(A[k], axis=k), name="S")]


def row_sum(rows, cols):
    M = lw.placeholder((rows, cols), name="M")
    k = lw.reduce_axis((0, cols), name="k")
    return [M, lw.compute((rows,), lambda i: lw.sum(M[i, k], axis=k), name="R")]


def column_sum(rows, cols):
    M = lw.placeholder((rows, cols), name="M")
    k = lw.reduce_axis((0, rows), name="k")
    return [M, lw.compute((cols,), lambda j: lw.sum(M[k, j], axis=k), name="Q")]


def factor_decisions(args):
    return {n: c for n, c in Space(Task(args, "llvm")).decisions if n.startswith("rfactor")}


def test_offered_where_the_output_is_small_and_the_reduction_runs_along_rows():
    assert set(factor_decisions(full_sum(1 << 16))) == {"rfactor:S", "rfactor_parts:S"}
    assert set(factor_decisions(row_sum(64, 4096))) == {"rfactor:R", "rfactor_parts:R"}
    assert factor_decisions(row_sum(4096, 64)) == {}         # more rows than each is long: rows in vectors
    assert factor_decisions(column_sum(4096, 64)) == {}      # the reduction is not the innermost index


def test_every_factored_schedule_computes_the_sum():
    """Lengths that neither the vector width nor the parts divide (tails in both splits)."""
    rng = np.random.default_rng(7)
    for args, ref_of in ((full_sum(100_003), lambda x: x.sum(keepdims=True, dtype=np.float64)),
                         (row_sum(37, 2_011), lambda x: x.sum(axis=1, dtype=np.float64))):
        space = Space(Task(args, "llvm"))
        out = args[-1]
        x = rng.standard_normal([int(d.value) for d in args[0].shape]).astype("float32")
        for parts in factor_decisions(args)[f"rfactor_parts:{out.name}"]:
            choice = space.sample(random.Random(parts))
            choice.update({f"rfactor:{out.name}": True, f"rfactor_parts:{out.name}": parts})
            s = space.apply(choice)
            assert f"s.rfactor({out.name}," in str(s.trace)
            got = np.full([int(d.value) for d in out.shape], np.nan, "float32")
            lw.build(s, args)(x, got)
            np.testing.assert_allclose(got, ref_of(x), rtol=1e-4, atol=1e-3, err_msg=f"{out.name} parts={parts}")


def test_tuning_a_full_sum_picks_a_factored_schedule_faster_than_the_untuned_one(tmp_path):
    """A sum of 4M floats runs untuned as one serial scalar chain; tuned in 16 trials it takes a
    factored schedule (vector partials) and runs >= 1.5x faster, timed alternately with the
    untuned build (about 10-20x on an idle machine)."""
    n = 1 << 22
    args = full_sum(n)
    res = auto.tune(args, trials=16, log=str(tmp_path / "sum.jsonl"), progress=False, seed=0)
    assert res.choice["rfactor:S"] is True, res.choice
    tuned = res.build()
    untuned = lw.build(lw.create_schedule(args[-1]), args)
    x = np.random.default_rng(11).standard_normal(n).astype("float32")
    got, base = np.zeros(1, "float32"), np.zeros(1, "float32")
    tuned(x, got)
    np.testing.assert_allclose(got, x.sum(dtype=np.float64), rtol=1e-4, atol=1e-2)
    # the untuned build as "ours": both sides then run as many calls per sample as it needs (a
    # few), not as many as the fast one needs (hundreds of slow calls); its ratio is untuned/tuned
    cmp = interleaved(lambda: untuned(x, base), lambda: tuned(x, got),
                      pairs=9, min_seconds=0.05, pause=0.0)
    speedup = 1.0 / cmp.ratio
    assert speedup >= 1.5, (speedup, cmp, res)
