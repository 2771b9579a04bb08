"""Layout transforms and transposes against numpy's copy of the same permutation.

``python -m benchmarks.transposes [--threads 1|2] [--pairs 11]``

Each row builds one kernel with its default schedule (``nn_ops.schedule``: tiles transposed in
registers, ``backends/llvm/transpose.py``), checks it against numpy, and times it interleaved with
``np.copyto(out, x.transpose(perm))`` (numpy's strided copy, one thread).  The ratio is the median
of per-pair numpy time / loopweave time (> 1: loopweave faster).  The symbolic row is the
compile-once encoder's K transpose over a run-time ``seq`` (whole tiles plus one masked tail).
"""
from __future__ import annotations

import argparse

import numpy as np

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops.nchwc import from_blocked, to_blocked
from loopweave.nn_ops.ops.shape import transpose

from .compare import interleaved, set_threads

# (label, input shape, how to build: "from_blocked" | "to_blocked" | a permutation, symbolic axes)
CASES = [
    ("from_blocked 32x112x112", (1, 2, 112, 112, 16), "from_blocked", ()),
    ("from_blocked 64x56x56", (1, 4, 56, 56, 16), "from_blocked", ()),
    ("from_blocked 512x7x7", (1, 32, 7, 7, 16), "from_blocked", ()),
    ("to_blocked 144x56x56", (1, 144, 56, 56), "to_blocked", ()),
    ("to_blocked 64x112x112", (1, 64, 112, 112), "to_blocked", ()),
    ("transpose [1,196,768] (0,2,1)", (1, 196, 768), (0, 2, 1), ()),
    ("transpose NHWC->NCHW 56x56x96", (1, 56, 56, 96), (0, 3, 1, 2), ()),
    ("transpose K [1,200,4,64] seq symbolic", (1, 200, 4, 64), (0, 2, 3, 1), (1,)),
]


def numpy_view(x: np.ndarray, how) -> np.ndarray:
    """``x`` viewed in the kernel's output order (for from_blocked, [N, C/b, b, H, W]: NCHW as it lies)."""
    if how == "from_blocked":
        return x.transpose(0, 1, 4, 2, 3)
    if how == "to_blocked":
        n, c, h, w = x.shape
        return x.reshape(n, c // 16, 16, h, w).transpose(0, 1, 3, 4, 2)
    return x.transpose(how)


def build(shape, how, symbolic):
    dims = tuple(lw.var(f"d{k}") if k in symbolic else d for k, d in enumerate(shape))
    X = lw.placeholder(dims, name="X")
    if how == "from_blocked":
        Y = from_blocked(X)
    elif how == "to_blocked":
        Y = to_blocked(X, 16)
    else:
        Y = transpose(X, how)
    return lw.build(nn_ops.schedule(Y), [X, Y])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, default=2, choices=[1, 2])
    parser.add_argument("--pairs", type=int, default=11)
    args = parser.parse_args(argv)
    set_threads(args.threads)
    print(f"layout transforms and transposes, {args.threads} thread(s); ratio = numpy copy time / loopweave time")
    print(f"{'kernel':<40} {'lw us':>9} {'numpy us':>9} {'ratio':>7}")
    for label, shape, how, symbolic in CASES:
        f = build(shape, how, symbolic)
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        view = numpy_view(x, how)
        out_shape = view.shape if how != "from_blocked" else (view.shape[0], view.shape[1] * view.shape[2]) + view.shape[3:]
        out = np.empty(out_shape, np.float32)
        f(x, out)
        np.testing.assert_array_equal(out, np.ascontiguousarray(view).reshape(out_shape), err_msg=label)
        peer = np.empty(view.shape, np.float32)
        cmp = interleaved(lambda: f(x, out), lambda: np.copyto(peer, view), pairs=args.pairs, pause=0.05)
        print(f"{label:<40} {cmp.ours_s * 1e6:9.1f} {cmp.theirs_s * 1e6:9.1f} {cmp.ratio:7.2f}", flush=True)


if __name__ == "__main__":
    main()
