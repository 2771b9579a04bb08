"""A compile of a zoo model now against one saved earlier (``exe.save``), in one process, interleaved.

``python -m benchmarks.against_saved --model squeezenet1_1 --saved old.lwx [--threads 2] [--pairs 15]``
loads the saved executable (its kernels and runner as they were compiled then), compiles the model
with the code as it is, checks both give the same outputs, and prints both latencies and the ratio
saved / now (> 1: today's build is faster).  How to get an old build: unpack a commit with
``git archive <commit> | tar -x -C /tmp/old/loopweave`` and save from it (``PYTHONPATH=/tmp/old``,
another ``LOOPWEAVE_CACHE_DIR``); the .lwx must come from this machine (its CPU is checked at load).
Across processes and runs a shared 2-core machine's noise is several percent; in one process, unchanged code read
1.002 (ResNet-18).

``--shapes BxS ...`` (with ``--model transformer_encoder``): the encoder with symbolic batch and
sequence, compiled once (``polymorphic=True``; save the old one the same way, ``model_zoo.
transformer_encoder(batch=None, seq=None)``), compared at each batch x seq.
"""
from __future__ import annotations

import argparse

import numpy as np

import loopweave as lw
from loopweave.nn_ops.testing import model_zoo

from .compare import interleaved, set_threads
from .network import MODELS, _feed


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", required=True, choices=MODELS)
    parser.add_argument("--saved", required=True, help="a .lwx of the same model saved by an earlier build")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--shapes", nargs="+", default=None, metavar="BxS",
                        help="transformer_encoder only: compile once (symbolic batch and seq), run these shapes")
    args = parser.parse_args(argv)
    if args.shapes and args.model != "transformer_encoder":
        parser.error("--shapes needs --model transformer_encoder")
    set_threads(args.threads)
    old = lw.load(args.saved)
    if args.shapes:
        model = model_zoo.transformer_encoder(batch=None, seq=None)
        new = lw.compile(lw.from_onnx(model), polymorphic=True)
        hidden = model.graph.input[0].type.tensor_type.shape.dim[2].dim_value
        for shape in args.shapes:
            batch, seq = (int(v) for v in shape.lower().split("x"))
            x = np.random.default_rng(batch * 1000 + seq).standard_normal((batch, seq, hidden)).astype(np.float32)
            _compare(f"{args.model} {batch} x {seq}", new, old, {"input": x}, args.pairs)
        return
    model = getattr(model_zoo, args.model)()
    new = lw.compile(lw.from_onnx(model), progress=False)
    feed = _feed(args.model, model) or {n: np.random.default_rng(0).standard_normal(s).astype(d)
                                        for n, s, d in new.inputs}
    _compare(args.model, new, old, feed, args.pairs)


def _compare(label: str, new, old, feed, pairs: int) -> None:
    diff = max(float(np.abs(a - b).max()) for a, b in zip(new.run(feed), old.run(feed)))
    cmp = interleaved(lambda: new.run(feed), lambda: old.run(feed), pairs=pairs, pause=0.1)
    print(f"{label}: now {cmp.ours_s * 1e3:.3f} ms, saved {cmp.theirs_s * 1e3:.3f} ms, "
          f"saved/now {cmp.ratio:.3f} (outputs differ by at most {diff:.2e})", flush=True)


if __name__ == "__main__":
    main()
