"""Networks on the GPU: ``lw.compile(net, target="cuda")`` vs PyTorch eager.

``python -m benchmarks.cuda_network [--models resnet18 mobilenet_v2 transformer_encoder]
[--batches 1 32] [--repeat 20] [--profile 8] [--compile-times]`` compiles each bundled model (seeded weights)
for the GPU at each batch size, checks it against onnxruntime on the CPU, then prints the
latency of a loopweave run (input already on the device, ``exe.run(feed, device_outputs=True)``:
the captured graph and the copies on the device, synchronised) and of the same architecture in
PyTorch eager (torchvision's resnet18 / mobilenet_v2; ``nn.TransformerEncoder`` with the zoo
encoder's sizes, post-LayerNorm, GELU; input on the device, synchronised), same shapes, random
weights, cudnn/cuBLAS with TF32 off (on with ``--precision tf32``, against
``lw.compile(..., precision="tf32")``; ``--precision fp16``: under ``torch.autocast`` to float16),
timed alternately (``backends.timing.interleaved``: each
sample ~50 ms of back-to-back calls, which also keeps the GPU's clocks up), with the ratio the
median of per-pair ratios (> 1: loopweave faster); then loopweave's kernels alone (CUDA events).
``--profile N`` also prints each network's N slowest kernel calls.  Exits with a message when there is no GPU.
"""
from __future__ import annotations

import argparse
import sys
import time

import numpy as np

import loopweave as lw
from loopweave.nn_ops.testing import model_zoo

_COMPILE_SCRIPT = """
import sys, time
import loopweave as lw
from loopweave.nn_ops.testing import model_zoo
model = getattr(model_zoo, sys.argv[1])(batch=int(sys.argv[2]))
t0 = time.perf_counter()
lw.compile(lw.from_onnx(model), target="cuda", progress=False)
print(f"{time.perf_counter() - t0:.3f}")
"""


def compile_times(name: str, batch: int):
    """(cold, cached) seconds of ``lw.compile(..., target="cuda")``, each in a fresh process: an
    empty kernel cache, then the cache the first one filled."""
    import tempfile
    from .network import _subprocess_seconds
    with tempfile.TemporaryDirectory() as tmp:
        cold = _subprocess_seconds(_COMPILE_SCRIPT, [name, str(batch)], tmp)
        cached = _subprocess_seconds(_COMPILE_SCRIPT, [name, str(batch)], tmp)
    return cold, cached


ENCODER = dict(seq=128, hidden=256, heads=4, layers=4, ffn=1024)   # model_zoo.transformer_encoder's defaults


def torch_model(name: str, batch: int, precision: str = "fp32"):
    """(module, input) of ``name`` in PyTorch eager on the GPU (TF32 on where ``precision`` is "tf32"),
    or None without torch/GPU."""
    try:
        import torch
        import torchvision
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    torch.backends.cuda.matmul.allow_tf32 = precision == "tf32"
    torch.backends.cudnn.allow_tf32 = precision == "tf32"
    if name == "transformer_encoder":
        layer = torch.nn.TransformerEncoderLayer(ENCODER["hidden"], ENCODER["heads"], ENCODER["ffn"], dropout=0.0,
                                                 activation="gelu", batch_first=True, norm_first=False)
        net = torch.nn.TransformerEncoder(layer, ENCODER["layers"], enable_nested_tensor=False)
        x = torch.rand(batch, ENCODER["seq"], ENCODER["hidden"], device="cuda")
    else:
        net = getattr(torchvision.models, name)()
        x = torch.rand(batch, 3, 224, 224, device="cuda")
    return net.cuda().eval(), x


REDUCED_PRECISION_TOLERANCE = 1e-2   # tf32/fp16 outputs: ||ours - fp32|| / ||fp32|| at most this


def relative_error(ours, want) -> float:
    """||ours - want|| / ||want||, the error measure of reduced-precision outputs (an elementwise
    tolerance fails on the few logits near zero that any rounding moves by a large fraction)."""
    want = np.asarray(want, dtype=np.float64)
    return float(np.linalg.norm(np.asarray(ours, dtype=np.float64) - want) / max(np.linalg.norm(want), 1e-30))


def torch_reduced_precision_error(name: str, batch: int, precision: str) -> float:
    """PyTorch's own relative error at ``precision`` against its fp32, on its ``name`` and a random
    input (nan without torch/GPU): what that rounding costs a network of this shape."""
    made = torch_model(name, batch, "fp32")
    if made is None:
        return float("nan")
    import torch
    net, x = made
    with torch.no_grad():
        exact = net(x).float().cpu().numpy()
        torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = precision == "tf32"
        with torch.autocast("cuda", dtype=torch.float16, enabled=precision == "fp16"):
            rounded = net(x).float().cpu().numpy()
    torch.backends.cuda.matmul.allow_tf32 = torch.backends.cudnn.allow_tf32 = False
    return relative_error(rounded, exact)


