"""A candidate that computes a wrong result is never a record's best, whatever path brings it.

``PoisonedMachine`` measures in this process through the tuner's own ``measure_one``, with the
build of chosen schedules (those with a ``cache_write``) returning a kernel whose outputs are
off by one, and replaces every correct candidate's time by a formula that makes those poisoned
schedules by far the fastest: were any path to skip the comparison with the untuned build, a
wrong schedule would become the best.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.autoschedule import records
from loopweave.autoschedule.measure import MeasureResult, _TASKS, _output_positions, measure_one
from loopweave.autoschedule.search import TaskTuner
from loopweave.autoschedule.task import Task
from loopweave.dsl.trace import Trace


def matmul(n, name="C"):
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    return [A, B, lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name=name)]


def has_cache_write(trace_json: str) -> bool:
    return any(step["primitive"] == "cache_write" for step in json.loads(trace_json)["steps"])


def formula_seconds(trace_json: str) -> float:
    """A register-tile accumulator (``cache_write``) 100x faster than anything else."""
    return 1e-5 if has_cache_write(trace_json) else 1e-3


class OffByOne:
    """A built kernel whose outputs come out one too large."""

    def __init__(self, kernel, args):
        self.kernel, self.positions = kernel, _output_positions(args)

    def __call__(self, *arrays):
        self.kernel(*arrays)
        for i in self.positions:
            arrays[i][...] += 1

    def time(self, *arrays, **kw):
        return self.kernel.time(*arrays, **kw)


class PoisonedMachine:
    """A measurer: ``measure_one`` in this process, a poisoned schedule built wrong (see the module
    docstring), times from ``formula_seconds``; ``poisons(trace_json, args)`` says which to poison."""

    def __init__(self, monkeypatch, poisons):
        import loopweave.backends.build as build_module
        real_build = build_module.build

        def build(s, args, *a, **kw):
            kernel = real_build(s, args, *a, **kw)
            return OffByOne(kernel, args) if poisons(s.trace.to_json(), args) else kernel
        monkeypatch.setattr(build_module, "build", build)
        self.errors = []

    def run(self, jobs):
        out = []
        for job in jobs:
            r = measure_one(**job)
            if r["error"] is None:
                r["seconds"] = formula_seconds(job["trace_json"])
            else:
                self.errors.append(r["error"])
            out.append(MeasureResult.of(r))
        return out

    def close(self):
        pass


@pytest.fixture(autouse=True)
def fresh_worker_state():
    """``measure_one`` keeps each task's reference output per process: start and end clean."""
    _TASKS.clear()
    yield
    _TASKS.clear()


def _correct_records(res):
    return [r for r in res.records if r["seconds"] is not None]


def test_a_wrong_candidate_found_by_the_search_is_dropped_with_its_reason(tmp_path, monkeypatch):
    machine = PoisonedMachine(monkeypatch, lambda trace, args: has_cache_write(trace))
    log = tmp_path / "t.jsonl"
    res = auto.tune(matmul(32), trials=16, log=str(log), measurer=machine, progress=False, seed=1)
    wrong = [r for r in res.records if r["error"] and r["error"].startswith("wrong answer")]
    assert wrong and all(has_cache_write(r["trace"]) for r in wrong)
    assert "the untuned build gives" in wrong[0]["error"]            # says where it differs
    assert not has_cache_write(res.best_record["trace"])
    assert all(not has_cache_write(r["trace"]) for r in _correct_records(res))
    best = records.best(str(log), res.task.target, res.task.key)
    assert best["trace"] == res.best_record["trace"]                  # the log agrees


def test_a_wrong_pick_is_dropped_by_the_side_by_side_verification(tmp_path, monkeypatch):
    """A record that looks fastest but was never compared with the untuned build (a log from
    before every candidate was) reaches the side-by-side verification: it is checked there."""
    args = matmul(32)
    task = Task(args, "llvm")
    machine = PoisonedMachine(monkeypatch, lambda trace, a: has_cache_write(trace))
    tuner = TaskTuner(task, machine)
    choice = tuner.space.sample(__import__("random").Random(0))
    choice["cache_write"] = True
    pick = tuner.space.apply(choice).trace.to_json()
    assert has_cache_write(pick)
    log = tmp_path / "t.jsonl"
    records.append(str(log), [records.make_record(task.key, task.target, choice, pick, 1e-7, None, 1)])
    s = lw.create_schedule(args[-1])
    s[args[-1]].parallel(args[-1].op.axis[0])
    default = s.trace.to_json()
    tuner = TaskTuner(task, machine, log=str(log))
    assert tuner.best["trace"] == pick                               # it looks like the best
    tuner.measure_given(default, "default schedule")
    tuner.verify_against(default, pairs=3)
    assert tuner.best["trace"] == default
    verified = [r for r in tuner.measured.values() if r["trace"] == pick]
    assert verified[0]["verified"] and verified[0]["error"].startswith("failed when measured beside the default: "
                                                                       "wrong answer")
    assert records.best(str(log), task.target, task.key)["trace"] == default


def test_a_wrong_choice_shared_by_another_task_of_the_family_is_dropped(tmp_path, monkeypatch):
    """The 32x32 matmul's best (a cache_write schedule, correct there) is offered to the 48x48
    one, where that schedule is built wrong: the adapted choice is measured and dropped there."""
    def poisons(trace, args):
        return has_cache_write(trace) and int(args[-1].shape[0].value) == 48
    machine = PoisonedMachine(monkeypatch, poisons)
    small, large = auto.tune_tasks([(matmul(32), 1), (matmul(48), 1)], trials=32, measurer=machine,
                                   log=str(tmp_path / "t.jsonl"), progress=False)
    assert has_cache_write(small.best_record["trace"])
    seeded = [h for h in large.history if h.get("seeded")]
    assert seeded and all(h["error"].startswith("wrong answer") for h in seeded)
    assert not has_cache_write(large.best_record["trace"])
    assert all(not has_cache_write(r["trace"]) for r in _correct_records(large))


def test_the_untuned_schedule_itself_is_not_compared_with_itself(monkeypatch):
    """Measuring the untuned build (``check=False``) builds it once, not a second time as the reference."""
    import loopweave.backends.build as build_module
    builds = []
    real_build = build_module.build
    monkeypatch.setattr(build_module, "build", lambda *a, **kw: builds.append(1) or real_build(*a, **kw))
    task = Task(matmul(16), "llvm")
    r = measure_one(task.key, task.to_bytes(), Trace().to_json(), repeat=1, min_seconds=0.0, check=False)
    assert r["error"] is None and len(builds) == 1
    r = measure_one(task.key, task.to_bytes(), Trace().to_json(), repeat=1, min_seconds=0.0)
    assert r["error"] is None and len(builds) == 3                  # the candidate and the reference


def test_outputs_that_are_nan_where_the_untuned_build_has_nan_agree():
    """A log of random normal inputs is NaN at the negative ones, in every correct schedule."""
    X = lw.placeholder((64,), name="X")
    Y = lw.compute((64,), lambda i: lw.log(X[i]), name="Y")
    task = Task([X, Y], "llvm")
    s = lw.create_schedule(Y)
    _, vi = s[Y].split(Y.op.axis[0], factor=8)
    s[Y].vectorize(vi)
    r = measure_one(task.key, task.to_bytes(), s.trace.to_json(), repeat=1, min_seconds=0.0)
    assert r["error"] is None, r
