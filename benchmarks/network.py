"""Whole networks (ResNet-18, MobileNetV2 at batch 1, 224x224; the BERT-style encoder at batch 1,
sequence 128; the wider zoo: SqueezeNet 1.1, ViT-Tiny/16, an EfficientNet-B0-style CNN,
ConvNeXt-T, DenseNet-121 and MLP-Mixer S/16 at 224, a U-Net at 256, a GPT-2-style decoder with
distilgpt2's sizes at sequence 128) vs onnxruntime, interleaved.

``python -m benchmarks.network [--threads 2] [--pairs 15] [--models resnet18 squeezenet1_1 ...]``
prints, per model: loopweave and onnxruntime latency (medians), the ratio (median of
per-pair onnxruntime-time / loopweave-time; > 1 means loopweave is faster), and compile
times: cold (empty object cache, fresh process), cached (disk cache warm, fresh process)
and load (``lw.load`` of a saved executable, fresh process).
Models are built in memory with seeded random weights (``nn_ops.testing.model_zoo``).
"""
from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile

import numpy as np

import loopweave as lw
from loopweave.nn_ops.testing.onnxruntime_peer import compare_with_onnxruntime
from loopweave.nn_ops.testing import model_zoo

_TIMING_SCRIPT = """
import sys, time
import loopweave as lw
from loopweave.nn_ops.testing import model_zoo
model = getattr(model_zoo, sys.argv[1])()
t0 = time.perf_counter()
g = lw.from_onnx(model)
exe = lw.compile(g, progress=False)
t1 = time.perf_counter()
exe.save(sys.argv[2])
print(f"{t1 - t0:.3f}")
"""

_LOAD_SCRIPT = """
import sys, time
import loopweave as lw
t0 = time.perf_counter()
exe = lw.load(sys.argv[1])
print(f"{time.perf_counter() - t0:.3f}")
"""


def _subprocess_seconds(script: str, args, cache_dir: str) -> float:
    env = dict(os.environ, LOOPWEAVE_CACHE_DIR=cache_dir)
    out = subprocess.run([sys.executable, "-c", script, *args], env=env, capture_output=True, text=True, check=True)
    return float(out.stdout.strip().splitlines()[-1])


def compile_times(model_name: str):
    """(cold, cached, load) seconds, each in a fresh process."""
    with tempfile.TemporaryDirectory() as tmp:
        cache = os.path.join(tmp, "cache")
        path = os.path.join(tmp, "model.lwx")
        cold = _subprocess_seconds(_TIMING_SCRIPT, [model_name, path], cache)
        cached = _subprocess_seconds(_TIMING_SCRIPT, [model_name, path], cache)
        load = _subprocess_seconds(_LOAD_SCRIPT, [path], cache)
    return cold, cached, load


MODELS = ("resnet18", "mobilenet_v2", "transformer_encoder", "squeezenet1_1", "vit_tiny", "efficientnet_lite",
          "convnext", "densenet", "unet", "gpt2", "mlp_mixer", "style_transfer", "lstm_lm", "shufflenet_v2",
          "inception_v3", "resnet50")
#: the token models: their embedding table's name prefix
TOKEN_MODELS = {"gpt2": "wte", "lstm_lm": "embedding"}


def _feed(name: str, model):
    """Token ids over the vocabulary for the token models; None (random normal inputs) for the others."""
    if name not in TOKEN_MODELS:
        return None
    vocab = next(t.dims[0] for t in model.graph.initializer if t.name.startswith(TOKEN_MODELS[name]))
    shape = [d.dim_value for d in model.graph.input[0].type.tensor_type.shape.dim]
    return {"input": np.random.default_rng(0).integers(0, vocab, shape, dtype=np.int64)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=15)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=MODELS)
    parser.add_argument("--no-compile-times", action="store_true")
    args = parser.parse_args(argv)
    print(f"{'model':<20} {'loopweave ms':>12} {'onnxrt ms':>10} {'ratio':>6}   compile cold / cached / load (s)")
    for name in args.models:
        model = getattr(model_zoo, name)()
        exe = lw.compile(lw.from_onnx(model), progress=False)
        c = compare_with_onnxruntime(model, exe, threads=args.threads, pairs=args.pairs, feed=_feed(name, model))
        times = "" if args.no_compile_times else "{:.1f} / {:.1f} / {:.2f}".format(*compile_times(name))
        print(f"{name:<20} {c.ours_s * 1e3:12.2f} {c.theirs_s * 1e3:10.2f} {c.ratio:6.2f}   {times}", flush=True)


if __name__ == "__main__":
    main()
