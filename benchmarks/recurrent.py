"""Recurrent layers (ONNX LSTM, GRU, RNN) against onnxruntime: one-node models, interleaved.

``python -m benchmarks.recurrent [--threads 2] [--pairs 15] [--layers LSTM:50:1:256 GRU:50:8:256:bi ...]``

Each layer is ``KIND:steps:batch:units`` (the input size is the unit count), then ``:bi`` for both
directions, ``:lbr`` for a GRU with ``linear_before_reset`` (as torch exports its GRU); its weights
are scaled by 1/sqrt(units), as torch initialises them (with larger ones the recurrence is chaotic
and neither runtime's rounding can match a float64 reference).  Prints
loopweave's and onnxruntime's times and the ratio (median of per-pair onnxruntime / loopweave:
> 1 means loopweave is faster), after checking the outputs agree.
"""
from __future__ import annotations

import argparse

import loopweave as lw
from loopweave.nn_ops.testing.onnxruntime_peer import compare_with_onnxruntime
from loopweave.nn_ops.testing.zoo_recurrent import recurrent_layer

LAYERS = ("LSTM:50:1:256", "LSTM:50:8:256", "LSTM:100:1:512", "LSTM:20:1:64", "GRU:50:1:128", "GRU:50:1:128:lbr",
          "GRU:50:8:256:bi", "GRU:50:8:256:bi:lbr", "RNN:100:4:128")


def layer_model(spec: str):
    """(model, feed, label) for a ``KIND:steps:batch:units[:bi][:lbr]`` spec."""
    kind, steps, batch, units, *flags = spec.split(":")
    S, B, H = int(steps), int(batch), int(units)
    direction = "bidirectional" if "bi" in flags else "forward"
    attrs = {"linear_before_reset": 1} if "lbr" in flags else {}
    model, feed = recurrent_layer(kind, S=S, B=B, I=H, H=H, direction=direction, scale=H ** -0.5, **attrs)
    label = f"{kind} S={S} B={B} H={H}" + (" bidir" if "bi" in flags else "") + (" lbr" if attrs else "")
    return model, feed, label


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--layers", nargs="+", default=list(LAYERS))
    args = parser.parse_args(argv)
    print(f"recurrent layers, {args.threads} thread(s); ratio = onnxruntime time / loopweave time")
    print(f"{'layer':<34} {'lw ms':>9} {'ort ms':>9} {'ratio':>7}")
    for spec in args.layers:
        model, feed, label = layer_model(spec)
        exe = lw.compile(lw.from_onnx(model), progress=False)
        print(compare_with_onnxruntime(model, exe, threads=args.threads, pairs=args.pairs, feed=feed).row(label),
              flush=True)


if __name__ == "__main__":
    main()
