"""Cost of the run-time index check of a Gather: the op library's checked gather
against the same kernel with the index clamped (the old behaviour) and with no check at all
(only the negative wrap; unsafe), same default schedule, timed alternately.

    .venv/bin/python benchmarks/index_check_overhead.py

Prints the median of per-round ratios (checked / unchecked, checked / clamped); on a shared
machine read anything within about +-10% as "no measurable difference".
"""
from __future__ import annotations

import numpy as np

import loopweave as lw
from loopweave.dsl.expr import cast, const, select
from loopweave.dsl.intrinsics import elementwise_max, elementwise_min
from loopweave.nn_ops.ops import index as index_ops
from loopweave.nn_ops.ops.registry import schedule
from loopweave.target import resolve_target


def _variant(table, ids, how: str):
    n = table.shape[0].value

    def fcompute(b, t, h):
        k = cast("int64", ids[b, t])
        k = select(k < const(0, "int64"), k + const(n, "int64"), k)
        if how == "clamp":
            k = elementwise_min(elementwise_max(k, const(0, "int64")), const(n - 1, "int64"))
        return table[k, h]
    shape = tuple(int(d.value) for d in ids.shape) + (int(table.shape[1].value),)
    return lw.compute(shape, fcompute, name="gather", tag="injective")


def main(vocab=30522, hidden=768, batch=8, seq=512, rounds=15):
    table = lw.placeholder((vocab, hidden), name="table", dtype="float32")
    ids = lw.placeholder((batch, seq), name="ids", dtype="int64")
    kernels = {}
    for how in ("checked", "clamp", "unchecked"):
        out = index_ops.gather(table, ids, 0) if how == "checked" else _variant(table, ids, how)
        kernels[how] = lw.build(schedule([out], "llvm"), [table, ids, out], name=f"gather_{how}")
    rng = np.random.default_rng(0)
    t = rng.standard_normal((vocab, hidden)).astype(np.float32)
    i = rng.integers(0, vocab, (batch, seq))
    o = np.empty((batch, seq, hidden), np.float32)
    times = {k: [] for k in kernels}
    for _ in range(rounds):
        for how, f in kernels.items():
            times[how].append(f.time(t, i, o, repeat=3, min_seconds=0.03))
    med = {k: float(np.median(v)) for k, v in times.items()}
    ratio = lambda a, b: float(np.median(np.array(times[a]) / np.array(times[b])))  # noqa: E731
    print(f"gather {vocab}x{hidden} table, {batch}x{seq} ids, {resolve_target('llvm').num_threads} threads")
    for k, v in med.items():
        print(f"  {k:10s} {v * 1e3:8.3f} ms")
    print(f"  checked / unchecked: {ratio('checked', 'unchecked'):.3f}   checked / clamp: {ratio('checked', 'clamp'):.3f}")


if __name__ == "__main__":
    main()                                          # an embedding lookup: one check per 768 copied floats
    main(vocab=4096, hidden=1, batch=64, seq=8192)  # one check per element: the worst case
