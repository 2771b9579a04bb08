"""This machine's yardstick: the fp32 FMA peak per vector width, the int8 product rate and the
memory bandwidth, as loopweave's own code reaches them.

``python -m benchmarks.peak [--threads 1 2] [--seconds 0.3]``

The FMA and int8 kernels are ``loopweave.backends.llvm.peak``'s (``loopweave info --peak`` prints
the same figures): independent accumulators each updated by ``llvm.fma`` in a loop, so the loop runs
at the FMA units' rate; GFLOPS count 2 per lane per FMA.  Widths up to the
target's (``LOOPWEAVE_HOST_TARGET="llvm -mcpu=x86-64-v3"`` on an AVX-512 machine measures what AVX2
code can reach there, the yardstick of AVX2 builds).  The int8 rate: ``vpdpbusd`` (4 byte products
into each int32 lane) where the target has VNNI, else ``vpmaddwd`` (2 int16 products a lane: what an
exact u8 x s8 product runs on without VNNI); GOPS count 2 per product.  Bandwidth: a loopweave kernel
``C = A + B`` over 3 x 128 MiB, bytes read and written per second.  Each figure is the best of
five runs; threads run the same kernel side by side (ctypes releases the GIL).
"""
from __future__ import annotations

import argparse
import time

import numpy as np

import loopweave as lw
from loopweave.backends.llvm.peak import accumulators, fma_ir, fma_peak, int8_ir, int8_widths, peak_kernel, rate
from loopweave.target import resolve_target

def cpu_time_fma_peak(target=None, seconds: float = 0.2) -> float:
    """FLOP/s of fp32 FMAs at ``target``'s width on one thread, by the CPU time it got
    (``time.thread_time``, best of five): the yardstick of single-threaded timings by CPU time, which
    a loaded machine does not lower."""
    target = target or resolve_target("llvm")
    bits, count = target.vector_bits, accumulators(target)
    kernel = peak_kernel(fma_ir(bits, count), f"lw_peak_fma{bits}", target)
    out = np.zeros(64, np.float32)
    iters = 1000
    while True:
        start = time.thread_time()
        kernel(iters, out.ctypes.data)
        took = time.thread_time() - start
        if took > seconds / 4:
            break
        iters *= 4
    iters = int(iters * seconds / took)
    best = float("inf")
    for _ in range(5):
        start = time.thread_time()
        kernel(iters, out.ctypes.data)
        best = min(best, time.thread_time() - start)
    return iters * 2 * bits // 32 * count / best


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
    count = accumulators(target)
    widths = [b for b in (128, 256, 512) if b <= target.vector_bits] if target.arch == "x86_64" else [128]
    header = "".join(f"{t:>3} thread{'s' if t > 1 else ' '}" for t in args.threads)
    print(f"{'':34}{header}")
    for bits in widths:
        kernel = peak_kernel(fma_ir(bits, count), f"lw_peak_fma{bits}", target)
        rates = [rate(kernel, 2 * bits // 32 * count, t, args.seconds) / 1e9 for t in args.threads]
        print(f"{f'fp32 FMA, {bits}-bit (GFLOPS)':34}" + "".join(f"{r:11.1f}" for r in rates), flush=True)
    if target.arch == "x86_64":
        bits, vnni = int8_widths(target)
        kernel = peak_kernel(int8_ir(bits, count, vnni), f"lw_peak_int8_{bits}", target)
        products = bits // 32 * (4 if vnni else 2)
        rates = [rate(kernel, 2 * products * count, t, args.seconds) / 1e9 for t in args.threads]
        what = f"int8 vpdpbusd, {bits}-bit (GOPS)" if vnni else f"int16 vpmaddwd, {bits}-bit (GOPS)"
        print(f"{what:34}" + "".join(f"{r:11.1f}" for r in rates), flush=True)
    rates = [bandwidth(t) / 1e9 for t in args.threads]
    print(f"{'memory, C = A + B (GB/s)':34}" + "".join(f"{r:11.1f}" for r in rates), flush=True)


if __name__ == "__main__":
    main()
