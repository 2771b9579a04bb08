"""What the tuner spends of its own CPU per measured candidate: proposals that give one schedule are
lowered once (lowering for the cost model's features is most of that time)."""
from __future__ import annotations

import random

import loopweave as lw
from loopweave.autoschedule import search
from loopweave.autoschedule.cost_model import CostModel
from loopweave.autoschedule.search import TaskTuner
from loopweave.autoschedule.task import Task
from loopweave.lowering.verify import verifying


def matmul(n=64):
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    return [A, B, lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")]


def test_a_repeated_schedule_is_lowered_once(monkeypatch):
    """Fresh samples of a matmul's space repeat schedules (decisions made moot by others): each
    distinct trace is lowered once, and the repeats get the same features."""
    tuner = TaskTuner(Task(matmul(), "llvm"), None, model=CostModel(0, pretrained=False))
    lowered, applied = [], []
    real_lower, real_apply = search.lower, tuner.space.apply

    def counting_lower(s, args):
        lowered.append(s.trace.to_json())
        return real_lower(s, args)

    def recording_apply(choice):
        s = real_apply(choice)
        applied.append(s.trace.to_json())
        return s
    monkeypatch.setattr(search, "lower", counting_lower)
    monkeypatch.setattr(tuner.space, "apply", recording_apply)
    rng = random.Random(3)
    with verifying(False):
        cands = [tuner._candidate(tuner.space.sample(rng)) for _ in range(40)]
    assert len(set(applied)) < len(applied), "no schedule repeated: the test shows nothing"
    assert sorted(lowered) == sorted(set(applied))
    by_trace = {}
    for c in cands:
        if c is not None:
            by_trace.setdefault(c[2], []).append(c[3])
    assert all((f == fs[0]).all() for fs in by_trace.values() for f in fs)


def test_a_schedule_lowering_refuses_is_refused_again_without_lowering(monkeypatch):
    """A refusal is kept with its trace: a repeat of the schedule is dropped (and counted as
    rejected) without lowering it again."""
    tuner = TaskTuner(Task(matmul(), "llvm"), None, model=CostModel(0, pretrained=False))
    lowered, applied = [], []
    real_apply = tuner.space.apply

    def refusing_lower(s, args):
        lowered.append(s.trace.to_json())
        raise lw.LoweringError("refused")

    def recording_apply(choice):
        s = real_apply(choice)
        applied.append(s.trace.to_json())
        return s
    monkeypatch.setattr(search, "lower", refusing_lower)
    monkeypatch.setattr(tuner.space, "apply", recording_apply)
    rng = random.Random(3)
    cands = [tuner._candidate(tuner.space.sample(rng)) for _ in range(40)]
    assert len(set(applied)) < len(applied)
    assert cands == [None] * 40 and tuner.rejected == len(applied)
    assert sorted(lowered) == sorted(set(applied))
