"""Dense layers at few rows: the streaming kernel (``matmul_small_m``, the [K, N] weight read in
place) against the register-blocked one on a weight packed in column panels at compile time
(``matmul_panels``), each a single ``lw.build`` timed alone, interleaved.

``python -m benchmarks.dense_rows [--threads 2] [--pairs 15] [--shapes 7x256x1024 1x768x2304 ...]``
prints, per M x K x N: both times and the ratio streaming / panels (> 1: panels faster), after
checking both against numpy.  ``choose_dense_layout`` packs panels for every known row count.
"""
from __future__ import annotations

import argparse

import numpy as np

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops.gemv import matmul_small_m
from loopweave.nn_ops.ops.matmul import matmul_panels, pack_panels, panel_width

from .compare import interleaved, set_threads

SHAPES = ("1x256x1024", "1x768x2304", "1x512x1000", "2x256x1024", "4x256x1024", "7x256x1024", "7x3072x768",
          "16x1024x4096")


def kernels(m: int, k: int, n: int):
    """(streaming module, panels module, panel width) for an m x k by k x n product."""
    X, W = lw.placeholder((m, k), name="X"), lw.placeholder((k, n), name="W")
    Y = matmul_small_m(X, W)
    streaming = lw.build(nn_ops.schedule(Y, "llvm"), [X, W, Y])
    nr = panel_width(lw.target.host_target().lanes("float32"))
    Wp = lw.placeholder((-(-n // nr), k, nr), name="Wp")
    Y2 = matmul_panels(X, Wp, n)
    return streaming, lw.build(nn_ops.schedule(Y2, "llvm"), [X, Wp, Y2]), nr


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--shapes", nargs="+", default=list(SHAPES), metavar="MxKxN")
    args = parser.parse_args(argv)
    set_threads(args.threads)
    print(f"{'M x K x N':<16} {'streaming us':>12} {'panels us':>10} {'ratio':>6}")
    for spec in args.shapes:
        m, k, n = (int(v) for v in spec.split("x"))
        streaming, panels, nr = kernels(m, k, n)
        rng = np.random.default_rng(0)
        x, w = rng.standard_normal((m, k), dtype="float32"), rng.standard_normal((k, n), dtype="float32")
        wp, y1, y2 = pack_panels(w, nr), np.empty((m, n), "float32"), np.empty((m, n), "float32")
        streaming(x, w, y1)
        panels(x, wp, y2)
        for y in (y1, y2):
            np.testing.assert_allclose(y, x @ w, rtol=1e-4, atol=1e-3)
        cmp = interleaved(lambda: panels(x, wp, y2), lambda: streaming(x, w, y1), pairs=args.pairs, pause=0.02)
        print(f"{spec:<16} {cmp.theirs_s * 1e6:12.1f} {cmp.ours_s * 1e6:10.1f} {cmp.ratio:6.2f}", flush=True)


if __name__ == "__main__":
    main()
