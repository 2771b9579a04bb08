"""Quantized networks against onnxruntime: the zoo's models through onnxruntime's own quantizers,
``quantize_dynamic`` (int8 weights; DynamicQuantizeLinear, MatMulInteger and ConvInteger) or, with
``--static``, ``quantize_static`` in the QDQ format (uint8 activations, int8 weights per channel,
calibrated on a few random inputs), interleaved.

``python -m benchmarks.quantized [--static [--qoperator]] [--threads 2] [--pairs 7] [--models resnet18 gpt2 ...]
[--weights int8|uint8] [--small] [--target "llvm -mcpu=x86-64-v3"] [--profile] [--cpu-time]``

``--profile`` also prints where each build's time goes: the kernels' medians (``exe.profile``, in run
order) summed by kernel name, largest first.  ``--cpu-time`` (with ``--threads 1``): every time is the CPU
time the timing thread got (``time.thread_time``), which a loaded machine does not inflate; two-thread wall
times there swung by a third between runs of the same code.

It also prints loopweave's own float build of the model against the quantized one (``fp32 / int8``,
interleaved: > 1 means the quantized model runs faster).

Prints per model loopweave's and onnxruntime's latency (medians), the ratio (median of per-pair
onnxruntime / loopweave: > 1 means loopweave is faster), and how far apart the two outputs are: the
largest difference over the output's largest value, and for classifiers whether the top class
agrees.  The two are not expected to be equal: each integer product is exact in both (the test
suite checks ours op by op), but a float rounding anywhere upstream of a DynamicQuantizeLinear (a
layer norm, a folded batch norm) can move its scale and flip quantized values.
"""
from __future__ import annotations

import argparse
import logging
import os
import tempfile
import time

import numpy as np

import loopweave as lw
from loopweave.nn_ops.testing import model_zoo
from loopweave.nn_ops.testing.onnxruntime_peer import compare_with_onnxruntime, onnxruntime_session
from loopweave.backends.timing import interleaved
from loopweave.nn_ops.testing.qdq_models import static_qdq

from .network import _feed

MODELS = ("resnet18", "mobilenet_v2", "squeezenet1_1", "transformer_encoder", "vit_tiny", "gpt2")
CLASSIFIERS = ("resnet18", "mobilenet_v2", "small_cnn", "squeezenet1_1", "vit_tiny", "efficientnet_lite", "convnext",
               "densenet", "mlp_mixer")


def quantized(model, weights: str = "int8"):
    """``model`` as ``onnxruntime.quantization.quantize_dynamic`` writes it."""
    import onnx
    from onnxruntime.quantization import QuantType, quantize_dynamic
    logging.getLogger().setLevel(logging.ERROR)     # its advice to pre-process the model first
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "model.onnx"), os.path.join(tmp, "quantized.onnx")
        onnx.save(model, src)
        quantize_dynamic(src, dst, weight_type=QuantType.QInt8 if weights == "int8" else QuantType.QUInt8)
        return onnx.load(dst)


def cpu_seconds(fn) -> float:
    """The CPU time this thread spends in ``fn()`` (a kernel call on one thread)."""
    t0 = time.thread_time()
    fn()
    return time.thread_time() - t0


def print_profile(label: str, exe, feed, top: int = 8, cpu_time: bool = False) -> None:
    """The kernels' median times in run order (weights read from memory, as a run reads them), summed by
    kernel name: the int8 build's hot spots beside the float one's."""
    rows = exe.profile(feed, repeat=5, in_order=True, clock=cpu_seconds if cpu_time else None)
    by_name = {}
    for name, seconds in rows:
        count, total = by_name.get(name, (0, 0.0))
        by_name[name] = (count + 1, total + seconds)
    print(f"  {label}: {len(rows)} kernel calls, {sum(t for _, t in rows) * 1e3:.2f} ms in all")
    for name, (count, total) in sorted(by_name.items(), key=lambda item: -item[1][1])[:top]:
        print(f"    {total * 1e3:8.3f} ms {count:4d}x  {name}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=sorted(model_zoo.NAMES))
    parser.add_argument("--weights", choices=("int8", "uint8"), default="int8")
    parser.add_argument("--small", action="store_true", help="the models' test-sized variants")
    parser.add_argument("--static", action="store_true", help="quantize_static in the QDQ format")
    parser.add_argument("--qoperator", action="store_true", help="with --static: the QOperator format instead")
    parser.add_argument("--target", default="llvm", help="loopweave's target (e.g. 'llvm -mcpu=x86-64-v3')")
    parser.add_argument("--profile", action="store_true", help="also print each build's time per kernel name")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by CPU time (time.thread_time) on one thread: what a loaded machine does not inflate")
    args = parser.parse_args(argv)
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time times one thread's CPU time; run it with --threads 1")
    clock = time.thread_time if args.cpu_time else time.perf_counter
    how = f"quantize_static ({'QOperator' if args.qoperator else 'QDQ'}, per channel)" if args.static else f"quantize_dynamic ({args.weights} weights)"
    print(f"{how}, {args.threads} thread(s), loopweave target {args.target}; ratio = onnxruntime / loopweave"
          + ("; times in CPU time" if args.cpu_time else ""))
    print(f"{'model':<20} {'loopweave ms':>12} {'onnxrt ms':>10} {'ratio':>6}   {'max diff / scale':>16}  top-1"
          "   fp32 / int8")
    for name in args.models:
        float_model = getattr(model_zoo, name)(**(model_zoo.SMALL.get(name, {}) if args.small else {}))
        feed = _feed(name, float_model) or {i.name: np.random.default_rng(0).standard_normal(
            [d.dim_value for d in i.type.tensor_type.shape.dim]).astype(np.float32) for i in float_model.graph.input}
        if args.static:
            rng = np.random.default_rng(1)
            samples = [{k: rng.standard_normal(v.shape).astype(v.dtype) for k, v in feed.items()} for _ in range(4)]
            model = static_qdq(float_model, samples, qoperator=args.qoperator)
        else:
            model = quantized(float_model, args.weights)
        try:
            graph = lw.from_onnx(model)
        except lw.OnnxImportError as exc:   # (quantize_dynamic writes an LSTM as com.microsoft.DynamicQuantizeLSTM)
            print(f"{name:<20} not imported: {str(exc).splitlines()[-1].strip()}", flush=True)
            continue
        exe = lw.compile(graph, target=args.target, progress=False)
        ours, theirs = exe.run(feed)[0], onnxruntime_session(model, args.threads).run(None, feed)[0]
        apart = float(np.abs(ours - theirs).max()) / max(1e-12, float(np.abs(theirs).max()))
        top1 = "agrees" if np.array_equal(ours.argmax(-1), theirs.argmax(-1)) else "DIFFERS"
        c = compare_with_onnxruntime(model, exe, threads=args.threads, pairs=args.pairs, feed=feed, check=False,
                                     clock=clock)
        fp32 = lw.compile(lw.from_onnx(float_model), target=args.target, progress=False)
        own = f"   {interleaved(lambda: exe.run(feed), lambda: fp32.run(feed), pairs=args.pairs, clock=clock).ratio:13.2f}"
        print(f"{name:<20} {c.ours_s * 1e3:12.2f} {c.theirs_s * 1e3:10.2f} {c.ratio:6.2f}   {apart:16.4f}  "
              f"{top1 if name in CLASSIFIERS else '-'}{own}", flush=True)
        if args.profile:
            print_profile("int8", exe, feed, cpu_time=args.cpu_time)
            print_profile("fp32", fp32, feed, cpu_time=args.cpu_time)


if __name__ == "__main__":
    main()
