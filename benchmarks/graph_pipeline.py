"""The one Graph pipeline over symbolic sizes against the compile-once walk, on the zoo encoder.

``python -m benchmarks.graph_pipeline [--threads 2] [--pairs 15] [--shapes 1x1 1x7 1x128 4x64]``

The model zoo's BERT-style encoder (hidden 256, 4 heads, 4 layers, FFN 1024) with symbolic ``batch``
and ``seq`` is compiled both ways in this process, each with an empty kernel cache of its own:
``lw.compile(graph, pipeline="graph")`` and ``lw.compile(graph, polymorphic=True)``.  Per shape, the
outputs are compared and the two executables timed interleaved (``benchmarks/compare.py``'s
``interleaved``): ``ratio`` is the median of compile-once time / graph-pipeline time (> 1 means the
graph pipeline is faster).
"""
from __future__ import annotations

import argparse
import os
import tempfile
import time

import numpy as np

from .compare import interleaved, set_threads


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--shapes", nargs="+", default=["1x1", "1x7", "1x128", "4x64"])
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory() as tmp:
        os.environ["LOOPWEAVE_CACHE_DIR"] = tmp
        import loopweave as lw
        from loopweave.nn_ops.testing import model_zoo
        set_threads(args.threads)
        graph = lw.from_onnx(model_zoo.transformer_encoder(batch=None, seq=None))
        t0 = time.perf_counter()
        ours = lw.compile(graph, pipeline="graph")
        t1 = time.perf_counter()
        os.environ["LOOPWEAVE_CACHE_DIR"] = os.path.join(tmp, "other")
        theirs = lw.compile(graph, polymorphic=True)
        t2 = time.perf_counter()
    print(f"compile (empty kernel cache, in process): graph pipeline {t1 - t0:.1f} s ({len(ours.kernels)} kernels), "
          f"compile-once {t2 - t1:.1f} s ({len(theirs.kernels)} kernels)")
    print(f"{'shape':<8} {'graph ms':>9} {'once ms':>9} {'ratio':>6} {'max diff':>9}")
    for shape in args.shapes:
        batch, seq = (int(x) for x in shape.split("x"))
        feed = {"input": np.random.default_rng(0).standard_normal((batch, seq, 256)).astype(np.float32)}
        diff = float(np.abs(ours.run(feed)[0] - theirs.run(feed)[0]).max())
        c = interleaved(lambda: ours.run(feed), lambda: theirs.run(feed), pairs=args.pairs)
        print(f"{shape:<8} {c.ours_s * 1e3:9.3f} {c.theirs_s * 1e3:9.3f} {c.ratio:6.2f} {diff:9.2e}", flush=True)


if __name__ == "__main__":
    main()
