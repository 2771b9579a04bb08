"""Find the GPU kernel of a network that computes wrong values: each kernel of
``lw.compile(model, target="cuda")`` run alone on the GPU against the same schedule emulated on
the CPU (thread loops serial, through LLVM), on the same random inputs.

``python -m benchmarks.cuda_check_kernels [--models mobilenet_v2] [--batch 1]`` prints, per
distinct kernel, the largest difference relative to the emulated output's scale, worst first.
``--in-network`` instead runs the network's calls in order on the GPU and checks each call's
output against the emulated kernel run on the very inputs the GPU call read (so a fault of the
network, not of a kernel, shows too: buffers that overlap, a stale scratch buffer); it prints
the calls that differ, first ones first.
The emulation computes what the schedule means; a kernel that differs only on the GPU points
at what only parallel execution or nvcc shows (a race, a barrier, an aliasing assumption).
Exits with a message when there is no GPU.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import loopweave as lw
from loopweave.backends.cuda.emulate import emulating_build
from loopweave.nn_ops.testing import model_zoo


def check_in_network(name, gpu, cpu) -> None:
    rng = np.random.default_rng(0)
    feed = {n: rng.standard_normal(shape).astype(d) for n, shape, d in gpu.inputs}
    gpu.run(feed)                                 # sets the device up; the calls are replayed below
    dev = gpu._setup()
    drv = dev["drv"]
    for a, ptr in zip([feed[n] for n, _, _ in gpu.inputs], dev["inputs"]):
        drv.copy_to_device(ptr, a.ctypes.data, a.nbytes)
    bad = 0
    for k, (call, emulated) in enumerate(zip(gpu.calls, cpu.calls)):
        module = gpu.modules[call.symbol]
        pointers = [gpu._pointer(dev, loc) for loc in call.args]
        arrays = []
        for p, ptr in zip(module.params, pointers):
            a = np.empty(p.shape, p.dtype)
            drv.synchronize()
            drv.copy_to_host(a.ctypes.data, ptr, a.nbytes)
            arrays.append(a)
        for launch in dev["prepared"][k]:
            drv.launch_prepared(launch)
        drv.synchronize()
        out = arrays[-1].copy()
        drv.copy_to_host(out.ctypes.data, pointers[-1], out.nbytes)
        want = [a.copy() for a in arrays]
        cpu.modules[emulated.symbol](*want)
        err = float(np.abs(out - want[-1]).max() / max(1e-30, float(np.abs(want[-1]).max())))
        if err > 1e-4 or not np.isfinite(err):
            bad += 1
            overlaps = [j for j, q in enumerate(pointers[:-1]) if q == pointers[-1]]
            print(f"  call {k} {call.name}: relative error {err:.3g}; shapes "
                  f"{[tuple(p.shape) for p in module.params]}; args {call.args}; output at an input's "
                  f"address: {overlaps}")
            if bad >= 8:
                break
    print(f"{name}: {bad} call(s) differ on the GPU inside the network")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["mobilenet_v2"])
    parser.add_argument("--batch", type=int, default=1)
    parser.add_argument("--in-network", action="store_true")
    args = parser.parse_args(argv)
    from loopweave.backends.cuda.driver import get_driver
    from loopweave.nn_ops.network.executable import build_kernels
    from loopweave.target import resolve_target
    try:
        get_driver()
    except lw.BuildError as exc:
        print(f"cuda_check_kernels: {exc}", file=sys.stderr)
        return 2
    for name in args.models:
        graph = lw.from_onnx(getattr(model_zoo, name)(batch=args.batch))
        gpu = lw.compile(graph, target="cuda", progress=False)
        cpu = build_kernels(graph, resolve_target("cuda"), False, build_fn=lambda s, a, _n: emulating_build(s, a))
        if args.in_network:
            check_in_network(name, gpu, cpu)
            continue
        rows, seen = [], set()
        for call, emulated in zip(gpu.calls, cpu.calls):
            if call.symbol in seen:
                continue
            seen.add(call.symbol)
            g, c = gpu.modules[call.symbol], cpu.modules[emulated.symbol]
            rng = np.random.default_rng(0)
            arrays = [rng.standard_normal(p.shape).astype(p.dtype) if np.dtype(p.dtype).kind == "f"
                      else np.zeros(p.shape, p.dtype) for p in g.params]
            want = [a.copy() for a in arrays]
            c(*want)
            got = [a.copy() for a in arrays]
            for k in range(len(got)):
                if g.params[k].is_output:
                    got[k][...] = np.nan
            g(*got)
            errs = [float(np.nanmax(np.abs(x - y)) / max(1e-30, float(np.abs(y).max())))
                    if not np.isnan(x).any() else float("inf")
                    for x, y, p in zip(got, want, g.params) if p.is_output]
            rows.append((max(errs), call.name, [tuple(p.shape) for p in g.params]))
        rows.sort(key=lambda r: -r[0])
        print(f"{name} batch {args.batch}: {len(rows)} distinct kernels, worst first (relative max error)")
        for err, kname, shapes in rows[:12]:
            print(f"  {err:10.3g}  {kname}  {shapes}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
