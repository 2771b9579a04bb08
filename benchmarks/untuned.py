"""Architectures nobody tuned for, against onnxruntime: how well the defaults carry to new architectures.

``python -m benchmarks.untuned [--threads 2] [--pairs 7] [--models regnet_y llama ...] [--small]``

Six torch-style networks written with ``OnnxBuilder`` (seeded weights, batch 1) that are not in the
zoo and were never tuned for: a ResNeXt stage (3 bottlenecks, 32 groups of 4 channels), a
RegNetY-400MF-shaped net (groups of 8 channels, squeeze-excitation), a YOLOv8-style backbone and
neck (SiLU, C2f splits and concats, SPPF max pools, nearest up-sampling), a wav2vec2-style 1-d conv
audio encoder, a LLaMA-style decoder (RMSNorm, rotary embeddings, a causal mask, SwiGLU) and a
MobileNetV3-Large-shaped net (hard-swish, hard-sigmoid squeeze-excitation); plus Inception-v3's 17x17
block with TensorFlow's average pool (padding excluded).  Prints loopweave's and onnxruntime's
latency (medians) and the ratio (median of per-pair onnxruntime / loopweave: > 1 means loopweave is
faster), after checking the outputs agree.  ``--small``: test-sized variants.
"""
from __future__ import annotations

import argparse

import numpy as np

import loopweave as lw
from loopweave.nn_ops.testing.onnx_builder import OnnxBuilder
from loopweave.nn_ops.testing.onnxruntime_peer import compare_with_onnxruntime


def _ints(b, values):
    return b.init("shape", np.array(values, np.int64))


def resnext_stage(size=56, cin=256, width=128, groups=32, blocks=3):
    """ResNeXt-50 32x4d's first stage: 1x1 -> grouped 3x3 (groups of width/groups channels) -> 1x1, residual."""
    b = OnnxBuilder(2)
    x = "input"
    for _ in range(blocks):
        y = b.relu(b.bn(b.conv(x, cin, width, 1, pad=0), width))
        y = b.relu(b.bn(b.conv(y, width, width, 3, groups=groups), width))
        x = b.relu(b.node("Add", [x, b.bn(b.conv(y, width, cin, 1, pad=0), cin)]))
    return b.model((1, cin, size, size), x, (1, cin, size, size), name="resnext_stage")


