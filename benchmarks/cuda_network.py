"""ResNet-18 on the GPU: ``lw.compile(net, target="cuda")`` vs PyTorch eager (torchvision's resnet18).

``python -m benchmarks.cuda_network [--batches 1 32] [--repeat 20]`` compiles the bundled
ResNet-18 (seeded weights) for the GPU at each batch size, checks it against onnxruntime
on the CPU, then prints the median latency of loopweave's kernels (CUDA events) and of
torchvision's ResNet-18 in eager mode (same shapes, random weights; cudnn, TF32 off),
each synchronised, and their ratio.  Exits with a message when there is no GPU.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import loopweave as lw
from loopweave.nn_ops.testing.model_zoo import resnet18


def torch_latency(batch: int, repeat: int):
    try:
        import torch
        import torchvision
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = False
    torch.backends.cudnn.allow_tf32 = False
    net = torchvision.models.resnet18().cuda().eval()
    x = torch.rand(batch, 3, 224, 224, device="cuda")
    samples = []
    with torch.no_grad():
        for _ in range(3):
            net(x)
        torch.cuda.synchronize()
        for _ in range(repeat):
            t0 = time.perf_counter()
            net(x)
            torch.cuda.synchronize()
            samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeat", type=int, default=20)
    args = parser.parse_args(argv)
    from loopweave.backends.cuda.driver import get_driver
    try:
        drv = get_driver()
    except lw.BuildError as exc:
        print(f"cuda_network: {exc}", file=sys.stderr)
        return 2
    print(f"device: {drv.name()} ({drv.arch})")
    print(f"{'model':<22} {'loopweave ms':>12} {'torch ms':>9} {'ratio':>6}")
    for batch in args.batches:
        model = resnet18(batch=batch)
        exe = lw.compile(lw.from_onnx(model), target="cuda", progress=False)
        feed = {n: np.random.default_rng(0).standard_normal(s).astype(d) for n, s, d in exe.inputs}
        import onnxruntime as ort
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
        for a, b in zip(exe.run(feed), want):
            np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
        ours = exe.time(feed, repeat=args.repeat)
        theirs = torch_latency(batch, args.repeat)
        ratio = f"{theirs / ours:6.2f}" if theirs else "     -"
        print(f"resnet18 batch {batch:<7} {ours * 1e3:12.2f} {theirs * 1e3 if theirs else float('nan'):9.2f} {ratio}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
