"""Tuning on a Dask cluster: candidates per second with two single-thread workers against one.

``python -m benchmarks.dask_scaling [--trials 32] [--runs 2] [--kernel blur]``

Each run tunes one kernel of ``benchmarks.autoschedule`` from scratch (a fresh log, the same seed, so
the same proposals) through a ``LocalCluster`` of 1 and of 2 one-thread worker processes on this
machine, the two alternating (1, 2, 2, 1, ...) so that a change of the machine's load falls on both.
Each worker is pinned to a core of its own (every thread of its process, so the child that builds
and times its candidates inherits it): a single-threaded worker, whose kernels run on one thread,
so one worker's timing and the other's build share no core.
It prints each run's measured candidates per second (wall clock of the whole ``tune`` call: the
tuner's own proposals and model fits included), best time and the CPU time this process spent per
candidate (the tuner's proposals, model fits and the cluster's scheduler: what the workers share the
cores with), then the ratio of the medians: two
workers build at once, while checks and timings take turns on the host's lock (``host_lock``).
"""
from __future__ import annotations

import argparse
import os
import statistics
import tempfile
import time

from loopweave import autoschedule as auto

from .autoschedule import KERNELS, sgemm


def _kernel(name: str):
    return sgemm(256)[0] if name == "sgemm" else KERNELS[name]()[0]


def one_run(args, workers: int, trials: int, log: str) -> tuple:
    """(candidates measured per second, best seconds) of one tuning on ``workers`` workers, their
    compiled code cached in a folder of their own (a run after another of the same seed would
    otherwise find every candidate compiled)."""
    import distributed
    os.environ["LOOPWEAVE_CACHE_DIR"] = tempfile.mkdtemp(prefix="lw_dask_scaling_cache_")
    with distributed.LocalCluster(n_workers=workers, threads_per_worker=1, processes=True,
                                  dashboard_address=None, silence_logs=40) as cluster, \
            distributed.Client(cluster) as client:
        client.run(lambda: __import__("loopweave.autoschedule.measure"))     # workers warm before timing
        for cpu, address in zip(sorted(os.sched_getaffinity(0)), sorted(client.scheduler_info()["workers"])):
            client.run(_pin, cpu, workers=[address])
        t0, c0 = time.perf_counter(), time.process_time()
        res = auto.tune(args, trials=trials, log=log, executor=client, progress=False, measure_untuned=False)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
    return len(res.history) / wall, res.best_seconds, cpu / len(res.history)


def _pin(cpu: int) -> None:
    """Every thread of this process on ``cpu`` (threads and processes started later inherit it)."""
    for tid in os.listdir("/proc/self/task"):
        os.sched_setaffinity(int(tid), {cpu})


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=32)
    p.add_argument("--runs", type=int, default=2, help="runs of each cluster size, alternating")
    p.add_argument("--kernel", default="sgemm", choices=["sgemm"] + list(KERNELS),
                   help="sgemm: a 256^3 matmul; else a kernel of benchmarks.autoschedule")
    a = p.parse_args(argv)
    args = _kernel(a.kernel)
    folder = tempfile.mkdtemp(prefix="lw_dask_scaling_")
    rates = {1: [], 2: []}
    for run in range(a.runs):
        for workers in (1, 2) if run % 2 == 0 else (2, 1):
            rate, best, cpu = one_run(args, workers, a.trials, f"{folder}/{workers}_{run}.jsonl")
            rates[workers].append(rate)
            print(f"{workers} worker(s), run {run}: {rate:.2f} candidates/s, best {best * 1e3:.3f} ms, "
                  f"{cpu * 1e3:.0f} ms of this process's CPU per candidate", flush=True)
    one, two = statistics.median(rates[1]), statistics.median(rates[2])
    print(f"{a.kernel}, {a.trials} trials: {one:.2f} candidates/s on one worker, {two:.2f} on two: {two / one:.2f}x")


if __name__ == "__main__":
    main()