def regnet_y(size=224, stages=((48, 1), (104, 3), (208, 6), (440, 6)), group_width=8):
    """RegNetY-400MF's widths and depths: bottlenecks of ratio 1 with a grouped 3x3 and squeeze-excitation."""
    b = OnnxBuilder(8)
    x, cin = b.relu(b.bn(b.conv("input", 3, 32, 3, stride=2), 32)), 32
    for w, depth in stages:
        for i in range(depth):
            s = 2 if i == 0 else 1
            y = b.relu(b.bn(b.conv(x, cin, w, 1, pad=0), w))
            y = b.relu(b.bn(b.conv(y, w, w, 3, stride=s, groups=w // group_width), w))
            z = b.relu(b.conv(b.node("GlobalAveragePool", [y]), w, cin // 4, 1, pad=0, bias=True))
            y = b.node("Mul", [y, b.node("Sigmoid", [b.conv(z, cin // 4, w, 1, pad=0, bias=True)])])
            y = b.bn(b.conv(y, w, w, 1, pad=0), w)
            short = x if s == 1 and cin == w else b.bn(b.conv(x, cin, w, 1, stride=s, pad=0), w)
            x, cin = b.relu(b.node("Add", [y, short])), w
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model((1, 3, size, size), b.gemm(x, cin, 1000), (1, 1000), name="regnet_y")


def yolo(size=320, width=16):
    """A YOLOv8-n-style backbone and neck: conv-BN-SiLU, C2f (a Split, bottlenecks, a Concat of all),
    SPPF (three chained 5x5 max pools, concatenated), nearest 2x up-sampling and skip concats."""
    b = OnnxBuilder(4)

    def cbs(x, ci, co, k=1, s=1):
        return b.silu(b.bn(b.conv(x, ci, co, k, stride=s), co))

    def c2f(x, ci, co, n=1):
        a, c = b.node("Split", [cbs(x, ci, co), _ints(b, [co // 2, co // 2])], n_out=2, axis=1)
        parts = [a, c]
        for _ in range(n):
            c = cbs(cbs(c, co // 2, co // 2, 3), co // 2, co // 2, 3)
            parts.append(c)
        return cbs(b.node("Concat", parts, axis=1), co // 2 * (2 + n), co)

    w = [width * m for m in (1, 2, 4, 8, 16)]
    x = c2f(cbs(cbs("input", 3, w[0], 3, 2), w[0], w[1], 3, 2), w[1], w[1])
    p3 = c2f(cbs(x, w[1], w[2], 3, 2), w[2], w[2], 2)
    p4 = c2f(cbs(p3, w[2], w[3], 3, 2), w[3], w[3], 2)
    x = c2f(cbs(p4, w[3], w[4], 3, 2), w[4], w[4])
    y = cbs(x, w[4], w[3])
    pools = [y]
    for _ in range(3):
        pools.append(b.node("MaxPool", [pools[-1]], kernel_shape=[5, 5], strides=[1, 1], pads=[2, 2, 2, 2]))
    p5 = cbs(b.node("Concat", pools, axis=1), 4 * w[3], w[4])

    def up(t):
        return b.node("Resize", [t, "", b.const([1.0, 1.0, 2.0, 2.0])], mode="nearest")
    x = c2f(b.node("Concat", [up(p5), p4], axis=1), w[4] + w[3], w[3])
    x = c2f(b.node("Concat", [up(x), p3], axis=1), w[3] + w[2], w[2])
    out = b.conv(x, w[2], 84, 1, pad=0, bias=True)
    return b.model((1, 3, size, size), out, (1, 84, size // 8, size // 8), name="yolo")


def audio_encoder(samples=16000, channels=512):
    """wav2vec2's feature encoder: seven 1-d convs (kernel 10 stride 5, then 3 / 2 stride 2), the first
    instance-normed, all GELU."""
    b = OnnxBuilder(5)
    x = b.node("Unsqueeze", ["input", _ints(b, [1])])

    def conv1d(x, ci, co, k, s):
        return b.node("Conv", [x, b.init("w", b.weight((co, ci, k), np.sqrt(2.0 / (ci * k))))], kernel_shape=[k],
                      strides=[s])
    x = conv1d(x, 1, channels, 10, 5)
    x = b.gelu(b.node("InstanceNormalization", [x, b.init("g", np.ones(channels, np.float32)),
                                                b.init("beta", np.zeros(channels, np.float32))]))
    n = (samples - 10) // 5 + 1
    for k in (3, 3, 3, 3, 2, 2):
        x, n = b.gelu(conv1d(x, channels, channels, k, 2)), (n - k) // 2 + 1
    return b.model((1, samples), x, (1, channels, n), name="audio_encoder")


def llama(seq=128, hidden=512, heads=8, layers=4, ffn=1376):
    """A LLaMA-style decoder over a prompt: RMSNorm written out, rotary embeddings (Slice, Neg, Concat,
    Mul, Add with cos / sin tables), a causal mask added before the Softmax, SwiGLU feed-forward."""
    b = OnnxBuilder(6, opset=17)
    hd = hidden // heads

    def rms(x):
        mean = b.node("ReduceMean", [b.node("Mul", [x, x])], axes=[-1], keepdims=1)
        inv = b.node("Reciprocal", [b.node("Sqrt", [b.node("Add", [mean, b.const(1e-6)])])])
        return b.node("Mul", [b.node("Mul", [x, inv]), b.init("g", (1 + b.weight(hidden, 0.1)).astype(np.float32))])

    def linear(x, i, o):
        return b.node("MatMul", [x, b.init("w", b.weight((i, o), 1 / np.sqrt(i)))])

    angle = np.arange(seq)[:, None] * (10000.0 ** (-np.arange(0, hd, 2) / hd))[None, :]
    angle = np.concatenate([angle, angle], -1)
    cos, sin = b.init("cos", np.cos(angle).astype(np.float32)), b.init("sin", np.sin(angle).astype(np.float32))
    mask = b.init("mask", np.triu(np.full((seq, seq), -1e9, np.float32), 1))

    def heads_of(t):
        return b.node("Transpose", [b.node("Reshape", [t, _ints(b, [1, seq, heads, hd])])], perm=[0, 2, 1, 3])

    def rotary(t):
        first = b.node("Slice", [t, _ints(b, [0]), _ints(b, [hd // 2]), _ints(b, [3])])
        second = b.node("Slice", [t, _ints(b, [hd // 2]), _ints(b, [hd]), _ints(b, [3])])
        rotated = b.node("Concat", [b.node("Neg", [second]), first], axis=3)
        return b.node("Add", [b.node("Mul", [t, cos]), b.node("Mul", [rotated, sin])])

    x = "input"
    for _ in range(layers):
        h = rms(x)
        q, k = (rotary(heads_of(linear(h, hidden, hidden))) for _ in range(2))
        v = heads_of(linear(h, hidden, hidden))
        scores = b.node("Mul", [b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])]),
                                b.const(1 / np.sqrt(hd))])
        attn = b.node("Softmax", [b.node("Add", [scores, mask])], axis=-1)
        o = b.node("Transpose", [b.node("MatMul", [attn, v])], perm=[0, 2, 1, 3])
        x = b.node("Add", [x, linear(b.node("Reshape", [o, _ints(b, [1, seq, hidden])]), hidden, hidden)])
        h = rms(x)
        gate = linear(h, hidden, ffn)
        gate = b.node("Mul", [gate, b.node("Sigmoid", [gate])])
        x = b.node("Add", [x, linear(b.node("Mul", [gate, linear(h, hidden, ffn)]), ffn, hidden)])
    return b.model((1, seq, hidden), rms(x), (1, seq, hidden), name="llama")


#: MobileNetV3-Large's blocks: (kernel, expanded channels, out channels, squeeze-excitation, activation, stride)
_MOBILENET_V3 = ((3, 16, 16, False, "RE", 1), (3, 64, 24, False, "RE", 2), (3, 72, 24, False, "RE", 1),
                 (5, 72, 40, True, "RE", 2), (5, 120, 40, True, "RE", 1), (5, 120, 40, True, "RE", 1),
                 (3, 240, 80, False, "HS", 2), (3, 200, 80, False, "HS", 1), (3, 184, 80, False, "HS", 1),
                 (3, 184, 80, False, "HS", 1), (3, 480, 112, True, "HS", 1), (3, 672, 112, True, "HS", 1),
                 (5, 672, 160, True, "HS", 2), (5, 960, 160, True, "HS", 1), (5, 960, 160, True, "HS", 1))


def mobilenet_v3(size=224, blocks=_MOBILENET_V3):
    """MobileNetV3-Large's shape: inverted residuals with ReLU or HardSwish, HardSigmoid squeeze-excitation."""
    b = OnnxBuilder(7, opset=14)

    def hswish(x):
        return b.node("HardSwish", [x])
    x, cin = hswish(b.bn(b.conv("input", 3, 16, 3, stride=2), 16)), 16
    for k, hidden, out, se, act, s in blocks:
        activate = b.relu if act == "RE" else hswish
        y = x if hidden == cin else activate(b.bn(b.conv(x, cin, hidden, 1, pad=0), hidden))
        y = activate(b.bn(b.conv(y, hidden, hidden, k, stride=s, groups=hidden), hidden))
        if se:
            squeeze = max(8, (hidden // 4 + 4) // 8 * 8)
            z = b.relu(b.conv(b.node("GlobalAveragePool", [y]), hidden, squeeze, 1, pad=0, bias=True))
            z = b.node("HardSigmoid", [b.conv(z, squeeze, hidden, 1, pad=0, bias=True)], alpha=1 / 6, beta=0.5)
            y = b.node("Mul", [y, z])
        y = b.bn(b.conv(y, hidden, out, 1, pad=0), out)
        x, cin = (b.node("Add", [x, y]) if s == 1 and cin == out else y), out
    x = hswish(b.bn(b.conv(x, cin, 6 * cin, 1, pad=0), 6 * cin))
    x = hswish(b.gemm(b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1), 6 * cin, 1280))
    return b.model((1, 3, size, size), b.gemm(x, 1280, 1000), (1, 1000), name="mobilenet_v3")


def inception_block_c(size=17, cin=768, c7=160, blocks=2):
    """Inception-v3's 17x17 block (1x7 / 7x1 factorized convs) as TensorFlow's models have it: the
    branch's 3x3 average pool excludes the padding (torch's default counts it)."""
    b = OnnxBuilder(3)

    def conv(x, ci, co, kh, kw):
        w = b.weight((co, ci, kh, kw), np.sqrt(2.0 / (ci * kh * kw)))
        return b.relu(b.bn(b.node("Conv", [x, b.init("w", w)], kernel_shape=[kh, kw],
                                  pads=[kh // 2, kw // 2, kh // 2, kw // 2]), co))
    x = "input"
    for _ in range(blocks):
        b7 = conv(conv(conv(x, cin, c7, 1, 1), c7, c7, 1, 7), c7, 192, 7, 1)
        d = conv(x, cin, c7, 1, 1)
        for k, (kh, kw) in enumerate(((7, 1), (1, 7), (7, 1), (1, 7))):
            d = conv(d, c7, c7 if k < 3 else 192, kh, kw)
        pool = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1], count_include_pad=0)
        x = b.node("Concat", [conv(x, cin, 192, 1, 1), b7, d, conv(pool, cin, 192, 1, 1)], axis=1)
        cin = 768
    return b.model((1, cin, size, size), x, (1, 768, size, size), name="inception_block_c")


MODELS = {"resnext_stage": resnext_stage, "regnet_y": regnet_y, "yolo": yolo, "audio_encoder": audio_encoder,
          "llama": llama, "mobilenet_v3": mobilenet_v3, "inception_block_c": inception_block_c}
#: test-sized keyword arguments of each
SMALL = {"resnext_stage": dict(size=14, cin=64, width=32, groups=8, blocks=1),
         "regnet_y": dict(size=64, stages=((24, 1), (48, 1))),
         "yolo": dict(size=64, width=8),
         "audio_encoder": dict(samples=1600, channels=32),
         "llama": dict(seq=16, hidden=64, heads=4, layers=1, ffn=96),
         "mobilenet_v3": dict(size=64, blocks=_MOBILENET_V3[:4]),
         "inception_block_c": dict(size=9, cin=768, c7=32, blocks=1)}


def main(argv=None) -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--models", nargs="+", default=list(MODELS), choices=list(MODELS))
    parser.add_argument("--small", action="store_true", help="the test-sized variants")
    args = parser.parse_args(argv)
    print(f"{args.threads} thread(s); ratio = onnxruntime / loopweave (median of {args.pairs} pairs)")
    print(f"{'model':<20} {'loopweave ms':>12} {'onnxrt ms':>10} {'ratio':>6}")
    for name in args.models:
        model = MODELS[name](**(SMALL[name] if args.small else {}))
        exe = lw.compile(lw.from_onnx(model), progress=False)
        c = compare_with_onnxruntime(model, exe, threads=args.threads, pairs=args.pairs)   # random_feed(exe)
        print(f"{name:<20} {c.ours_s * 1e3:12.3f} {c.theirs_s * 1e3:10.3f} {c.ratio:6.2f}", flush=True)


if __name__ == "__main__":
    main()
