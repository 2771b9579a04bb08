"""This machine's yardstick: the fp32 FMA peak per vector width, the int8 product rate and the
memory bandwidth, as loopweave's own code reaches them.

``python -m benchmarks.peak [--threads 1 2] [--seconds 0.3]``

The FMA kernels are LLVM IR written here: independent accumulators (more than an FMA's latency
times the FMAs issued per cycle, fewer than the registers) each updated by ``llvm.fma`` in a loop,
so the loop runs at the FMA units' rate; GFLOPS count 2 per lane per FMA.  Widths up to the
target's (``LOOPWEAVE_HOST_TARGET="llvm -mcpu=x86-64-v3"`` on an AVX-512 machine measures what AVX2
code can reach there, the yardstick of AVX2 builds).  The int8 rate: ``vpdpbusd`` (4 byte products
into each int32 lane) where the target has VNNI, else ``vpmaddwd`` (2 int16 products a lane: what an
exact u8 x s8 product runs on without VNNI); GOPS count 2 per product.  Bandwidth: a loopweave kernel
``C = A + B`` over 3 x 128 MiB, bytes read and written per second.  Each figure is the best of
five runs; threads run the same kernel side by side (ctypes releases the GIL).
"""
from __future__ import annotations

import argparse
import ctypes
import threading
import time
from typing import Callable, List, Tuple

import numpy as np

import loopweave as lw
from loopweave.backends.llvm.jit import compile_ir, load_object
from loopweave.target import Target, resolve_target

_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)


def _accumulators(target: Target) -> int:
    """Independent chains: 8 hide a 4-cycle FMA on two pipes; leave registers for the operands."""
    return min(24, target.vector_registers - 4)


def _loop_ir(name: str, vector: str, init: str, step: Callable[[str, str], str], count: int, declare: str,
             reduce: Callable[[List[str]], List[str]], prologue: Tuple[str, ...] = ()) -> str:
    """A function ``void name(i64 iters, ptr out)``: ``count`` accumulators of type ``vector``, each
    replaced by ``step(acc, new_name)`` per iteration, reduced into ``out`` at the end; the operands
    ``%x`` and ``%y`` are loaded from ``out`` first (then ``prologue``)."""
    phis = [f"  %a{k} = phi {vector} [ {init}, %entry ], [ %n{k}, %loop ]" for k in range(count)]
    steps = [step(f"%a{k}", f"%n{k}") for k in range(count)]
    return "\n".join([
        declare,
        f"define void @{name}(i64 %iters, ptr %out) {{",
        "entry:",     # the operands come from memory, so LLVM cannot fold the loop away
        f"  %x = load {vector}, ptr %out, align 4",
        f"  %yp = getelementptr {vector}, ptr %out, i64 1",
        f"  %y = load {vector}, ptr %yp, align 4",
        *prologue, "  br label %loop", "loop:",
        "  %i = phi i64 [ 0, %entry ], [ %i1, %loop ]", *phis, *steps,
        "  %i1 = add i64 %i, 1", "  %more = icmp ult i64 %i1, %iters",
        "  br i1 %more, label %loop, label %done", "done:", *reduce([f"%n{k}" for k in range(count)]),
        "  ret void", "}"])


def _folded_into_out(vector: str, op: str) -> Callable[[List[str]], List[str]]:
    """The accumulators combined by ``op`` and stored to ``out`` (so none of them is dead code)."""
    def reduce(names):
        lines, last = [], names[0]
        for k, name in enumerate(names[1:]):
            lines.append(f"  %s{k} = {op} {vector} {last}, {name}")
            last = f"%s{k}"
        return lines + [f"  store {vector} {last}, ptr %out, align 4"]
    return reduce


def fma_ir(bits: int, count: int) -> str:
    lanes = bits // 32
    vector = f"<{lanes} x float>"
    splat = lambda v: f"<{', '.join([f'float {v}'] * lanes)}>"                              # noqa: E731
    intrinsic = f"llvm.fma.v{lanes}f32"

    def step(acc, new):
        return f"  {new} = call {vector} @{intrinsic}({vector} {acc}, {vector} %x, {vector} %y)"

    return _loop_ir(f"lw_peak_fma{bits}", vector, splat("1.0"), step, count,
                    f"declare {vector} @{intrinsic}({vector}, {vector}, {vector})", _folded_into_out(vector, "fadd"))


def int8_ir(bits: int, count: int, vnni: bool) -> str:
    lanes = bits // 32
    vector = f"<{lanes} x i32>"
    if vnni:
        intrinsic = f"llvm.x86.avx512.vpdpbusd.{bits}"
        declare = f"declare {vector} @{intrinsic}({vector}, {vector}, {vector})"

        def step(acc, new):
            return f"  {new} = call {vector} @{intrinsic}({vector} {acc}, {vector} %x, {vector} %y)"
    else:
        halves = f"<{2 * lanes} x i16>"
        intrinsic = "llvm.x86.avx2.pmadd.wd" if bits == 256 else "llvm.x86.sse2.pmadd.wd"
        declare = f"declare {vector} @{intrinsic}({halves}, {halves})"

        def step(acc, new):     # the products depend on the accumulator, as a dot product's inputs vary
            return f"  {new}.h = bitcast {vector} {acc} to {halves}\n" \
                   f"  {new}.p = call {vector} @{intrinsic}({halves} {new}.h, {halves} %y.h)\n" \
                   f"  {new} = add {vector} {new}.p, %x"

    prologue = () if vnni else (f"  %y.h = bitcast {vector} %y to <{2 * lanes} x i16>",)
    return _loop_ir(f"lw_peak_int8_{bits}", vector, "zeroinitializer", step, count, declare, _folded_into_out(vector, "xor"), prologue)


