"""Tuning logs of the zoo's kernels, and the shipped cost model trained from them.

``python -m benchmarks.train_cost_model collect [--trials 12] [--targets llvm "llvm -mcpu=x86-64-v3"]
[--only NAME ...] [--skip NAME ...]``
    tunes every task of ResNet-18, MobileNetV2 and the transformer encoder (``lw.extract_tasks``) and
    the kernels of ``benchmarks/autoschedule.py`` for each target, ``--trials`` candidates a task,
    appending to ``benchmarks/cost_model_data/<target>.jsonl`` (resumable: a task whose trials are
    in the log is not measured again); the logs are committed gzipped (``<target>.jsonl.gz``), which
    ``train`` reads when the plain log is not there.
``python -m benchmarks.train_cost_model defaults [--targets ...] [--only NAME ...] [--skip NAME ...]``
    measures each network task's default schedule once into the same logs.
``python -m benchmarks.train_cost_model retime [--targets ...] [--only NAME ...] [--skip NAME ...]``
    times every measured candidate of those logs again on one thread by the CPU time its calls got,
    twice, into ``<target>-one-thread.jsonl`` (committed gzipped; resumable by task once gunzipped):
    the times the data set is made of.  The tuning logs' own times (wall clock, two threads, a
    shared machine) order a task's candidates as a second such timing does only 0.75 of the time
    (the held-out tasks, median disagreement 1.9x); the two one-thread timings agree on 0.94 of the
    pairs, 9 in 10 candidates within 6 %.
``python -m benchmarks.train_cost_model train``
    turns the one-thread logs into the data set (``cost_model_data/dataset.npz``: per measured
    candidate, its features (``features.NAMES``: its own, and their changes from its task's untuned
    kernel) for a one-thread build of its target, its time, its task and target, whether it is the
    task's default schedule, and how far its two timings differ), trains on the tasks of the
    training split and prints pairwise accuracy (over the pairs further apart than the timing's
    noise, ``dataset.noise_band``, and over all pairs) and top-5 recall on the held-out tasks, prints
    the margin ``trials=0`` needs over a default schedule (``dataset.default_margin`` on out-of-fold
    scores: 5 folds of kernels) and what it would pick, then trains on every task (LightGBM
    regression of the log normalised throughput, ``cost_model.PARAMS``, 300 trees) and writes the
    shipped model (``autoschedule/pretrained_model.txt.gz``) and the margin beside it
    (``pretrained_model.json``, ``search.PICK_MARGIN``).
``python -m benchmarks.train_cost_model evaluate``
    only prints the held-out figures and the margin of the committed data set.

Both targets are measured on this one machine (an ``-mcpu=x86-64-v3`` build is AVX2 code, which runs
here too): two targets, one CPU.  The committed logs (a 2-core Zen 5, shared, so under load; about 45
minutes of tuning in all) came from::

    collect --targets llvm --skip winograd        # and resnet18/2:, /3: with it; then, of MobileNetV2,
    collect --targets llvm --only mobilenet_v2/5: mobilenet_v2/6: mobilenet_v2/7: mobilenet_v2/9: \
        mobilenet_v2/10: mobilenet_v2/14: mobilenet_v2/16: mobilenet_v2/21:   # (0-4 and 1 before)
    collect --targets "llvm -mcpu=x86-64-v3" --only kernel/ transformer_encoder/ resnet18/ --skip winograd
    defaults --targets llvm --only transformer_encoder/ resnet18/ mobilenet_v2/...   (the tasks above)
    defaults --targets "llvm -mcpu=x86-64-v3" --only transformer_encoder/ resnet18/ --skip winograd
    retime                                        # about 10 minutes, under load
    train
"""
from __future__ import annotations

import argparse
import dataclasses
import gzip
import json
import os
import time
from typing import Dict, List, Tuple

import numpy as np

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.autoschedule import dataset as ds
from loopweave.autoschedule.cost_model import PRETRAINED, PRETRAINED_FACTS
from loopweave.autoschedule.search import PICK_MARGIN
from loopweave.autoschedule.task import Task
from loopweave.backends.timing import _per_call, set_threads

from . import autoschedule as kernels

DATA = os.path.join(os.path.dirname(__file__), "cost_model_data")
NETWORKS = ("transformer_encoder", "resnet18", "mobilenet_v2")
TARGETS = ("llvm", "llvm -mcpu=x86-64-v3")
#: a task with fewer measured candidates says little about ranking (one alone would be its own best)
MIN_CANDIDATES = 4


def log_name(target: str) -> str:
    return "native" if target == "llvm" else target.split("-mcpu=")[-1]


