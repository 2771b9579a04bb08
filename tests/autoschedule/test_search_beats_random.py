"""The cost model's ranking makes the search better than random picks.

The candidates are timed by a machine whose times are a known function of the schedule
(``FormulaMachine``, given to ``tune`` as its ``measurer``), so the comparison is exact and does
not depend on this host's load.  A search whose measured times were replaced by noise, or whose
model ranked at random, fails the test.
"""
from __future__ import annotations

import json
import math

import numpy as np
import pytest

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.autoschedule.cost_model import CostModel
from loopweave.autoschedule.measure import MeasureResult
from loopweave.lowering.verify import verifying


def matmul(n=128):
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    return [A, B, lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")]


def formula_seconds(trace_json: str) -> float:
    """A matmul schedule's time on an imaginary machine that likes what real CPUs like: tall row
    tiles and wide vector columns (the ``i`` and ``j`` split factors), an accumulator in registers
    (``cache_write``) with its rows unrolled, parallel outer loops, the rows outermost, a reduction
    split by 16, and no packing copy.  The fastest schedules need every one of these right."""
    steps = json.loads(trace_json)["steps"]
    factors = {s["args"]["parent"]: s["args"]["factor"] for s in steps if s["primitive"] == "split"}
    primitives = {s["primitive"] for s in steps}
    orders = [s["args"]["axes"] for s in steps if s["primitive"] == "reorder"]
    t = 1e-3 * math.sqrt(16 / factors.get("i", 1)) * math.sqrt(64 / factors.get("j", 1))
    t *= 1.0 if "cache_write" in primitives else 2.5
    t *= 1.0 if "unroll" in primitives else 1.6
    t *= 1.0 if "parallel" in primitives else 1.5
    t *= 1.3 if "cache_read" in primitives else 1.0
    t *= 1.5 ** abs(math.log2(factors.get("k", 1) / 16))
    t *= 1.0 if orders and orders[0][0].startswith("i") else 1.4
    return t


class FormulaMachine:
    """A measurer (``tune(measurer=...)``) whose times are ``formula_seconds`` of each trace."""

    def run(self, jobs):
        return [MeasureResult(formula_seconds(job["trace_json"]), None) for job in jobs]

    def close(self):
        pass


def _random_scores(self, X):
    """``CostModel.predict`` replaced by a ranking at random (seeded by the batch, so reproducible)."""
    return np.random.default_rng(len(X) * 7919 + int(abs(float(np.sum(X)))) % 100003).random(len(X))


def _tune(seed: int, trials: int):
    """Tuned with a model that starts untrained: the shipped one learned a real CPU, not the formula's
    imaginary machine, and what is tested is that the model learns from this run's measurements."""
    return auto.tune(matmul(), trials=trials, measurer=FormulaMachine(), seed=seed, progress=False,
                     measure_untuned=False, model=CostModel(seed, pretrained=False))


def _geomean(values) -> float:
    return float(np.exp(np.mean(np.log(values))))


@pytest.fixture
def fast_lowering():
    """This test lowers a few hundred candidates to rank them; the IR checks after every pass
    (tests/conftest.py) would triple its time and are not what it tests."""
    with verifying(False):
        yield


def test_model_guided_rounds_beat_random_picks(fast_lowering, monkeypatch):
    """Three seeds, 32 trials each, once as the tuner ranks and once with the model's ranking
    replaced by random order (``CostModel.predict`` patched), every other part of the search the
    same.  After the first round (random in both: the model needs 8 measurements), the schedules
    the model picks are clearly faster than random ones for every seed, and its best is no worse.

    The random side *is* the tuner with its ranking replaced by random order: were the tuner's own
    ranking random (or its training data noise, so the ranking no better than chance), both runs
    would be the same search and the ratios 1.0, failing the asserts."""
    trials, seeds = 32, (0, 1, 2)
    guided = [_tune(seed, trials) for seed in seeds]
    monkeypatch.setattr(CostModel, "predict", _random_scores)
    unguided = [_tune(seed, trials) for seed in seeds]

    def later_rounds(res):        # the median time of the schedules measured after the first round
        return float(np.median([h["seconds"] for h in res.history[8:]]))
    ratios = [later_rounds(g) / later_rounds(u) for g, u in zip(guided, unguided)]
    assert all(r < 0.9 for r in ratios), ratios
    assert _geomean(ratios) < 0.75, ratios
    assert _geomean([g.best_seconds for g in guided]) <= _geomean([u.best_seconds for u in unguided]), \
        ([g.best_seconds for g in guided], [u.best_seconds for u in unguided])
    # every measured candidate took its time from the formula: the comparison is about the ranking
    assert all(len(res.history) == trials and all(h["error"] is None for h in res.history)
               for res in guided + unguided)


def test_a_measurer_and_an_executor_together_are_refused():
    from concurrent.futures import ProcessPoolExecutor
    with ProcessPoolExecutor(1) as pool:
        with pytest.raises(lw.ArgumentError, match="executor= or measurer="):
            auto.tune(matmul(16), trials=1, measurer=FormulaMachine(), executor=pool, progress=False)
    with pytest.raises(lw.ArgumentError, match=r"run\(jobs\) and close\(\)"):
        auto.tune(matmul(16), trials=1, measurer=object(), progress=False)