def _loaded(ir: str, name: str, target: Target):
    obj, _ = compile_ir(ir, target)
    return _KERNEL(load_object(obj, name))


def _rate(kernel, work_per_iteration: float, threads: int, seconds: float) -> float:
    """Best of five: work per second of ``threads`` copies of ``kernel`` run side by side."""
    out = [np.zeros(64, np.float32) for _ in range(threads)]
    iters = 1000
    while True:                                   # calibrate one thread to about ``seconds``
        start = time.perf_counter()
        kernel(iters, out[0].ctypes.data)
        took = time.perf_counter() - start
        if took > seconds / 4:
            break
        iters *= 4
    iters = int(iters * seconds / took)
    best = 0.0
    for _ in range(5):
        workers = [threading.Thread(target=kernel, args=(iters, out[t].ctypes.data)) for t in range(threads)]
        start = time.perf_counter()
        for w in workers:
            w.start()
        for w in workers:
            w.join()
        best = max(best, threads * iters * work_per_iteration / (time.perf_counter() - start))
    return best


def fma_peak(threads: int, target: Target = None, seconds: float = 0.2) -> float:
    """FLOP/s of fp32 FMAs at ``target``'s full vector width (default: the host's), ``threads`` at once."""
    target = target or resolve_target("llvm")
    bits, count = target.vector_bits, _accumulators(target)
    kernel = _loaded(fma_ir(bits, count), f"lw_peak_fma{bits}", target)
    return _rate(kernel, 2 * bits // 32 * count, threads, seconds)


def bandwidth(threads: int, mib: int = 128) -> float:
    """Bytes per second of ``C = A + B`` (two reads, one write) over ``mib`` MiB each."""
    n = mib * (1 << 20) // 4
    A, B = lw.placeholder((n,), name="A"), lw.placeholder((n,), name="B")
    C = lw.compute((n,), lambda i: A[i] + B[i], name="C")
    s = lw.create_schedule(C)
    outer, inner = s[C].split(C.op.axis[0], factor=resolve_target("llvm").lanes("float32") * 64)
    s[C].parallel(outer)
    vo, vi = s[C].split(inner, factor=resolve_target("llvm").lanes("float32"))
    s[C].vectorize(vi)
    f = lw.build(s, [A, B, C])
    a, b, c = (np.ones(n, np.float32) for _ in range(3))
    lw.backends.timing.set_threads(threads)
    f(a, b, c)
    best = min(_wall(lambda: f(a, b, c)) for _ in range(5))
    return 3 * n * 4 / best


def _wall(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2], help="thread counts to measure")
    parser.add_argument("--seconds", type=float, default=0.3, help="length of one timed run")
    args = parser.parse_args(argv)
    target = resolve_target("llvm")
    print(f"{target}; features: {', '.join(lw.target_info().extensions)}")
    count = _accumulators(target)
    widths = [b for b in (128, 256, 512) if b <= target.vector_bits] if target.arch == "x86_64" else [128]
    header = "".join(f"{t:>3} thread{'s' if t > 1 else ' '}" for t in args.threads)
    print(f"{'':34}{header}")
    for bits in widths:
        kernel = _loaded(fma_ir(bits, count), f"lw_peak_fma{bits}", target)
        rates = [_rate(kernel, 2 * bits // 32 * count, t, args.seconds) / 1e9 for t in args.threads]
        print(f"{f'fp32 FMA, {bits}-bit (GFLOPS)':34}" + "".join(f"{r:11.1f}" for r in rates), flush=True)
    if target.arch == "x86_64":
        enabled = target.enabled_features()
        vnni_bits = [b for b in widths if b >= 256 and (
            ("avx512vnni" in enabled and (b == 512 or "avx512vl" in enabled)) or (b == 256 and "avxvnni" in enabled))]
        bits = max(vnni_bits) if vnni_bits else (256 if target.vector_bits >= 256 else 128)
        vnni = bool(vnni_bits)
        kernel = _loaded(int8_ir(bits, count, vnni), f"lw_peak_int8_{bits}", target)
        products = bits // 32 * (4 if vnni else 2)
        rates = [_rate(kernel, 2 * products * count, t, args.seconds) / 1e9 for t in args.threads]
        what = f"int8 vpdpbusd, {bits}-bit (GOPS)" if vnni else f"int16 vpmaddwd, {bits}-bit (GOPS)"
        print(f"{what:34}" + "".join(f"{r:11.1f}" for r in rates), flush=True)
    rates = [bandwidth(t) / 1e9 for t in args.threads]
    print(f"{'memory, C = A + B (GB/s)':34}" + "".join(f"{r:11.1f}" for r in rates), flush=True)


if __name__ == "__main__":
    main()
