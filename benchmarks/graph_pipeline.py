"""The one Graph pipeline over symbolic sizes against the compile-once walk, on the zoo encoder.

``python -m benchmarks.graph_pipeline [--threads 2] [--pairs 15] [--shapes 1x1 1x7 1x128 4x64]``

The model zoo's BERT-style encoder (hidden 256, 4 heads, 4 layers, FFN 1024) with symbolic ``batch``
and ``seq`` is compiled both ways, ``lw.compile(graph, pipeline="graph")`` and
``lw.compile(graph, polymorphic=True)``: timed cold (``from_onnx`` + ``compile``, each in a fresh
process with an empty kernel cache, graph pipeline first), then compiled in this process.  Per shape, the
outputs are compared and the two executables timed interleaved (``benchmarks/compare.py``'s
``interleaved``): ``ratio`` is the median of compile-once time / graph-pipeline time (> 1 means the
graph pipeline is faster).  ``--static`` also compiles each shape statically (the issue's bar: a
compile-once encoder at >= 0.95x the static compile of each shape) and times it against the graph
pipeline the same way (``vs static``: static time / graph-pipeline time).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

from .compare import interleaved, set_threads


_COMPILE_SCRIPT = """
import sys, time
import loopweave as lw
from loopweave.nn_ops.testing import model_zoo
model = model_zoo.transformer_encoder(batch=None, seq=None)
t0 = time.perf_counter()
graph = lw.from_onnx(model)
exe = lw.compile(graph, pipeline="graph") if sys.argv[1] == "graph" else lw.compile(graph, polymorphic=True)
print(f"{time.perf_counter() - t0:.3f}")
"""


def _cold_compile_seconds(how: str) -> float:
    with tempfile.TemporaryDirectory() as tmp:
        env = dict(os.environ, LOOPWEAVE_CACHE_DIR=tmp)
        out = subprocess.run([sys.executable, "-c", _COMPILE_SCRIPT, how], env=env, capture_output=True, text=True,
                             check=True)
    return float(out.stdout.strip().splitlines()[-1])


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--shapes", nargs="+", default=["1x1", "1x7", "1x128", "4x64"])
    parser.add_argument("--static", action="store_true")
    args = parser.parse_args(argv)
    cold = {how: _cold_compile_seconds(how) for how in ("graph", "once")}
    print(f"cold compile (fresh process, empty kernel cache): graph pipeline {cold['graph']:.1f} s, "
          f"compile-once {cold['once']:.1f} s")
    import loopweave as lw
    from loopweave.nn_ops.testing import model_zoo
    set_threads(args.threads)
    graph = lw.from_onnx(model_zoo.transformer_encoder(batch=None, seq=None))
    ours, theirs = lw.compile(graph, pipeline="graph"), lw.compile(graph, polymorphic=True)
    print(f"{'shape':<8} {'graph ms':>9} {'once ms':>9} {'ratio':>6} {'max diff':>9}"
          + (f" {'static ms':>9} {'vs static':>9}" if args.static else ""))
    for shape in args.shapes:
        batch, seq = (int(x) for x in shape.split("x"))
        feed = {"input": np.random.default_rng(0).standard_normal((batch, seq, 256)).astype(np.float32)}
        diff = float(np.abs(ours.run(feed)[0] - theirs.run(feed)[0]).max())
        c = interleaved(lambda: ours.run(feed), lambda: theirs.run(feed), pairs=args.pairs)
        row = f"{shape:<8} {c.ours_s * 1e3:9.3f} {c.theirs_s * 1e3:9.3f} {c.ratio:6.2f} {diff:9.2e}"
        if args.static:
            static = lw.compile(graph.specialize({"input": (batch, seq, 256)}, {}), progress=False)
            s = interleaved(lambda: ours.run(feed), lambda: static.run(feed), pairs=args.pairs)
            row += f" {s.theirs_s * 1e3:9.3f} {s.ratio:9.2f}"
        print(row, flush=True)


if __name__ == "__main__":
    main()
