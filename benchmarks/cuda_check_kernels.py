"""Find the GPU kernel of a network that computes wrong values: each kernel of
``lw.compile(model, target="cuda")`` run alone on the GPU against the same schedule emulated on
the CPU (thread loops serial, through LLVM), on the same random inputs.

``python -m benchmarks.cuda_check_kernels [--models mobilenet_v2] [--batch 1]`` prints, per
distinct kernel, the largest difference relative to the emulated output's scale, worst first.
The emulation computes what the schedule means; a kernel that differs only on the GPU points
at what only parallel execution or nvcc shows (a race, a barrier, an aliasing assumption).
Exits with a message when there is no GPU.
"""
from __future__ import annotations

import argparse
import sys

import numpy as np

import loopweave as lw
from loopweave.nn_ops.testing import model_zoo


def emulating_build(s, args):
    """Build a GPU schedule for the CPU with its thread loops made serial (the tests' emulation)."""
    from loopweave.backends.build import build_llvm
    from loopweave.dsl.visitor import Mutator
    from loopweave.lowering.ir import For
    from loopweave.target import resolve_target

    class Serial(Mutator):
        def visit_For(self, node):
            body = self.visit(node.body)
            if node.kind != "thread":
                return node if body is node.body else For(node.var, node.min, node.extent, node.kind, body,
                                                          node.annotations)
            return For(node.var, node.min, node.extent, "serial", body, ())
    func = lw.lower(s, args)
    return build_llvm(func.with_body(Serial().visit(func.body)), resolve_target("llvm"))


def main(argv=None) -> int:
    parser = argparse.ArgumentParser()
    parser.add_argument("--models", nargs="+", default=["mobilenet_v2"])
    parser.add_argument("--batch", type=int, default=1)
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
