"""Records written by another loopweave version are replayed, built and checked against the untuned
build before use, never silently dropped: one still valid is used, one whose trace no longer
applies or that now computes differently is skipped, with one warning naming how many and why.

"Computes differently" stands for a compiler whose primitives changed meaning between versions:
the build of schedules that unroll is made to return a kernel whose outputs are off by one
(``off_by_one_when``), so only the check against the untuned build can tell.
"""
from __future__ import annotations

import json
import warnings

import numpy as np
import pytest

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.autoschedule import records
from loopweave.autoschedule.measure import _output_positions
from loopweave.autoschedule.task import Task
from loopweave.dsl.trace import TRACE_VERSION

OLD = "0.0.1-old"


def matmul(n=32):
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    return [A, B, lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")]


def trace_of(*steps) -> str:
    return json.dumps({"version": TRACE_VERSION, "steps": [
        {"primitive": p, "stage": st, "args": a} for p, st, a in steps]})


VALID = trace_of(("split", "C", {"parent": "j", "factor": 8, "outputs": ["j.outer", "j.inner"]}),
                 ("vectorize", "C", {"axis": "j.inner"}), ("parallel", "C", {"axis": "i"}))
GONE = trace_of(("split", "C", {"parent": "q", "factor": 8, "outputs": ["q.outer", "q.inner"]}))
UNROLLED = trace_of(("split", "C", {"parent": "j", "factor": 4, "outputs": ["j.outer", "j.inner"]}),
                    ("unroll", "C", {"axis": "j.inner"}))


def old_record(task, trace, seconds, version=OLD):
    r = records.make_record(task.key, task.target, {}, trace, seconds, None, 1, names=task.names)
    r["version"] = version
    return r


@pytest.fixture(autouse=True)
def fresh_verdicts(monkeypatch):
    """Verdicts are kept for the process (the compiler does not change within one); these tests
    change the build under them, so each starts without."""
    from loopweave.autoschedule import replay
    monkeypatch.setattr(replay, "_VERDICTS", {})


@pytest.fixture
def off_by_one_when(monkeypatch):
    """Make the build of schedules whose trace satisfies ``when`` compute outputs one too large."""
    import loopweave.backends.build as build_module
    real = build_module.build

    def install(when):
        def build(s, args, *a, **kw):
            kernel = real(s, args, *a, **kw)
            if not when(s.trace.to_json()):
                return kernel
            positions = _output_positions(args)

            def wrong(*arrays):
                kernel(*arrays)
                for i in positions:
                    arrays[i][...] += 1
            return wrong
        monkeypatch.setattr(build_module, "build", build)
    return install


def test_old_records_are_checked_the_wrong_and_the_stale_skipped_with_one_warning(tmp_path, off_by_one_when):
    off_by_one_when(lambda trace: '"unroll"' in trace)
    task = Task(matmul(), "llvm")
    log = tmp_path / "old.jsonl"
    # the faster a record, the earlier it is tried: the two bad ones come first
    records.append(str(log), [old_record(task, GONE, 1e-6), old_record(task, UNROLLED, 1e-5),
                              old_record(task, VALID, 1e-4)])
    with pytest.warns(auto.RecordWarning) as caught:
        s = auto.apply_best(str(log), matmul())
    assert s is not None
    assert json.loads(s.trace.to_json())["steps"] == json.loads(VALID)["steps"]
    mine = [w for w in caught if issubclass(w.category, auto.RecordWarning)]
    assert len(mine) == 1
    text = str(mine[0].message)
    assert "skipped 2 tuning record(s)" in text
    assert "1 no longer apply" in text and "'q'" in text
    assert "1 compute differently" in text and "wrong answer" in text
    assert OLD in text


def test_a_valid_old_record_is_used_without_a_warning(tmp_path):
    task = Task(matmul(), "llvm")
    log = tmp_path / "old.jsonl"
    records.append(str(log), [old_record(task, VALID, 1e-4)])
    args = matmul()
    with warnings.catch_warnings():
        warnings.simplefilter("error", auto.RecordWarning)
        s = auto.apply_best(str(log), args)
    assert json.loads(s.trace.to_json())["steps"] == json.loads(VALID)["steps"]
    a = np.random.default_rng(3).standard_normal((32, 32)).astype("float32")
    b = np.random.default_rng(4).standard_normal((32, 32)).astype("float32")
    out = np.empty((32, 32), "float32")
    lw.build(s, args)(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4, atol=1e-4)


def test_only_bad_old_records_give_none_and_a_warning_not_an_exception(tmp_path, off_by_one_when):
    off_by_one_when(lambda trace: '"unroll"' in trace)
    task = Task(matmul(), "llvm")
    log = tmp_path / "old.jsonl"
    records.append(str(log), [old_record(task, GONE, 1e-6), old_record(task, UNROLLED, 1e-5)])
    with pytest.warns(auto.RecordWarning, match=r"skipped 2 tuning record"):
        assert auto.apply_best(str(log), matmul()) is None


def test_records_of_this_version_are_not_rebuilt_to_be_checked(tmp_path, off_by_one_when):
    """This version checked them when it measured them: using one costs no extra build; an
    older one is built (and, computing the same, used)."""
    built = []
    off_by_one_when(lambda trace: built.append(trace) and False)
    task = Task(matmul(), "llvm")
    log = tmp_path / "new.jsonl"
    records.append(str(log), [old_record(task, VALID, 1e-4, version=records.VERSION)])
    assert auto.apply_best(str(log), matmul()) is not None
    assert built == []
    records.append(str(log), [old_record(task, UNROLLED, 1e-5)])      # faster, and of another version
    s = auto.apply_best(str(log), matmul())
    scheduled = [t for t in built if json.loads(t)["steps"]]       # (the other build: the untuned reference)
    assert len(scheduled) == 1 and '"unroll"' in scheduled[0]
    assert '"unroll"' in s.trace.to_json()


def test_a_record_is_checked_once_per_process(tmp_path, off_by_one_when):
    """A network compiled twice (or two kernels of one structure) does not build a record's check again."""
    built = []
    off_by_one_when(lambda trace: built.append(trace) and False)
    task = Task(matmul(), "llvm")
    log = tmp_path / "old.jsonl"
    records.append(str(log), [old_record(task, VALID, 1e-4)])
    assert auto.apply_best(str(log), matmul()) is not None
    first = len(built)
    assert first == 2                   # the record's schedule and the untuned reference
    assert auto.apply_best(str(log), matmul()) is not None
    assert len(built) == first
