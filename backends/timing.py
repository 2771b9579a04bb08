"""Interleaved timing against a peer (docs/design.md, last section).

Absolute times on a shared 2-core VM drift by 1.5x between rounds, so a ratio is only
meaningful when both sides are measured in the same run: alternate runs (ours, theirs,
ours, ...), pause between the two systems so one's spinning threads do not steal the
other's core (OpenBLAS's workers keep spinning for well over 50 ms after a call: with a
50 ms pause the docs/design.md matmul measured 41 GFLOPS, with 300 ms 89, alone 96), and
report the median of the per-pair ratios.
"""
from __future__ import annotations

import time
from dataclasses import dataclass
from typing import Callable, List, Optional, Sequence, Tuple

import numpy as np

from .llvm import thread_pool


@dataclass
class Comparison:
    ours_s: float      # median seconds per call, loopweave
    theirs_s: float    # median seconds per call, the peer
    ratio: float       # median over pairs of theirs/ours: > 1 means loopweave is faster

    def row(self, label: str, flops: float | None = None) -> str:
        if flops:
            return (f"{label:<34} {flops / self.ours_s / 1e9:9.1f} {flops / self.theirs_s / 1e9:9.1f} "
                    f"{self.ratio:7.2f}")
        return f"{label:<34} {self.ours_s * 1e3:9.3f} {self.theirs_s * 1e3:9.3f} {self.ratio:7.2f}"


def _per_call(fn: Callable[[], object], inner: int, clock: Callable[[], float] = time.perf_counter) -> float:
    t0 = clock()
    for _ in range(inner):
        fn()
    return (clock() - t0) / inner


def _wall_seconds(fn: Callable[[], object]) -> float:
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def per_call_medians(calls: Sequence[Tuple[str, Callable[[], object]]], repeat: int, in_order: bool = False,
                     clock: Optional[Callable[[Callable[[], object]], float]] = None) -> List[Tuple[str, float]]:
    """(name, median seconds) of each of ``calls`` (an executable's kernel calls), timed by ``clock``
    (wall time by default).  Each call ``repeat`` times in a row (``in_order=False``: the data it
    reads cached, the hot spots of its own code), or the whole sequence ``repeat`` times, each call
    once per pass (``in_order=True``: as a network run sees them, weights read from memory: ResNet-18's
    kernels sum to 5.0 ms the first way and 6.4-6.8 ms the second, its run's time)."""
    clock = clock or _wall_seconds
    repeat = max(1, repeat)
    samples: List[List[float]] = [[] for _ in calls]
    if in_order:
        for _ in range(repeat):
            for k, (_, fn) in enumerate(calls):
                samples[k].append(clock(fn))
    else:
        for k, (_, fn) in enumerate(calls):
            samples[k] = [clock(fn) for _ in range(repeat)]
    return [(name, float(np.median(s))) for (name, _), s in zip(calls, samples)]


def calls_per_sample(fn: Callable[[], object], min_seconds: float) -> int:
    """Calls of ``fn`` that take about ``min_seconds``, from the fastest of three single calls.  The
    first call after a peer's is cold (its data evicted, its pool asleep): counted from that one
    alone, a 0.09 ms blur whose cold call took 0.5 ms got 40 calls (4 ms samples instead of 20), and
    the cold start weighed on every sample (tuned/untuned read 4.2 against 5.2 with long samples)."""
    return max(1, int(min_seconds / max(min(_per_call(fn, 1) for _ in range(3)), 1e-7)))


def interleaved(ours: Callable[[], object], theirs: Callable[[], object], pairs: int = 15,
                min_seconds: float = 0.02, pause: float = 0.3,
                clock: Callable[[], float] = time.perf_counter) -> Comparison:
    """Time ``ours`` and ``theirs`` alternately; ``ratio`` = median(theirs / ours).  ``clock``:
    ``time.thread_time`` times single-threaded work by the CPU time it got, which a loaded machine
    does not inflate (the time another process held the core is not counted)."""
    ours()
    theirs()
    inner = calls_per_sample(ours, min_seconds)
    ours_t, theirs_t, ratios = [], [], []
    for _ in range(pairs):
        a = _per_call(ours, inner, clock)
        time.sleep(pause)
        b = _per_call(theirs, inner, clock)
        time.sleep(pause)
        ours_t.append(a)
        theirs_t.append(b)
        ratios.append(b / a)
    return Comparison(float(np.median(ours_t)), float(np.median(theirs_t)), float(np.median(ratios)))


def set_threads(n: int) -> None:
    """Use ``n`` threads in loopweave's pool (and in OpenBLAS when threadpoolctl is installed)."""
    thread_pool.set_num_threads(n)
    try:
        from threadpoolctl import threadpool_limits
        threadpool_limits(n)
    except ImportError:
        pass
