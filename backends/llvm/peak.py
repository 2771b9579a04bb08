"""This machine's fp32 FMA peak per vector width and its int8 product rate, as loopweave's own code
reaches them: the yardstick every speed figure is read against (``loopweave info --peak``,
``python -m benchmarks.peak``).

The kernels are LLVM IR written here: independent accumulators (more than an FMA's latency times the
FMAs issued per cycle, fewer than the registers) each updated by ``llvm.fma`` in a loop, so the loop runs
at the FMA units' rate; FLOP count 2 per lane per FMA.  The int8 rate: ``vpdpbusd`` (4 byte products
into each int32 lane) where the target has VNNI, else ``vpmaddwd`` (2 int16 products a lane: what an
exact u8 x s8 product runs on without VNNI).  Each figure is the best of five runs; threads run the
same kernel side by side (ctypes releases the GIL).
"""
from __future__ import annotations

import ctypes
import threading
import time
from typing import Callable, List, Tuple

import numpy as np

from ...target import Target, resolve_target
from .jit import compile_ir, load_object

_KERNEL = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p)


def accumulators(target: Target) -> int:
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


def peak_kernel(ir: str, name: str, target: Target):
    obj, _ = compile_ir(ir, target)
    return _KERNEL(load_object(obj, name))


def rate(kernel, work_per_iteration: float, threads: int, seconds: float) -> float:
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
    bits, count = target.vector_bits, accumulators(target)
    kernel = peak_kernel(fma_ir(bits, count), f"lw_peak_fma{bits}", target)
    return rate(kernel, 2 * bits // 32 * count, threads, seconds)




def int8_widths(target: Target) -> Tuple[int, bool]:
    """``(bits, vnni)`` of the int8 product kernel for ``target``: its widest ``vpdpbusd`` where it has
    VNNI, else ``vpmaddwd`` at 256 bits (128 without AVX2)."""
    enabled = target.enabled_features()
    widths = [b for b in (256, 512) if b <= target.vector_bits and (
        ("avx512vnni" in enabled and (b == 512 or "avx512vl" in enabled)) or (b == 256 and "avxvnni" in enabled))]
    if widths:
        return max(widths), True
    return (256 if "avx2" in enabled else 128), False


def int8_peak(threads: int, target: Target = None, seconds: float = 0.2) -> float:
    """Byte (or int16) products per second of ``target``'s int8 product kernel, ``threads`` at once."""
    target = target or resolve_target("llvm")
    bits, vnni = int8_widths(target)
    count = accumulators(target)
    kernel = peak_kernel(int8_ir(bits, count, vnni), f"lw_peak_int8_{bits}", target)
    return rate(kernel, bits // 32 * (4 if vnni else 2) * count, threads, seconds)
