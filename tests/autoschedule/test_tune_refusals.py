"""What the tuner refuses, and when a run found nothing: symbolic sizes are refused before anything is
measured, a run whose every candidate failed is an error, a result without a schedule does not build the
untuned kernel in its place, and a tuning log that does not exist is an error where records are read."""
from __future__ import annotations

import concurrent.futures as cf

import pytest

import loopweave as lw
from loopweave import autoschedule as auto


def matmul(n=32):
    A = lw.placeholder((n, n), name="A", dtype="float32")
    B = lw.placeholder((n, n), name="B", dtype="float32")
    k = lw.reduce_axis((0, n), name="k")
    C = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


class CrashingExecutor(cf.Executor):
    """Every job's worker dies."""

    def submit(self, fn, *args, **kwargs):
        fut = cf.Future()
        fut.set_exception(RuntimeError("the worker died"))
        return fut


def test_symbolic_sizes_are_refused_at_once_naming_the_symbol(tmp_path):
    log = tmp_path / "t.jsonl"
    with pytest.raises(lw.ArgumentError, match=r"symbolic \(n\).*n = 1024 in place of n = lw.var\('n'\)"):
        auto.tune(matmul(lw.var("n")), trials=4, log=str(log), progress=False)
    assert not log.exists() or log.read_text() == ""


def test_a_symbolic_reduction_extent_is_named_too():
    m = lw.var("m")
    A = lw.placeholder((8, 8), name="A")
    k = lw.reduce_axis((0, m), name="k")
    C = lw.compute((8,), lambda i: lw.sum(A[i, k], axis=k), name="C")
    with pytest.raises(lw.ArgumentError, match=r"symbolic \(m\)"):
        auto.tune([A, C], trials=1, progress=False)


def test_a_run_where_every_candidate_failed_is_an_error(tmp_path):
    log = tmp_path / "t.jsonl"
    with pytest.raises(lw.BuildError, match=r"all 3 measured candidates .* failed; the first: .*the worker died"):
        auto.tune(matmul(), trials=3, log=str(log), progress=False, executor=CrashingExecutor(), batch=3)


def test_a_result_without_a_schedule_does_not_build_the_untuned_kernel():
    res = auto.tune(matmul(), trials=8, time_budget=1e-9, measure_untuned=False, progress=False)
    with pytest.raises(lw.ArgumentError, match="no schedule was found"):
        res.build()
    with pytest.raises(lw.ArgumentError, match=r"lw.build\(lw.create_schedule\(outputs\), args\)"):
        res.schedule


def test_apply_best_on_a_missing_log_is_an_error(tmp_path):
    with pytest.raises(lw.ArgumentError, match=r"apply_best: the tuning log .*nope.jsonl' does not exist"):
        auto.apply_best(str(tmp_path / "nope.jsonl"), matmul(), target="llvm")
    with pytest.raises(lw.ArgumentError, match="apply_best: give the path of a tuning log"):
        auto.apply_best(None, matmul(), target="llvm")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    assert auto.apply_best(str(empty), matmul(), target="llvm") is None


def test_compile_with_a_missing_tuning_log_is_an_error(tmp_path):
    from loopweave.nn_ops.testing.model_zoo import small_cnn
    graph = lw.from_onnx(small_cnn())
    with pytest.raises(lw.ArgumentError, match=r"compile: the tuning log .*missing.jsonl' does not exist"):
        lw.compile(graph, tuning_log=str(tmp_path / "missing.jsonl"), progress=False)
