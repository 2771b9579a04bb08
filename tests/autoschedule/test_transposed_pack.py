"""A register tile whose operand runs along the reduction across its vectors (``K`` in ``Q·Kᵀ``) may
read it from a copy stored transposed: offered where it applies, and correct for every placement."""
from __future__ import annotations

import random

import numpy as np

import loopweave as lw
from loopweave.autoschedule.space import Space
from loopweave.autoschedule.task import Task
from loopweave.benchmarks.autoschedule import attention as attention_head


def attention(n, d):
    return attention_head(n, d)[0]      # (the benchmark's kernel: its arguments)


def scores(n, d):
    Q = lw.placeholder((n, d), name="Q")
    K = lw.placeholder((n, d), name="K")
    r = lw.reduce_axis((0, d), name="r")
    return [Q, K, lw.compute((n, n), lambda i, j: lw.sum(Q[i, r] * K[j, r], axis=r), name="S")]


def matmul(n):
    A = lw.placeholder((n, n), name="A")
    B = lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    return [A, B, lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")]


def decisions(args):
    return dict(Space(Task(args, "llvm")).decisions)


def test_offered_for_operands_read_along_the_reduction_only():
    d = decisions(attention(64, 64))
    assert d["pack_t:S"] == [False, True] and d["regtile:S"] == [False, True]   # Q·Kᵀ feeding a matmul
    assert "pack_t:O" not in d                      # V[t, c] runs along O's vectors already
    assert decisions(scores(64, 64))["pack_t:S"] == [False, True]               # Q·Kᵀ as the output
    assert not any(n.startswith("pack_t") for n in decisions(matmul(64)))


def test_every_transposed_schedule_computes_the_product():
    """Sizes no tile divides (tails), the scores at every placement, with and without the copy."""
    n, d = 70, 48
    rng = np.random.default_rng(5)
    q, k, v = rng.standard_normal((3, n, d)).astype("float32")
    for args, want in ((attention(n, d), (q @ k.T) @ v), (scores(n, d), q @ k.T)):
        space = Space(Task(args, "llvm"))
        out = args[-1]
        py = random.Random(3)
        for place in ("tile", "root", "outer") if len(args) == 4 else ("",):
            choice = space.sample(py)
            choice.update({"cache_write": True, "pack_t:S": True, "pack": None, "ksplit": 0})
            if place:
                choice.update({"place:S": place, "regtile:S": True, "rfactor:S": False})
            s = space.apply(choice)
            assert "reorder_storage(" in str(s.trace), s.trace
            got = np.full([int(x.value) for x in out.shape], np.nan, "float32")
            lw.build(s, args)(*([q, k, v] if len(args) == 4 else [q, k]), got)
            np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-3, err_msg=f"{out.name} place={place}")


def test_a_register_tile_chosen_beside_an_rfactor_is_the_register_tile():
    space = Space(Task(attention(64, 64), "llvm"))
    choice = space.sample(random.Random(0))
    choice.update({"place:S": "root", "regtile:S": True, "rfactor:S": True, "pack_t:S": False})
    trace = str(space.apply(choice).trace)
    assert "s.cache_write(S, 'local')" in trace and "s.rfactor(S" not in trace, trace