def zoo_tasks(target: str) -> List[Tuple[str, list]]:
    """(name, args) of every task, kernels first, then the networks' in order."""
    out = [(f"kernel/{name}", fn()[0]) for name, fn in kernels.KERNELS.items()]
    out.append(("kernel/sgemm512", kernels.sgemm(512)[0]))
    for net in NETWORKS:
        graph = lw.from_onnx(f"zoo:{net}")
        for i, t in enumerate(lw.extract_tasks(graph, target)):
            out.append((f"{net}/{i}:{t.name}", t.args))
    return out


def collect(trials: int, targets, only=None, skip=()) -> None:
    os.makedirs(DATA, exist_ok=True)
    t_start = time.perf_counter()
    for target in targets:
        for name, args in zoo_tasks(target):
            if (only and not any(o in name for o in only)) or any(k in name for k in skip):
                continue
            log = os.path.join(DATA, f"{log_name(target)}.jsonl")
            t0 = time.perf_counter()
            try:
                res = auto.tune(args, target=target, trials=trials, log=log, progress=False, measure_untuned=False)
                summary = repr(res)
            except lw.LoopweaveError as exc:
                summary = f"failed: {str(exc)[:200]}"
            print(f"[{time.perf_counter() - t_start:7.0f}s] {target:<22} {name:<55} {time.perf_counter() - t0:5.1f}s "
                  f"{summary}", flush=True)


def collect_defaults(targets, only=None, skip=()) -> None:
    """Measure each network task's default schedule (the op library's) once, into the same logs: the
    hand schedules are among the best points of their tasks, and ``trials=0`` ranks them too."""
    from loopweave.autoschedule.measure import LocalMeasurer
    from loopweave.autoschedule.search import TaskTuner
    measurer = LocalMeasurer(60.0)
    try:
        for target in targets:
            log = os.path.join(DATA, f"{log_name(target)}.jsonl")
            for net in NETWORKS:
                for i, t in enumerate(lw.extract_tasks(lw.from_onnx(f"zoo:{net}"), target)):
                    name = f"{net}/{i}:{t.name}"
                    if (only and not any(o in name for o in only)) or any(k in name for k in skip):
                        continue
                    tuner = TaskTuner(Task(t.args, target), measurer, log=log)
                    r = tuner.measure_given(t.default_schedule().trace.to_json(), "default schedule")
                    print(f"{target:<22} {name:<55} default {r['seconds']}", flush=True)
    finally:
        measurer.close()


def _logged(path: str) -> Dict[str, List[dict]]:
    """The measured records of the log ``path`` (or of its committed ``.gz``) by task key; {} when
    there is neither."""
    if not os.path.exists(path):
        path += ".gz"
        if not os.path.exists(path):
            return {}
    by_task: Dict[str, List[dict]] = {}
    with (gzip.open(path, "rt", encoding="utf-8") if path.endswith(".gz") else open(path, encoding="utf-8")) as f:
        for line in f:
            r = json.loads(line)
            if r.get("seconds") and not r.get("error"):
                by_task.setdefault(r["task"], []).append(r)
    return by_task


def one_thread_log(target: str) -> str:
    return os.path.join(DATA, f"{log_name(target)}-one-thread.jsonl")


def _cpu_seconds(run, repeat: int, min_seconds: float = 0.01) -> float:
    """Median CPU seconds per call of ``run`` over ``repeat`` samples of about ``min_seconds``."""
    t0 = time.thread_time()
    run()                                           # the warm-up, and the estimate of one call
    inner = max(1, int(min_seconds / max(time.thread_time() - t0, 1e-7)))
    return float(np.median([_per_call(run, inner, time.thread_time) for _ in range(repeat)]))