def torch_runner(name: str, batch: int, precision: str = "fp32"):
    """A call of ``name`` in PyTorch eager, synchronised (under autocast to float16 for "fp16"), or
    None without torch/GPU."""
    made = torch_model(name, batch, precision)
    if made is None:
        return None
    import torch
    net, x = made

    def run():
        with torch.no_grad(), torch.autocast("cuda", dtype=torch.float16, enabled=precision == "fp16"):
            net(x)
        torch.cuda.synchronize()
    return run


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["resnet18"],
                        choices=["resnet18", "mobilenet_v2", "transformer_encoder"])
    parser.add_argument("--batches", type=int, nargs="+", default=[1, 32])
    parser.add_argument("--repeat", type=int, default=15, help="interleaved pairs")
    parser.add_argument("--profile", type=int, default=0, metavar="N", help="print the N slowest kernel calls")
    parser.add_argument("--compile-times", action="store_true",
                        help="only time compiles: cold (empty cache) and cached, fresh processes, per model and batch")
    parser.add_argument("--precision", choices=["fp32", "tf32", "fp16"], default="fp32",
                        help="lw.compile(..., precision=P) against PyTorch with TF32 on (tf32) or under "
                             "autocast to float16 (fp16)")
    args = parser.parse_args(argv)
    from loopweave.backends.cuda.driver import get_driver
    try:
        drv = get_driver()
    except lw.BuildError as exc:
        print(f"cuda_network: {exc}", file=sys.stderr)
        return 2
    print(f"device: {drv.name()} ({drv.arch})")
    if args.compile_times:
        for name in args.models:
            for batch in args.batches:
                cold, cached = compile_times(name, batch)
                print(f"{name} b{batch}: compile cold {cold:.1f} s, cached {cached:.2f} s", flush=True)
        return 0
    rows, failures = [], 0
    for name in args.models:
        for batch in args.batches:
            model = getattr(model_zoo, name)(batch=batch)
            t0 = time.perf_counter()
            exe = lw.compile(lw.from_onnx(model), target="cuda", progress=False, precision=args.precision)
            compile_s = time.perf_counter() - t0
            feed = {n: np.random.default_rng(0).standard_normal(s).astype(d) for n, s, d in exe.inputs}
            import onnxruntime as ort
            want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
            try:
                got = exe.run(feed)
                if args.precision == "fp32":
                    for a, b in zip(got, want):
                        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
                else:       # tf32 / fp16: 10 mantissa bits per product, compounding over the layers
                    error = max(relative_error(a, b) for a, b in zip(got, want))
                    print(f"{name} batch {batch}: {args.precision} output's relative error against onnxruntime's "
                          f"fp32: {error:.2e} (PyTorch's {args.precision} against its fp32 on its own "
                          f"{name}: {torch_reduced_precision_error(name, batch, args.precision):.2e})")
                    assert error <= REDUCED_PRECISION_TOLERANCE, \
                        f"relative error {error:.2e} over {REDUCED_PRECISION_TOLERANCE:.0e}"
            except AssertionError as exc:      # report it, not timed, and go on with the other models
                print(f"{name} batch {batch}: WRONG RESULT against onnxruntime, not timed\n{str(exc)[:400]}")
                failures += 1
                continue
            from loopweave.backends.timing import interleaved
            on_device = {n: lw.device_array(a) for n, a in feed.items()}
            theirs = torch_runner(name, batch, precision=args.precision)
            if theirs is None:
                cmp = None
            else:
                cmp = interleaved(lambda: exe.run(on_device, device_outputs=True), theirs, pairs=args.repeat,
                                  min_seconds=0.05, pause=0.01)
            kernels = exe.time(feed, repeat=args.repeat)
            rows.append((f"{name} b{batch}", cmp, kernels, compile_s))
            if args.profile:
                prof = sorted(exe.profile(feed), key=lambda r: -r[1])
                total = sum(s for _, s in prof)
                print(f"{name} batch {batch}: {len(prof)} kernel calls, sum {total * 1e3:.2f} ms; slowest:")
                for kname, sec in prof[:args.profile]:
                    print(f"  {sec * 1e6:9.1f} us  {kname}")
    print(f"{'model':<26} {'loopweave ms':>12} {'torch ms':>9} {'ratio':>6} {'kernels ms':>10} {'compile s':>9}")
    for label, cmp, kernels, compile_s in rows:
        ours, theirs, ratio = (cmp.ours_s * 1e3, cmp.theirs_s * 1e3, f"{cmp.ratio:6.2f}") if cmp else \
            (float("nan"), float("nan"), "     -")
        print(f"{label:<26} {ours:12.3f} {theirs:9.3f} {ratio} {kernels * 1e3:10.3f} {compile_s:9.1f}")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
