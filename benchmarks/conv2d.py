"""conv2d vs onnxruntime, per layer of ResNet-18 and MobileNetV2.

``python -m benchmarks.conv2d [--threads 1|2] [--quick] [--only SUBSTRING] [--weights constant|input]
[--target "llvm -mcpu=x86-64-v3"] [--cpu-time] [--lone-1x1 both]`` (``--target``: code for another level this
machine runs, its share of the FMA peak at that level's width; ``--cpu-time``: one thread, both sides and the
peak timed by the CPU time they got, so a machine loaded by other processes does not lower the shares;
``--lone-1x1 both``: each stride-1 1x1 layer plain (NCHW pixels matmul) against blocked with its
from_blocked, interleaved, and the form ``lone_1x1_stays_plain`` picks, instead of onnxruntime)

``--weights constant`` (the default, the headline): every distinct convolution of ResNet-18
and MobileNetV2 (batch 1, 224x224) as a one-node ONNX Conv with its weights and bias as
initializers, through ``lw.from_onnx`` -> ``lw.compile`` (the network compiler's blocked
layout, packed weights and fused epilogue), against onnxruntime on the same model (which
then pre-packs the weights for its NCHWc kernels): what a user sees.

``--weights input``: the DSL kernel (``nn_ops.conv2d`` + its default schedule) against a
one-node onnxruntime model whose weights are a run-time input, exactly as that kernel
receives them (onnxruntime cannot pre-pack them then, so this flatters loopweave).

Both check that the outputs match, time interleaved and print loopweave ms, onnxruntime
ms and the ratio (median of per-pair onnxruntime time / loopweave time; > 1 means
loopweave is faster), then the geometric mean and minimum.
"""
from __future__ import annotations

import argparse
import math
import time

import numpy as np

import loopweave as lw
from loopweave import nn_ops

from loopweave.target import resolve_target

from .compare import add_target_argument, interleaved, run_for_target, set_threads
from .peak import cpu_time_fma_peak, fma_peak

# (label, C, OC, H(=W), kernel, stride, pad, groups)
RESNET18 = [
    ("r18 stem 7x7/2 3->64 @224", 3, 64, 224, 7, 2, 3, 1),
    ("r18 3x3/1 64->64 @56", 64, 64, 56, 3, 1, 1, 1),
    ("r18 3x3/2 64->128 @56", 64, 128, 56, 3, 2, 1, 1),
    ("r18 1x1/2 64->128 @56", 64, 128, 56, 1, 2, 0, 1),
    ("r18 3x3/1 128->128 @28", 128, 128, 28, 3, 1, 1, 1),
    ("r18 3x3/2 128->256 @28", 128, 256, 28, 3, 2, 1, 1),
    ("r18 1x1/2 128->256 @28", 128, 256, 28, 1, 2, 0, 1),
    ("r18 3x3/1 256->256 @14", 256, 256, 14, 3, 1, 1, 1),
    ("r18 3x3/2 256->512 @14", 256, 512, 14, 3, 2, 1, 1),
    ("r18 1x1/2 256->512 @14", 256, 512, 14, 1, 2, 0, 1),
    ("r18 3x3/1 512->512 @7", 512, 512, 7, 3, 1, 1, 1),
]


def _mobilenet_v2():
    layers = [("mv2 stem 3x3/2 3->32 @224", 3, 32, 224, 3, 2, 1, 1)]
    seen = set()

    def add(label, *shape):
        if shape not in seen:
            seen.add(shape)
            layers.append((label,) + shape)

    c, hw = 32, 112
    for t, oc, n, s in [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1),
                        (6, 160, 3, 2), (6, 320, 1, 1)]:
        for k in range(n):
            stride = s if k == 0 else 1
            hidden = c * t
            if t != 1:
                add(f"mv2 1x1 {c}->{hidden} @{hw}", c, hidden, hw, 1, 1, 0, 1)
            add(f"mv2 dw3x3/{stride} {hidden} @{hw}", hidden, hidden, hw, 3, stride, 1, hidden)
            hw = hw // stride
            add(f"mv2 1x1 {hidden}->{oc} @{hw}", hidden, oc, hw, 1, 1, 0, 1)
            c = oc
    add(f"mv2 1x1 {c}->1280 @{hw}", c, 1280, hw, 1, 1, 0, 1)
    return layers