def retime(targets, repeat: int = 3, only=None, skip=()) -> None:
    """Time every measured candidate of the logs again, on one thread, by the CPU time its calls got
    (``time.thread_time``), into ``<target>-one-thread.jsonl``: the logs' wall-clock times of two
    threads on the shared machine order a task's candidates as a second measurement of them does
    only 0.75 of the time.  Two passes over a task's candidates (``repeat`` samples each, the
    median); a record keeps both (``passes``) and the smaller as its time.  Resumable by task."""
    from loopweave.autoschedule.host_lock import measuring_alone
    from loopweave.autoschedule.measure import _random_inputs
    from loopweave.backends.build import build
    from loopweave.dsl.trace import Trace
    set_threads(1)
    index = _task_index(targets)
    for target in targets:
        out = one_thread_log(target)
        done = set(_logged(out))
        for key, recs in _logged(os.path.join(DATA, f"{log_name(target)}.jsonl")).items():
            found = index.get((log_name(target), key))
            if key in done or found is None or len(recs) < MIN_CANDIDATES:
                continue
            name, task = found
            if (only and not any(o in name for o in only)) or any(k in name for k in skip):
                continue
            t0 = time.perf_counter()
            arrays = _random_inputs(task.args)
            runs, kept = [], []
            seen = set()
            for r in recs:
                if r["trace"] in seen:
                    continue
                seen.add(r["trace"])
                try:
                    s = task.schedule()
                    Trace.from_json(r["trace"]).apply(s)
                    mod = build(s, task.args, target=task.target)
                except lw.LoopweaveError:
                    continue                # no longer applies or builds: left out
                runs.append(lambda mod=mod: mod(*arrays))
                kept.append(r)
            passes = [[0.0] * len(runs) for _ in range(2)]
            for p in passes:
                for i, run in enumerate(runs):
                    with measuring_alone():
                        p[i] = _cpu_seconds(run, repeat)
            with open(out, "a", encoding="utf-8") as f:
                for i, r in enumerate(kept):
                    f.write(json.dumps(dict(r, seconds=min(passes[0][i], passes[1][i]),
                                            passes=[passes[0][i], passes[1][i]], timing="one thread, CPU time"),
                                       sort_keys=True) + "\n")
            print(f"{target:<22} {name:<55} {len(kept):3d} candidates {time.perf_counter() - t0:5.1f}s", flush=True)


def _task_index(targets) -> Dict[Tuple[str, str], Tuple[str, Task]]:
    """(target, task key) -> (task name, Task) for every collected task."""
    index = {}
    for target in targets:
        for name, args in zoo_tasks(target):
            task = Task(list(args), target)
            index[(log_name(target), task.key)] = (name, task)
    return index


def build_dataset(targets=TARGETS) -> ds.Dataset:
    """Every candidate of the one-thread logs (``retime``) as (features, time, task, target): the
    features of a one-thread build of the target, as the times are of one thread."""
    index = _task_index(targets)
    parts = []
    for target in targets:
        for key, recs in _logged(one_thread_log(target)).items():
            found = index.get((log_name(target), key))
            if found is None or len(recs) < MIN_CANDIDATES:
                continue
            name, task = found
            one_thread = Task(task.args, dataclasses.replace(task.target, num_threads=1))
            parts.append(ds.from_records(one_thread, recs, f"{log_name(target)}:{name}"))
    return ds.concat(parts)


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("command", choices=["collect", "defaults", "retime", "train", "evaluate"])
    p.add_argument("--trials", type=int, default=12)
    p.add_argument("--targets", nargs="+", default=list(TARGETS))
    p.add_argument("--only", nargs="*", default=None, help="collect only tasks whose name contains one of these")
    p.add_argument("--skip", nargs="*", default=(), help="leave out tasks whose name contains one of these")
    a = p.parse_args(argv)
    if a.command == "collect":
        collect(a.trials, a.targets, a.only, a.skip)
        return
    if a.command == "defaults":
        collect_defaults(a.targets, a.only, a.skip)
        return
    if a.command == "retime":
        retime(a.targets, only=a.only, skip=a.skip)
        return
    path = os.path.join(DATA, "dataset.npz")
    if a.command == "train":
        data = build_dataset(a.targets)
        data.save(path)
        data = ds.Dataset.load(path)        # as committed (features in float32): what evaluate reads
    else:
        data = ds.Dataset.load(path)
    test = ds.held_out(data.task_names)
    print(f"{len(data.y)} candidates of {len(set(data.task_names))} tasks; held out: "
          f"{int(test.sum())} candidates of {len(set(np.array(data.task_names)[test]))} tasks")
    print(ds.held_out_report(data, test))
    scores = ds.out_of_fold_scores(data)
    margin = ds.default_margin(data, scores)
    print(f"margin over a default schedule: {margin:.3f} (the shipped model's, search.PICK_MARGIN: {PICK_MARGIN})")
    print(ds.margin_report(data, scores, margin))
    if a.command == "train":
        model = ds.train(data)
        model.save(PRETRAINED)
        with open(PRETRAINED_FACTS, "w", encoding="utf-8") as f:
            json.dump({"pick_margin": margin}, f)
            f.write("\n")
        print(f"wrote {PRETRAINED} ({os.path.getsize(PRETRAINED) // 1024} KiB) and {PRETRAINED_FACTS}")


if __name__ == "__main__":
    main()
