"""A network tuned by the autoscheduler against its untuned compile and onnxruntime.

``python -m benchmarks.tuned_network --model resnet18 --log r18.jsonl [--tune 20m] [--pairs 15] [--threads 2]``

With ``--tune`` the model's kernels are tuned first (``auto.tune_network``, appending to
``--log``, as ``loopweave tune zoo:NAME --time-budget ...`` does); without it the log is
used as it is.  Then, in one process, interleaved:

* bar 3: every kernel with a record, the tuned schedule against the op library's default
  schedule of the same kernel (median ratio of single calls per kernel, then the geometric
  mean over the kernels, and over the convolutions alone);
* bar 4: the whole network compiled with ``tuning_log=`` against the untuned compile, and
  against onnxruntime.

Ratios are median(other time / tuned time) over interleaved pairs: > 1 means tuned is faster.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.nn_ops.testing import model_zoo
from loopweave.nn_ops.testing.onnxruntime_peer import compare_with_onnxruntime, random_feed

from .compare import interleaved, set_threads


def _seconds(text: str) -> float:
    units = {"s": 1, "m": 60, "h": 3600}
    return float(text[:-1]) * units[text[-1]] if text[-1] in units else float(text)


def _shape(t):
    return tuple(int(getattr(d, "value", d)) for d in t.shape)


def kernel_ratios(graph, log: str, pairs: int):
    """(name, default ms, tuned ms, ratio) for every kernel that has a record in ``log``."""
    rows = []
    rng = np.random.default_rng(0)
    for k in lw.extract_tasks(graph, "llvm"):
        tuned_s = auto.apply_best(log, k.args)
        if tuned_s is None:
            continue
        tuned = lw.build(tuned_s, k.args)
        default = lw.build(k.default_schedule(), k.args)
        bufs = [rng.standard_normal(_shape(a)).astype(a.dtype) for a in k.args]
        c = interleaved(lambda: tuned(*bufs), lambda: default(*bufs), pairs=pairs)
        rows.append((k.name, k.weight, c.theirs_s * 1e3, c.ours_s * 1e3, c.ratio))
    return rows


def _geomean(xs):
    return math.exp(sum(math.log(x) for x in xs) / len(xs)) if xs else float("nan")


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--model", default="resnet18")
    p.add_argument("--log", required=True)
    p.add_argument("--tune", default=None, help="tune first for this long (e.g. 20m, 600)")
    p.add_argument("--pairs", type=int, default=15)
    p.add_argument("--threads", type=int, default=2)
    a = p.parse_args(argv)
    model = getattr(model_zoo, a.model)()
    graph = lw.from_onnx(model)
    if a.tune:
        t0 = time.perf_counter()
        res = auto.tune_network(lw.extract_tasks(graph, "llvm"), trials=100000, time_budget=_seconds(a.tune), log=a.log, progress=True)
        print(f"tuned in {time.perf_counter() - t0:.0f} s: {res}")
    set_threads(a.threads)
    rows = kernel_ratios(graph, a.log, pairs=max(5, a.pairs // 2))
    print(f"{'kernel':<36} {'calls':>5} {'default ms':>10} {'tuned ms':>9} {'ratio':>6}")
    for name, w, d, t, r in rows:
        print(f"{name:<36} {w:5d} {d:10.3f} {t:9.3f} {r:6.2f}")
    convs = [r for n, _, _, _, r in rows if n.startswith("conv")]
    print(f"geometric mean, all {len(rows)} tuned kernels: {_geomean([r[-1] for r in rows]):.2f}; "
          f"{len(convs)} convolutions: {_geomean(convs):.2f}")
    untuned = lw.compile(graph, progress=False)
    tuned = lw.compile(graph, progress=False, tuning_log=a.log)
    feed = random_feed(tuned)
    np.testing.assert_allclose(tuned.run(feed)[0], untuned.run(feed)[0], rtol=1e-3, atol=1e-3)
    c = interleaved(lambda: tuned.run(feed), lambda: untuned.run(feed), pairs=a.pairs)
    print(f"{a.model}: tuned {c.ours_s * 1e3:.2f} ms, untuned {c.theirs_s * 1e3:.2f} ms, ratio {c.ratio:.2f}")
    o = compare_with_onnxruntime(model, tuned, threads=a.threads, pairs=a.pairs, feed=feed)
    print(f"{a.model}: tuned {o.ours_s * 1e3:.2f} ms, onnxruntime {o.theirs_s * 1e3:.2f} ms, ratio {o.ratio:.2f}")


if __name__ == "__main__":
    main()
