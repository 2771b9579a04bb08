"""The int8 matrix product's kernels on each x86 level this machine runs: words of four bytes
(``dot4_u8s8``: ``vpdpbusd`` with VNNI, else widened to int16 in the loop) against words of two rows
widened to int16 (``dot2_i16``: one ``pmaddwd`` a vector, what networks use on x86 without VNNI),
interleaved, with each one's share of the level's int8 peak (``benchmarks.peak``'s product kernel).

``python -m benchmarks.int8_products [--threads 2] [--pairs 9] [--targets llvm "llvm -mcpu=x86-64-v3" ...]``

Prints per target and shape: GMAC/s of each kernel (medians), pairs / words (median of per-pair
ratios: > 1 means the pairs kernel is faster) and the share of the int8 peak (2 ops per product).
"""
from __future__ import annotations

import argparse

import numpy as np

import loopweave as lw
from loopweave.backends.llvm.peak import int8_peak
from loopweave.backends.timing import interleaved, set_threads
from loopweave.nn_ops.ops.int8_matmul import (int8_pairs, matmul_u8s8_pair_panels, matmul_u8s8_panels, pack_words,
                                             pairs_of_words)
from loopweave.nn_ops.ops.matmul import pack_panels, panel_width
from loopweave.nn_ops.ops.registry import schedule
from loopweave.target import compiling_for, resolve_target


SHAPES = ((128, 768, 768), (1, 768, 3072), (128, 3072, 768))


def _kernel(target, m, k, n, pairs: bool):
    """(a function of no arguments running the product once, its operands checked against numpy)."""
    rng = np.random.default_rng(0)
    a = rng.integers(0, 256, (m, k), dtype=np.uint8)
    b = rng.integers(-128, 128, (k, n), dtype=np.int8)
    with compiling_for(target):
        panels = pack_panels(pack_words(b), panel_width(target.lanes("int32")))
        panels = pairs_of_words(panels) if pairs else panels
        A = lw.placeholder((m, k), name="A", dtype="uint8")
        B = lw.placeholder(panels.shape, name="B", dtype="int32")
        D = (matmul_u8s8_pair_panels if pairs else matmul_u8s8_panels)(A, B, n)
        f = lw.build(schedule([D], target), [A, B, D], target=target)
    d = np.empty((m, n), np.int32)
    f(a, panels, d)
    if not np.array_equal(d, a.astype(np.int64) @ b.astype(np.int64)):
        raise SystemExit(f"{target.cpu}: the {'pairs' if pairs else 'words'} kernel computed a wrong product")
    return lambda: f(a, panels, d)


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=9)
    parser.add_argument("--targets", nargs="+", default=["llvm", "llvm -mcpu=x86-64-v4", "llvm -mcpu=x86-64-v3"])
    args = parser.parse_args(argv)
    set_threads(args.threads)
    print(f"{args.threads} thread(s); GMAC/s (medians); pairs/words = median of per-pair ratios; share of the "
          f"level's int8 peak")
    seen = set()
    for text in args.targets:
        target = resolve_target(text)
        if target.arch != "x86_64" or not target.runs_here() or target.key() in seen:
            continue
        seen.add(target.key())
        peak = int8_peak(args.threads, target)
        print(f"-- {target} (int8 peak {peak / 1e9:.0f} G products/s; networks use "
              f"{'pairs' if int8_pairs(target) else 'words'})")
        for m, k, n in SHAPES:
            macs = m * k * n
            words = _kernel(target, m, k, n, pairs=False)
            pairs = _kernel(target, m, k, n, pairs=True)
            c = interleaved(pairs, words, pairs=args.pairs, pause=0.05)
            print(f"   {m:>4} x {k:>4} x {n:>4}: words {macs / c.theirs_s / 1e9:7.1f} ({macs / c.theirs_s / peak:4.0%}), "
                  f"pairs {macs / c.ours_s / 1e9:7.1f} ({macs / c.ours_s / peak:4.0%}), pairs/words {c.ratio:5.2f}",
                  flush=True)


if __name__ == "__main__":
    main()
