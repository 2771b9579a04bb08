"""Interleaved latency comparison of a compiled network against onnxruntime.

Same method as ``benchmarks/compare.py`` (copied here so the installed package does not
depend on the benchmarks folder): alternate single runs of the two systems, pause
between them so one's spinning threads do not steal the other's core, and report the
median of the per-pair ratios (> 1 means loopweave is faster).
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, Optional

import numpy as np


@dataclass
class Comparison:
    ours_s: float
    theirs_s: float
    ratio: float       # median over pairs of theirs/ours


def interleaved(ours: Callable[[], object], theirs: Callable[[], object], pairs: int = 15,
                min_seconds: float = 0.02, pause: float = 0.05) -> Comparison:
    ours()
    theirs()
    t0 = time.perf_counter()
    ours()
    inner = max(1, int(min_seconds / max(time.perf_counter() - t0, 1e-7)))
    ours_t, theirs_t, ratios = [], [], []
    for _ in range(pairs):
        t0 = time.perf_counter()
        for _ in range(inner):
            ours()
        a = (time.perf_counter() - t0) / inner
        time.sleep(pause)
        t0 = time.perf_counter()
        for _ in range(inner):
            theirs()
        b = (time.perf_counter() - t0) / inner
        time.sleep(pause)
        ours_t.append(a)
        theirs_t.append(b)
        ratios.append(b / a)
    return Comparison(float(np.median(ours_t)), float(np.median(theirs_t)), float(np.median(ratios)))


def set_threads(n: int) -> None:
    from ..backends.llvm import thread_pool
    thread_pool.set_num_threads(n)


def onnxruntime_session(model, threads: int):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def random_feed(exe, seed: int = 0):
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(shape).astype(dtype) for name, shape, dtype in exe.inputs}


def compare_with_onnxruntime(model, exe, threads: int = 2, pairs: int = 15, feed: Optional[dict] = None,
                             check: bool = True) -> Comparison:
    """Time ``exe`` against onnxruntime on ``model`` (a ModelProto or path), interleaved."""
    import onnx
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(model)
    set_threads(threads)
    sess = onnxruntime_session(model, threads)
    feed = feed or random_feed(exe)
    if check:
        ours, theirs = exe.run(feed), sess.run(None, feed)
        for a, b in zip(ours, theirs):
            scale = max(1e-6, float(np.abs(b).max()))
            if not np.allclose(a, b, rtol=1e-3, atol=1e-3 * scale):
                raise AssertionError(f"loopweave and onnxruntime disagree: max abs diff "
                                     f"{float(np.abs(a - b).max()):.3g} at output scale {scale:.3g}")
    return interleaved(lambda: exe.run(feed), lambda: sess.run(None, feed), pairs=pairs)