MOBILENET_V2 = _mobilenet_v2()
LAYERS = RESNET18 + MOBILENET_V2


def build_conv(c, oc, hw, k, stride, pad, groups, n=1):
    X = lw.placeholder((n, c, hw, hw), name="X")
    W = lw.placeholder((oc, c // groups, k, k), name="W")
    Y = nn_ops.conv2d(X, W, stride=stride, padding=pad, groups=groups)
    f = lw.build(nn_ops.schedule(Y), [X, W, Y])
    return f, tuple(int(d.value) for d in Y.shape)


def ort_conv(x_shape, w_shape, stride, pad, groups, threads):
    """A one-node onnxruntime Conv whose weight is a graph input (not an initializer)."""
    import onnx
    import onnxruntime as ort
    from onnx import TensorProto, helper
    X = helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))
    W = helper.make_tensor_value_info("W", TensorProto.FLOAT, list(w_shape))
    Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    node = helper.make_node("Conv", ["X", "W"], ["Y"], strides=[stride, stride], pads=[pad] * 4, group=groups,
                            kernel_shape=list(w_shape[2:]), dilations=[1, 1])
    model = helper.make_model(helper.make_graph([node], "conv", [X, W], [Y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 8)
    so = ort.SessionOptions()
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    so.intra_op_num_threads = threads
    so.inter_op_num_threads = 1
    return ort.InferenceSession(model.SerializeToString(), so, providers=["CPUExecutionProvider"])


def conv_model(c, oc, hw, k, stride, pad, groups, seed=0):
    """A one-node Conv model with constant weights and bias (initializers)."""
    from onnx import TensorProto, helper, numpy_helper
    rng = np.random.default_rng(seed)
    w = (rng.standard_normal((oc, c // groups, k, k)) / math.sqrt(c // groups * k * k)).astype(np.float32)
    b = rng.standard_normal(oc).astype(np.float32)
    X = helper.make_tensor_value_info("X", TensorProto.FLOAT, [1, c, hw, hw])
    out = (hw + 2 * pad - k) // stride + 1
    Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, [1, oc, out, out])
    node = helper.make_node("Conv", ["X", "W", "B"], ["Y"], strides=[stride, stride], pads=[pad] * 4, group=groups,
                            kernel_shape=[k, k], dilations=[1, 1])
    graph = helper.make_graph([node], "conv", [X], [Y], [numpy_helper.from_array(w, "W"), numpy_helper.from_array(b, "B")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 8)
    return model


def constant_weight_row(layer, threads: int, pairs: int, clock=None):
    from loopweave.nn_ops.testing.onnxruntime_peer import compare_with_onnxruntime
    label, c, oc, hw, k, stride, pad, groups = layer
    model = conv_model(c, oc, hw, k, stride, pad, groups)
    exe = lw.compile(lw.from_onnx(model), progress=False)
    x = np.random.default_rng(1).standard_normal((1, c, hw, hw), dtype=np.float32)
    return compare_with_onnxruntime(model, exe, threads=threads, pairs=pairs, feed={"X": x}, clock=clock)


def lone_1x1_forms_row(layer, pairs: int, clock, peak: float, flops: int) -> str:
    """A lone 1x1 layer compiled in both forms the layout choice weighs (``lone_1x1_stays_plain``
    forced either way), timed against each other: shares of the peak, time plain / blocked, the pick."""
    import importlib
    choice = importlib.import_module("loopweave.nn_ops.network.passes.choose_conv_layout")
    label, c, oc, hw, k, stride, pad, groups = layer
    model = conv_model(c, oc, hw, k, stride, pad, groups)
    decide = choice.lone_1x1_stays_plain
    picks_plain = decide(c, oc, (1, oc, hw, hw), (1, 1), resolve_target("llvm"))
    exes = []
    try:
        for plain in (True, False):
            choice.lone_1x1_stays_plain = lambda *args, plain=plain: plain
            exes.append(lw.compile(lw.from_onnx(model), progress=False))
    finally:
        choice.lone_1x1_stays_plain = decide
    feed = {"X": np.random.default_rng(1).standard_normal((1, c, hw, hw), dtype=np.float32)}
    np.testing.assert_allclose(exes[0].run(feed)[0], exes[1].run(feed)[0], rtol=1e-4, atol=1e-4, err_msg=label)
    cmp = interleaved(lambda: exes[0].run(feed), lambda: exes[1].run(feed), pairs=pairs, clock=clock)
    return (f"{label:<34} plain {flops / cmp.ours_s / peak:5.0%} blocked {flops / cmp.theirs_s / peak:5.0%} "
            f"plain/blocked time {1 / cmp.ratio:5.2f} picks {'plain' if picks_plain else 'blocked'}")


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=1, choices=[1, 2])
    parser.add_argument("--quick", action="store_true", help="fewer timing pairs")
    parser.add_argument("--only", default="", help="run only layers whose label contains this")
    parser.add_argument("--weights", default="constant", choices=["constant", "input"],
                        help="constant: one-node ONNX models through lw.compile (the headline); input: the DSL "
                             "kernel against onnxruntime fed its weights at run time")
    parser.add_argument("--lone-1x1", choices=["both"], default=None,
                        help="both: time each stride-1 1x1 layer plain against blocked (the layout choice's two forms)")
    parser.add_argument("--cpu-time", action="store_true",
                        help="time by CPU time (time.thread_time) on one thread: shares a loaded machine does not lower")
    add_target_argument(parser)
    args = parser.parse_args(argv)
    if args.cpu_time and args.threads != 1:
        parser.error("--cpu-time times one thread's CPU time; run it with --threads 1")
    run_for_target(parser, args, _run)


def _run(args) -> None:
    set_threads(args.threads)
    rng = np.random.default_rng(0)
    pairs = 5 if args.quick else 11
    peak = cpu_time_fma_peak() if args.cpu_time else fma_peak(args.threads)
    clock = time.thread_time if args.cpu_time else time.perf_counter
    print(f"conv2d, batch 1, {args.threads} thread(s), weights {args.weights}, {resolve_target('llvm')}; ratio = "
          f"onnxruntime time / loopweave time (> 1: loopweave faster); peak = share of this machine's fp32 FMA "
          f"peak at that width ({peak / 1e9:.0f} GFLOPS, benchmarks.peak), Winograd layers counted as direct"
          + ("; times and peak in CPU time" if args.cpu_time else ""))
    if not args.lone_1x1:
        print(f"{'layer':<34} {'lw ms':>9} {'ort ms':>9} {'ratio':>7} {'peak':>6}")
    ratios = []
    for layer in LAYERS:
        label, c, oc, hw, k, stride, pad, groups = layer
        if args.only and args.only not in label:
            continue
        flops = 2 * oc * (c // groups) * k * k * ((hw + 2 * pad - k) // stride + 1) ** 2
        if args.lone_1x1:
            if k == 1 and stride == 1 and groups == 1:
                print(lone_1x1_forms_row(layer, pairs, clock, peak, flops), flush=True)
            continue
        if args.weights == "constant":
            cmp = constant_weight_row(layer, args.threads, pairs, clock)
            print(cmp.row(label) + f" {flops / cmp.ours_s / peak:6.0%}", flush=True)
            ratios.append(cmp.ratio)
            continue
        f, y_shape = build_conv(c, oc, hw, k, stride, pad, groups)
        x = rng.standard_normal((1, c, hw, hw), dtype=np.float32)
        w = rng.standard_normal((oc, c // groups, k, k), dtype=np.float32)
        y = np.empty(y_shape, np.float32)
        sess = ort_conv(x.shape, w.shape, stride, pad, groups, args.threads)
        feeds = {"X": x, "W": w}
        f(x, w, y)
        expected = sess.run(None, feeds)[0]
        scale = math.sqrt((c // groups) * k * k)
        np.testing.assert_allclose(y, expected, rtol=1e-3, atol=1e-4 * scale, err_msg=label)
        time.sleep(0.2)
        cmp = interleaved(lambda: f(x, w, y), lambda: sess.run(None, feeds), pairs=pairs, clock=clock)
        print(cmp.row(label) + f" {flops / cmp.ours_s / peak:6.0%}", flush=True)
        ratios.append(cmp.ratio)
    if ratios:
        geo = math.exp(sum(math.log(r) for r in ratios) / len(ratios))
        print(f"{'geometric mean':<34} {'':>9} {'':>9} {geo:7.2f}")
        print(f"{'minimum':<34} {'':>9} {'':>9} {min(ratios):7.2f}")


if __name__ == "__main__":
    main()
