"""The autoscheduler against the default schedules, ratios measured interleaved in one run.

``python -m benchmarks.autoschedule [--trials 256] [--budget 240] [--only sgemm blur ...] [--cpu-time]``

1. SGEMM 1024^3 tuned from ``nn_ops.matmul``'s compute alone (no schedule looked up) vs
   numpy (OpenBLAS) and vs the op library's hand schedule.
2. Kernels without a hand schedule (two-stage 3x3 blur 1920x1080, softmax 128x3072,
   layer norm 512x768, batched matmul 12x128x64x128, 3x3 depthwise conv 144x56x56, a full sum of
   16M floats, a row sum of 4096x4096, one attention head's ``(Q Kᵀ) V`` 512x64),
   written here in the DSL: tuned vs untuned and vs numpy.
5. Tuner speed: measured candidates per second on the SGEMM task.

Ratios are median(peer time / ours) over interleaved pairs: > 1 means loopweave is faster.
Unset OPENBLAS_CORETYPE / OPENBLAS_L2_SIZE in this command when comparing with numpy
(docs/design.md); the kernel numpy runs is printed.
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave import nn_ops

from .compare import interleaved, set_threads


def _np(shape_tensor):
    return tuple(int(getattr(d, "value", d)) for d in shape_tensor.shape)


def sgemm(n=1024):
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    C = nn_ops.matmul(A, B)
    return [A, B, C], (lambda a, b, out: np.matmul(a, b, out=out))


def blur(h=1080, w=1920):
    I = lw.placeholder((h, w), name="I")
    bx = lw.compute((h, w - 2), lambda y, x: (I[y, x] + I[y, x + 1] + I[y, x + 2]) * (1 / 3), name="bx")
    by = lw.compute((h - 2, w - 2), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) * (1 / 3), name="by")

    def ref(img, out):
        t = (img[:, :-2] + img[:, 1:-1] + img[:, 2:]) * np.float32(1 / 3)
        np.multiply(t[:-2] + t[1:-1] + t[2:], np.float32(1 / 3), out=out)
    return [I, by], ref


def softmax(m=128, n=3072):
    X = lw.placeholder((m, n), name="X")
    k1 = lw.reduce_axis((0, n), name="k1")
    mx = lw.compute((m,), lambda i: lw.max(X[i, k1], axis=k1), name="mx")
    e = lw.compute((m, n), lambda i, j: lw.exp(X[i, j] - mx[i]), name="e")
    k2 = lw.reduce_axis((0, n), name="k2")
    sm = lw.compute((m,), lambda i: lw.sum(e[i, k2], axis=k2), name="sm")
    Y = lw.compute((m, n), lambda i, j: e[i, j] / sm[i], name="Y")

    def ref(x, out):
        t = np.exp(x - x.max(axis=1, keepdims=True))
        np.divide(t, t.sum(axis=1, keepdims=True), out=out)
    return [X, Y], ref


def layernorm(m=512, n=768):
    X = lw.placeholder((m, n), name="X")
    k1 = lw.reduce_axis((0, n), name="k1")
    total = lw.compute((m,), lambda i: lw.sum(X[i, k1], axis=k1), name="total")
    mean = lw.compute((m,), lambda i: total[i] * (1.0 / n), name="mean")
    k2 = lw.reduce_axis((0, n), name="k2")
    sq = lw.compute((m,), lambda i: lw.sum((X[i, k2] - mean[i]) * (X[i, k2] - mean[i]), axis=k2), name="sq")
    var = lw.compute((m,), lambda i: sq[i] * (1.0 / n), name="var")
    Y = lw.compute((m, n), lambda i, j: (X[i, j] - mean[i]) * lw.rsqrt(var[i] + 1e-5), name="Y")

    def ref(x, out):
        mu = x.mean(axis=1, keepdims=True)
        np.divide(x - mu, np.sqrt(x.var(axis=1, keepdims=True) + 1e-5), out=out)
    return [X, Y], ref


def batch_matmul(b=12, m=128, k=64, n=128):
    A = lw.placeholder((b, m, k), name="A")
    B = lw.placeholder((b, k, n), name="B")
    r = lw.reduce_axis((0, k), name="r")
    C = lw.compute((b, m, n), lambda z, i, j: lw.sum(A[z, i, r] * B[z, r, j], axis=r), name="C")
    return [A, B, C], (lambda a, bb, out: np.matmul(a, bb, out=out))


def depthwise(c=144, h=56, w=56):
    X = lw.placeholder((c, h + 2, w + 2), name="X")      # padded input
    W = lw.placeholder((c, 3, 3), name="W")
    ry = lw.reduce_axis((0, 3), name="ry")
    rx = lw.reduce_axis((0, 3), name="rx")
    Y = lw.compute((c, h, w), lambda z, y, x: lw.sum(X[z, y + ry, x + rx] * W[z, ry, rx], axis=[ry, rx]), name="Y")

    def ref(x, wt, out):
        out[...] = 0
        for dy in range(3):
            for dx in range(3):
                out += x[:, dy:dy + h, dx:dx + w] * wt[:, dy, dx][:, None, None]
    return [X, W, Y], ref


def full_sum(n=1 << 24):
    A = lw.placeholder((n,), name="A")
    k = lw.reduce_axis((0, n), name="k")
    S = lw.compute((1,), lambda _: lw.sum(A[k], axis=k), name="S")
    return [A, S], (lambda a, out: np.sum(a, keepdims=True, out=out))


def row_sum(m=4096, n=4096):
    M = lw.placeholder((m, n), name="M")
    k = lw.reduce_axis((0, n), name="k")
    R = lw.compute((m,), lambda i: lw.sum(M[i, k], axis=k), name="R")
    return [M, R], (lambda a, out: np.sum(a, axis=1, out=out))


def attention(n=512, d=64):
    """``(Q Kᵀ) V`` of one head: the scores a Q·Kᵀ matmul (both operands read along the reduction,
    Kᵀ's columns strided) fed into a second matmul; the peer is numpy's two matmuls."""
    Q = lw.placeholder((n, d), name="Q")
    K = lw.placeholder((n, d), name="K")
    V = lw.placeholder((n, d), name="V")
    r = lw.reduce_axis((0, d), name="r")
    S = lw.compute((n, n), lambda i, j: lw.sum(Q[i, r] * K[j, r], axis=r), name="S")
    t = lw.reduce_axis((0, n), name="t")
    O = lw.compute((n, d), lambda i, c: lw.sum(S[i, t] * V[t, c], axis=t), name="O")
    return [Q, K, V, O], (lambda q, kk, v, out: np.matmul(q @ kk.T, v, out=out))


KERNELS = {"blur": blur, "softmax": softmax, "layernorm": layernorm, "batch_matmul": batch_matmul,
           "depthwise": depthwise, "full_sum": full_sum, "row_sum": row_sum, "attention": attention}


def _arrays(args):
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal(_np(t)).astype("float32") for t in args[:-1]]
    return ins, np.empty(_np(args[-1]), "float32"), np.empty(_np(args[-1]), "float32")


def _openblas_kernel() -> str:
    try:
        from threadpoolctl import threadpool_info
        return ", ".join(f"{i.get('internal_api')} {i.get('architecture')}" for i in threadpool_info()
                         if i.get("user_api") == "blas")
    except ImportError:
        return "threadpoolctl not installed"


def bench_sgemm(trials, budget, pairs, log_dir):
    args, ref = sgemm()
    t0 = time.perf_counter()
    res = auto.tune(args, trials=trials, time_budget=budget, progress=True, log=os.path.join(log_dir, "sgemm.jsonl"))
    wall = time.perf_counter() - t0
    n = len([h for h in res.history if not h["resumed"]])
    print(res)
    print(f"tuner speed: {n} candidates measured in {wall:.1f} s = {n / wall:.2f} candidates/s "
          f"(wall incl. the untuned build and the first worker start)")
    print(res.trace)
    tuned = res.build()
    hand = lw.build(nn_ops.schedule(args[-1]), args)
    ins, out, out2 = _arrays(args)
    tuned(*ins, out)
    np.testing.assert_allclose(out, ins[0] @ ins[1], rtol=1e-3, atol=1e-2)
    flops = 2.0 * 1024 ** 3
    print(f"{'':<34} {'ours GF':>9} {'peer GF':>9} {'ratio':>7}")
    print(interleaved(lambda: tuned(*ins, out), lambda: ref(*ins, out2), pairs=pairs).row("sgemm tuned vs numpy", flops))
    print(interleaved(lambda: tuned(*ins, out), lambda: hand(*ins, out2), pairs=pairs).row("sgemm tuned vs hand", flops))
    if res.model_quality:
        q = res.model_quality
        print(f"cost model on each round's held-out batch: top-3 recall {np.mean([x['top_k_recall'] for x in q]):.2f}, "
              f"pairwise accuracy {np.mean([x['pairwise_accuracy'] for x in q]):.2f} over {len(q)} rounds")


def bench_kernel(name, trials, budget, pairs, log_dir, clock=time.perf_counter):
    args, ref = KERNELS[name]()
    res = auto.tune(args, trials=trials, time_budget=budget, progress=True, log=os.path.join(log_dir, f"{name}.jsonl"))
    print(res)
    tuned = res.build()
    untuned = lw.build(lw.create_schedule([args[-1]]), args)
    ins, out, out2 = _arrays(args)
    tuned(*ins, out)
    ref(*ins, out2)
    np.testing.assert_allclose(out, out2, rtol=1e-3, atol=1e-3)
    print(f"{'':<34} {'ours ms':>9} {'peer ms':>9} {'ratio':>7}")
    # the untuned build as "ours": a sample then holds as many calls as it needs (a few), not as many
    # as the tuned one needs (hundreds of slow calls); its ratio is inverted
    slow = interleaved(lambda: untuned(*ins, out2), lambda: tuned(*ins, out), pairs=max(3, pairs // 3), clock=clock)
    print(f"{name + ' tuned vs untuned':<34} {slow.theirs_s * 1e3:9.3f} {slow.ours_s * 1e3:9.3f} {1 / slow.ratio:7.2f}")
    print(interleaved(lambda: tuned(*ins, out), lambda: ref(*ins, out2), pairs=pairs, clock=clock)
          .row(f"{name} tuned vs numpy"))


def main(argv=None) -> None:
    p = argparse.ArgumentParser()
    p.add_argument("--trials", type=int, default=256)
    p.add_argument("--budget", type=float, default=240.0, help="seconds of tuning per kernel")
    p.add_argument("--pairs", type=int, default=15)
    p.add_argument("--log-dir", default=None, help="keep the tuning logs here (a fresh temporary folder by default)")
    p.add_argument("--only", nargs="+", default=["sgemm"] + list(KERNELS))
    p.add_argument("--cpu-time", action="store_true",
                   help="one thread, timed by the CPU time it got (time.thread_time), which a loaded machine does "
                        "not inflate; run under `taskset -c 0` so the tuner's worker builds and times one-thread "
                        "code too")
    a = p.parse_args(argv)
    clock = time.perf_counter
    if a.cpu_time:
        set_threads(1)
        clock = time.thread_time
    log_dir = a.log_dir or tempfile.mkdtemp(prefix="lw_autoschedule_")
    print(f"numpy BLAS: {_openblas_kernel()}; logs in {log_dir}")
    for name in a.only:
        print(f"== {name}")
        if name == "sgemm":
            bench_sgemm(a.trials, a.budget, a.pairs, log_dir)
        else:
            bench_kernel(name, a.trials, a.budget, a.pairs, log_dir, clock)


if __name__ == "__main__":
    main()
