"""Records the measured times that ``test_model_and_dask.py`` trains the cost model on.

    python tests/autoschedule/data/record_matmul_timings.py     # on a quiet machine

Samples 60 distinct valid schedules of a 96x96x96 float32 matmul from the tuning space, times
each (median of 7 runs of at least 20 ms), and writes their choices, seconds and the machine to
``matmul96_timings.json`` beside this file.  The test re-lowers each choice and extracts its
features today, so the recording stays valid while features change; only a change to the
space's choices calls for recording again.
"""
from __future__ import annotations

import json
import platform
import random
from pathlib import Path

import numpy as np

import loopweave as lw
from loopweave.autoschedule.space import Space
from loopweave.autoschedule.task import Task
from loopweave.target import host_target

SIZE, COUNT = 96, 60
OUTPUT = Path(__file__).with_name("matmul96_timings.json")


def matmul(n):
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    return [A, B, lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")]


def main() -> None:
    args = matmul(SIZE)
    space = Space(Task(args, "llvm"))
    rng = random.Random(0)
    a, b = np.random.default_rng(401).random((2, SIZE, SIZE)).astype("float32")
    c = np.empty((SIZE, SIZE), "float32")
    records, seen = [], set()
    while len(records) < COUNT:
        choice = space.sample(rng)
        key = json.dumps(choice, sort_keys=True)
        if key in seen:
            continue
        seen.add(key)
        try:
            module = lw.build(space.apply(choice), args)
        except lw.ScheduleError:
            continue
        records.append({"choice": choice, "seconds": module.time(a, b, c, repeat=7, min_seconds=0.02)})
        print(f"{len(records):3d} {records[-1]['seconds'] * 1e6:9.1f} us  {key}", flush=True)
    OUTPUT.write_text(json.dumps({"size": SIZE, "machine": f"{platform.processor() or platform.machine()}, "
                                  f"{host_target()}", "candidates": records}, indent=1) + "\n")


if __name__ == "__main__":
    main()
