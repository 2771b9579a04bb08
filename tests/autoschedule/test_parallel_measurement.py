"""Measurement scales on a cluster: candidates built on every worker at once, timings one at a
time per machine, a time counted only from a machine of the target's CPU."""
from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import numpy as np
import pytest

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave import cli
from loopweave.autoschedule.measure import MeasureResult
from loopweave.target import native_target


def matmul(n):
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    return [A, B, lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")]


def _overlap(a, b) -> bool:
    return a[0] < b[1] and b[0] < a[1]


def test_timings_on_one_host_never_overlap():
    """Two processes each hold the host's measuring lock four times for 50 ms: no two holds overlap
    (without the lock, started together, they would from the first)."""
    script = textwrap.dedent("""
        import json, sys, time
        from loopweave.autoschedule.host_lock import measuring_alone
        start = float(sys.argv[1])
        while time.time() < start:
            time.sleep(0.001)
        spans = []
        for _ in range(4):
            with measuring_alone():
                t0 = time.time()
                time.sleep(0.05)
                spans.append((t0, time.time()))
        print(json.dumps(spans))
    """)
    import time
    start = str(time.time() + 1.0)
    procs = [subprocess.Popen([sys.executable, "-c", script, start], stdout=subprocess.PIPE, text=True)
             for _ in range(2)]
    spans = [json.loads(p.communicate(timeout=60)[0]) for p in procs]
    assert all(p.returncode == 0 for p in procs)
    first, second = spans
    assert not any(_overlap(a, b) for a in first for b in second), spans


def test_a_dask_cluster_measures_on_every_worker_at_once(tmp_path):
    """A round of 8 candidates on two single-thread worker processes: both workers get jobs and
    their jobs run at the same time (the builds; the timings take turns on the host's lock); the
    tuning still finds a correct best, and each record names the CPU that timed it."""
    distributed = pytest.importorskip("distributed")
    with distributed.LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster, distributed.Client(cluster) as client:
        client.run(lambda: __import__("loopweave.autoschedule.measure"))      # workers warm before timing
        args = matmul(48)
        with distributed.get_task_stream(client) as stream:
            res = auto.tune(args, trials=8, batch=8, log=str(tmp_path / "d.jsonl"), executor=client,
                            progress=False, measure_untuned=False)
    jobs = [t for t in stream.data if "isolated_measure_job" in t["key"]]
    assert len(jobs) == 8
    assert len({t["worker"] for t in jobs}) == 2
    spans = [next((s["start"], s["stop"]) for s in t["startstops"] if s["action"] == "compute") for t in jobs]
    assert any(_overlap(a, b) for i, a in enumerate(spans) for b in spans[i + 1:]), spans
    assert all(h["error"] is None for h in res.history), res.history
    assert all(r["measured_on"]["cpu"] == native_target().cpu for r in res.records)
    a, b = np.random.default_rng(3).random((2, 48, 48)).astype("float32")
    c = np.empty((48, 48), "float32")
    res.build()(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4)


class QueueingExecutor:
    """An executor of ``workers`` workers that answers a job when the tuner asks for its result (a
    time from the trace's length), noting how many jobs were out then, the one asked for included."""

    def __init__(self):
        self.out, self.waits = [], []

    def submit(self, fn, job, timeout):
        fut = _AnsweredWhenAsked(self, job)
        self.out.append(fut)
        return fut


class _AnsweredWhenAsked:
    def __init__(self, executor, job):
        self.executor, self.job = executor, job

    def result(self, timeout=None):
        self.executor.waits.append(len(self.executor.out))
        self.executor.out.remove(self)
        return {"seconds": 1e-3 * (1 + len(self.job["trace_json"]) % 97), "error": None}

    def cancel(self):
        return False


def test_an_executor_has_the_next_batch_while_the_tuner_waits(tmp_path):
    """Batches as large as the cluster (2): while the tuner waits for a result, a next batch is
    already out, so neither worker waits for the tuner's proposals and model fits (one batch at a
    time, the second wait of each batch would leave one of two workers idle); the last wait
    drains."""
    executor = QueueingExecutor()
    A = lw.placeholder((16, 16), name="A")
    res = auto.tune([A, lw.compute((16, 16), lambda i, j: A[i, j] + 1, name="B")], trials=6, batch=2, log=str(tmp_path / "q.jsonl"), executor=executor,
                    progress=False, measure_untuned=False)
    assert len(res.history) == 6 and not executor.out
    assert min(executor.waits[:-2]) >= 3 and executor.waits[-2:] == [2, 1], executor.waits
    assert len({h["seconds"] for h in res.history}) > 1        # distinct candidates, none twice


class ElsewhereMachine:
    """A measurer whose replies come from a machine of another CPU model."""

    def run(self, jobs):
        return [MeasureResult(1e-3, None, cpu="some-other-cpu", host="far") for _ in jobs]

    def close(self):
        pass


def test_a_time_from_a_machine_of_another_cpu_does_not_count():
    with pytest.raises(lw.BuildError, match="measured on a some-other-cpu CPU .far., but the target's CPU is"):
        auto.tune(matmul(16), trials=2, measurer=ElsewhereMachine(), progress=False, measure_untuned=False)


def test_cli_tune_scheduler_says_when_none_answers_or_dask_is_missing(tmp_path, capsys, monkeypatch):
    pytest.importorskip("distributed")
    monkeypatch.setattr(cli, "SCHEDULER_TIMEOUT_S", 1)             # (nothing answers: no need to wait long)
    log = str(tmp_path / "net.jsonl")
    assert cli.main(["tune", "zoo:small_cnn", "--trials", "1", "--log", log, "-q",
                     "--scheduler", "tcp://127.0.0.1:9"]) == 2
    assert "--scheduler tcp://127.0.0.1:9: no Dask scheduler answers there" in capsys.readouterr().err
    monkeypatch.setitem(sys.modules, "distributed", None)          # as if the dask extra were not installed
    assert cli.main(["tune", "zoo:small_cnn", "--trials", "1", "--log", log, "-q",
                     "--scheduler", "tcp://127.0.0.1:9"]) != 0
    err = capsys.readouterr().err
    assert "loopweave tune --scheduler" in err and "loopweave[dask]" in err


def test_cli_tune_measures_on_the_scheduler_it_is_given(tmp_path, capsys):
    distributed = pytest.importorskip("distributed")
    log = tmp_path / "net.jsonl"
    with distributed.LocalCluster(n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None,
                                  silence_logs=40) as cluster:
        assert cli.main(["tune", "zoo:small_cnn", "--trials", "4", "--log", str(log), "-q",
                         "--scheduler", cluster.scheduler_address]) == 0
    assert "NetworkTuneResult" in capsys.readouterr().out
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    assert len(rows) >= 4 and all(r["measured_on"]["cpu"] == native_target().cpu for r in rows if r["seconds"])
