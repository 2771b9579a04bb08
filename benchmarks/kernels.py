"""Matmul-family kernels written in the DSL vs numpy (OpenBLAS), interleaved.

``python -m benchmarks.kernels [--threads 1 2] [--quick] [--target "llvm -mcpu=x86-64-v3"]`` prints, per
shape and thread count: loopweave GFLOPS, numpy GFLOPS, the ratio (median of per-pair
numpy-time / loopweave-time; > 1 means loopweave is faster) and the share of the FMA peak at the
target's vector width (``--target``: code for another level this machine runs, AVX2 on an AVX-512 CPU).
"""
from __future__ import annotations

import argparse

import numpy as np

import loopweave as lw
from loopweave import nn_ops
from loopweave.target import resolve_target

from .compare import add_target_argument, interleaved, run_for_target, set_threads
from .peak import fma_peak

MATMUL_SHAPES = [(256, 256, 256), (512, 512, 512), (1024, 1024, 1024), (2048, 2048, 2048),
                 (1000, 1000, 1000), (127, 511, 255), (128, 3072, 768), (128, 768, 3072)]
BATCH_SHAPES = [(12, 128, 128, 64)]


def build_matmul(m: int, n: int, k: int):
    A = lw.placeholder((m, k), name="A")
    B = lw.placeholder((k, n), name="B")
    C = nn_ops.matmul(A, B)
    return lw.build(nn_ops.schedule(C), [A, B, C])


def build_batch_matmul(b: int, m: int, n: int, k: int):
    A = lw.placeholder((b, m, k), name="A")
    B = lw.placeholder((b, k, n), name="B")
    C = nn_ops.batch_matmul(A, B)
    return lw.build(nn_ops.schedule(C), [A, B, C])


def compare_with_numpy(f, a_shape, b_shape, label: str, pairs: int, rng=None, peak: float = None) -> str:
    """Check ``f(a, b, c)`` against ``a @ b`` and time both interleaved; a printed row (with
    ``peak``, FLOP/s: our share of it)."""
    rng = rng if rng is not None else np.random.default_rng(0)
    a = rng.random(a_shape, dtype=np.float32)
    b = rng.random(b_shape, dtype=np.float32)
    c = np.empty(np.broadcast_shapes(a_shape[:-2], b_shape[:-2]) + (a_shape[-2], b_shape[-1]), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    out = np.empty_like(c)
    cmp = interleaved(lambda: f(a, b, c), lambda: np.matmul(a, b, out=out), pairs=pairs)
    flops = 2.0 * c.size * a_shape[-1]
    return cmp.row(label, flops) + (f" {flops / cmp.ours_s / peak:6.0%}" if peak else "")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--quick", action="store_true", help="fewer pairs, skip N=2048")
    add_target_argument(parser)
    run_for_target(parser, parser.parse_args(argv), _run)


def _run(args) -> None:
    rng = np.random.default_rng(0)
    pairs = 5 if args.quick else 15
    print(f"{resolve_target('llvm')}; peak = share of this machine's fp32 FMA peak at that width (benchmarks.peak)")
    print(f"{'shape (M x N x K)':<34} {'ours GF':>9} {'numpy GF':>9} {'ratio':>7} {'peak':>6}")
    for threads in args.threads:
        set_threads(threads)
        peak = fma_peak(threads)
        print(f"-- {threads} thread(s), peak {peak / 1e9:.0f} GFLOPS")
        for (m, n, k) in MATMUL_SHAPES:
            if args.quick and m >= 2048:
                continue
            print(compare_with_numpy(build_matmul(m, n, k), (m, k), (k, n), f"matmul {m}x{n}x{k}", pairs, rng,
                                     peak))
        for (bt, m, n, k) in BATCH_SHAPES:
            print(compare_with_numpy(build_batch_matmul(bt, m, n, k), (bt, m, k), (bt, k, n),
                                     f"batch_matmul {bt}x{m}x{n}x{k}", pairs, rng, peak))

if __name__ == "__main__":
    main()
