"""Tuning through an executor: each candidate runs in a child process of the executor's worker with a
timeout and comes back as plain JSON data, so a hang frees the worker and a crash breaks nothing; a
thread executor is refused; a ProcessPoolExecutor broken by a dead worker is replaced."""
import concurrent.futures as cf
import json
import multiprocessing
import os
import threading

import pytest

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.autoschedule.measure import ExecutorMeasurer, isolated_measure_job
from loopweave.autoschedule.task import Task
from loopweave.dsl.trace import Trace
from loopweave.errors import ArgumentError


def _job():
    A = lw.placeholder((16, 8), name="A")
    B = lw.placeholder((8, 16), name="B")
    k = lw.reduce_axis((0, 8), name="k")
    C = lw.compute((16, 16), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    task = Task([A, B, C], "llvm")
    return dict(key=task.key, task_bytes=task.to_bytes(), trace_json=Trace().to_json(), repeat=1, min_seconds=0.0)


def _pool():
    return cf.ProcessPoolExecutor(max_workers=1, mp_context=multiprocessing.get_context("spawn"))


def test_a_thread_executor_is_refused():
    with cf.ThreadPoolExecutor(1) as threads:
        with pytest.raises(ArgumentError, match="ThreadPoolExecutor would build and run candidate"):
            ExecutorMeasurer(threads)
        A = lw.placeholder((4,), name="A")
        B = lw.compute((4,), lambda i: A[i] + 1.0, name="B")
        with pytest.raises(ArgumentError, match="ThreadPoolExecutor"):
            auto.tune([A, B], trials=1, executor=threads, progress=False)


def test_a_crash_and_a_hang_cost_one_candidate_each():
    job = _job()
    pool = _pool()
    m = ExecutorMeasurer(pool, timeout=5.0)
    try:
        crashed, ok1, hung, ok2 = m.run([dict(job, crash=True), job, dict(job, hang=300.0), job])
    finally:
        m.close()
        pool.shutdown(wait=False, cancel_futures=True)
    assert crashed.seconds is None and "crashed" in crashed.error, crashed
    assert hung.seconds is None and "timeout" in hung.error, hung
    assert ok1.error is None and ok1.seconds > 0, ok1
    assert ok2.error is None and ok2.seconds > 0, ok2


def test_a_broken_process_pool_is_replaced():
    pool = _pool()
    pool.submit(os._exit, 3)
    with pytest.raises(cf.process.BrokenProcessPool):
        pool.submit(int, 1).result(timeout=120)
    m = ExecutorMeasurer(pool, timeout=30.0)
    try:
        result, = m.run([_job()])
    finally:
        m.close()
    assert result.error is None and result.seconds > 0, result


def test_the_reply_is_plain_json():
    from loopweave.autoschedule import measure
    try:
        reply = isolated_measure_job(_job(), 60.0)
    finally:
        measure._ISOLATED.pop((threading.get_ident(), 60.0)).close()     # this thread's child
    assert json.loads(json.dumps(reply)) == reply
    assert reply["error"] is None and reply["seconds"] > 0
