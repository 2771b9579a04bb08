"""Tuning a network's kernels with and without sharing best choices within a family of tasks.

``python -m benchmarks.task_families [--model resnet18] [--tasks 4,8,12,15,5,9,13] [--trials 224] [--seed 0]``

Takes the given kernels of the model (indices into ``lw.extract_tasks(graph, "llvm")``; the default
is ResNet-18's direct 3x3 convs with a ReLU and its 1x1 downsample convs), tunes them together
with ``tune_tasks`` twice with the same seed and trials, once with family sharing switched off
(``TaskTuner.offer`` does nothing) and once as shipped, and prints, per task, the best searched
time against the default schedule measured in the same run, and the geometric mean.  The
default schedules are measured only as the first candidate of each run (not side by side), so
single ratios move by a few percent between runs; compare the means.
"""
from __future__ import annotations

import argparse
import math
import os
import tempfile
import time

import loopweave as lw
from loopweave.autoschedule import search
from loopweave.autoschedule.task import Task
from loopweave.autoschedule.task_scheduler import tune_tasks
from loopweave.nn_ops.testing import model_zoo

from .compare import set_threads


def _run(kernels, indices, trials: int, seed: int, share: bool) -> float:
    offer = search.TaskTuner.offer
    if not share:
        search.TaskTuner.offer = lambda self, choice: None
    try:
        tasks = [Task(kernels[i].args, "llvm", weight=float(kernels[i].weight), name=f"{i}:{kernels[i].name}")
                 for i in indices]
        with tempfile.TemporaryDirectory() as tmp:
            t0 = time.perf_counter()
            results = tune_tasks(tasks, target="llvm", trials=trials, log=os.path.join(tmp, "log.jsonl"),
                                 progress=False, seed=seed,
                                 baselines=[kernels[i].default_schedule().trace.to_json() for i in indices])
            elapsed = time.perf_counter() - t0
    finally:
        search.TaskTuner.offer = offer
    logs = []
    print(f"sharing {'on' if share else 'off'} ({elapsed:.0f} s):")
    for i, r in zip(indices, results):
        default = next(x["seconds"] for x in r.records if x.get("choice") == {"given": "default schedule"})
        searched = min(x["seconds"] for x in r.records if x.get("seconds") and not x.get("error")
                       and "given" not in x["choice"] and not x.get("verified"))
        seeded = sum(1 for h in r.history if h.get("seeded"))
        logs.append(math.log(default / searched))
        print(f"  {i:3d} {kernels[i].name:30s} default {default * 1e3:.4f} ms  searched {searched * 1e3:.4f} ms"
              f"  default/searched {default / searched:.3f}  ({seeded} seeded)")
    mean = math.exp(sum(logs) / len(logs))
    print(f"  geometric mean default/searched {mean:.3f}")
    return mean


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="resnet18", choices=model_zoo.NAMES)
    parser.add_argument("--tasks", default="4,8,12,15,5,9,13")
    parser.add_argument("--trials", type=int, default=224)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    kernels = lw.extract_tasks(lw.from_onnx(getattr(model_zoo, args.model)()), "llvm")
    indices = [int(i) for i in args.tasks.split(",")]
    off = _run(kernels, indices, args.trials, args.seed, share=False)
    on = _run(kernels, indices, args.trials, args.seed, share=True)
    print(f"{args.model}: default/searched {off:.3f} without sharing, {on:.3f} with (> 1: the search beat the hand schedules)")


if __name__ == "__main__":
    main()
