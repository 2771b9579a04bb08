"""A task's key is the computation's, not its spelling: tensor and axis names do not change it,
and a record tuned under one spelling applies to another (its trace translated to the new names).

Candidates are timed by ``StepCounter`` (a measurer whose time is a function of the trace), so the
tuning that writes the log takes no real measurement.
"""
from __future__ import annotations

import json

import numpy as np
import pytest

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.autoschedule import records
from loopweave.autoschedule.measure import MeasureResult
from loopweave.autoschedule.task import Task


def matmul(a="A", b="B", c="C", k_name="k", i_name="i", n=32, dtype="float32", combine="mul", reducer=lw.sum):
    A = lw.placeholder((n, n), name=a, dtype=dtype)
    B = lw.placeholder((n, n), name=b, dtype=dtype)
    k = lw.reduce_axis((0, n), name=k_name)

    def body(i, j):
        x, y = A[i, k], B[k, j]
        return reducer(x * y if combine == "mul" else x + y, axis=k)
    # the spatial axes take the names of the lambda's parameters
    fn = eval(f"lambda {i_name}, j: body({i_name}, j)", {"body": body})
    return [A, B, lw.compute((n, n), fn, name=c)]


class StepCounter:
    """Times that favour schedules with a register accumulator and many steps (a deterministic order)."""

    def run(self, jobs):
        out = []
        for job in jobs:
            steps = json.loads(job["trace_json"])["steps"]
            fast = any(s["primitive"] == "cache_write" for s in steps)
            out.append(MeasureResult((1e-4 if fast else 1e-3) / (1 + len(steps)), None))
        return out

    def close(self):
        pass


def test_two_spellings_of_one_matmul_share_a_key():
    one = Task(matmul(), "llvm")
    other = Task(matmul("X", "Y", "Z", k_name="r", i_name="row"), "llvm")
    assert one.key == other.key
    assert one.names != other.names and one.spelling_key != other.spelling_key   # a worker tells them apart
    assert one.legacy_key != other.legacy_key          # the old scheme hashed the names


@pytest.mark.parametrize("change", [dict(n=48), dict(dtype="float64"), dict(combine="add"), dict(reducer=lw.max)])
def test_different_computations_still_differ(change):
    assert Task(matmul(), "llvm").key != Task(matmul(**change), "llvm").key


def test_argument_order_is_part_of_the_key():
    A, B, C = matmul()
    assert Task([A, B, C], "llvm").key != Task([B, A, C], "llvm").key


def test_a_record_tuned_under_one_spelling_applies_to_another(tmp_path):
    log = str(tmp_path / "mm.jsonl")
    res = auto.tune(matmul(), trials=8, log=log, progress=False, measure_untuned=False, measurer=StepCounter())
    assert "cache_write" in res.best_record["trace"]
    assert all(r["names"] == Task(matmul(), "llvm").names for r in records.read(log))
    other = matmul("X", "Y", "Z", k_name="r", i_name="row")
    s = auto.apply_best(log, other)
    assert s is not None
    # the same steps, said in the other spelling's names
    mine, theirs = json.loads(res.best_record["trace"])["steps"], json.loads(s.trace.to_json())["steps"]
    assert [st["primitive"] for st in mine] == [st["primitive"] for st in theirs]
    assert {st["stage"].split(".")[0] for st in theirs} <= {"X", "Y", "Z"}
    assert any(st["stage"] == "Z.local" for st in theirs)        # cache_write's stage, renamed
    a = np.random.default_rng(1).standard_normal((32, 32)).astype("float32")
    b = np.random.default_rng(2).standard_normal((32, 32)).astype("float32")
    out = np.empty((32, 32), "float32")
    lw.build(s, other)(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)
    assert auto.apply_best(log, matmul(n=48)) is None


def test_the_tuner_resumes_only_from_its_own_spelling(tmp_path):
    """Decisions name stages and axes: another spelling's records are not measured-before for it."""
    log = str(tmp_path / "mm.jsonl")
    auto.tune(matmul(), trials=4, log=log, progress=False, measure_untuned=False, measurer=StepCounter())
    again = auto.tune(matmul(), trials=4, log=log, progress=False, measure_untuned=False, measurer=StepCounter())
    assert all(h["resumed"] for h in again.history)
    other = auto.tune(matmul("X", "Y", "Z", k_name="r"), trials=4, log=log, progress=False,
                      measure_untuned=False, measurer=StepCounter())
    assert not any(h["resumed"] for h in other.history)


def test_a_record_under_the_old_key_scheme_is_checked_and_applies(tmp_path):
    """A log written before keys ignored names: its records carry the legacy key and no names."""
    args = matmul()
    task = Task(args, "llvm")
    s = lw.create_schedule(args[-1])
    C = args[-1]
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 4, 8)
    s[C].vectorize(ji)
    s[C].parallel(io)
    r = records.make_record(task.legacy_key, task.target, {"nr": 8}, s.trace.to_json(), 1e-4, None, 1)
    assert "names" not in r
    log = tmp_path / "old.jsonl"
    records.append(str(log), [r])
    got = auto.apply_best(str(log), matmul())
    assert got is not None and got.trace.to_json() == s.trace.to_json()
    resumed = auto.tune(matmul(), trials=1, log=str(log), progress=False, measure_untuned=False,
                        measurer=StepCounter())
    assert [h["resumed"] for h in resumed.history] == [True]


def test_bound_variable_names_and_tuple_reductions_do_not_change_the_key():
    from loopweave.dsl.expr import Let, Var

    def doubled(a, var_name):
        A = lw.placeholder((16, 16), name=a)

        def f(i, j):
            v = Var(var_name, "float32")
            return Let(v, A[i, j] * 2.0, v + v)
        return [A, lw.compute((16, 16), f, name=a + "2")]
    assert Task(doubled("A", "t"), "llvm").key == Task(doubled("Q", "u"), "llvm").key

    def argmax(a, k_name):
        A = lw.placeholder((16, 32), name=a)
        k = lw.reduce_axis((0, 32), name=k_name)
        idx, val = lw.compute((16,), lambda i: lw.argmax((k, A[i, k]), axis=k), name=a + "max")
        return [A, idx, val]
    one, other = Task(argmax("A", "k"), "llvm"), Task(argmax("B", "r"), "llvm")
    assert one.key == other.key and one.names != other.names
