"""A register-tiled producer with long rows (``Q·Kᵀ``'s 512 scores a row) may tile its columns too
(``nr:NAME``): offered only where a row is more than a few vectors, counted against the vector
registers, and correct with a tail column tile."""
from __future__ import annotations

import random

import numpy as np

import loopweave as lw
from loopweave.autoschedule.space import Space
from loopweave.autoschedule.task import Task


def chain(n, d):
    """``(A Bᵀ) C``: a producer of n x n feeding a matmul."""
    A = lw.placeholder((n, d), name="A")
    B = lw.placeholder((n, d), name="B")
    C = lw.placeholder((n, d), name="C")
    r = lw.reduce_axis((0, d), name="r")
    P = lw.compute((n, n), lambda i, j: lw.sum(A[i, r] * B[j, r], axis=r), name="P")
    t = lw.reduce_axis((0, n), name="t")
    return [A, B, C, lw.compute((n, d), lambda i, c: lw.sum(P[i, t] * C[t, c], axis=t), name="O")]


def test_offered_for_rows_of_more_than_four_vectors_and_counted_in_the_register_budget():
    lanes = Task(chain(8, 8), "llvm").target.lanes("float32")
    space = Space(Task(chain(5 * lanes, 16), "llvm"))
    assert dict(space.decisions)["nr:P"] == [lanes, 2 * lanes, 4 * lanes, 5 * lanes]
    assert "nr:P" not in dict(Space(Task(chain(4 * lanes, 16), "llvm")).decisions)
    choice = dict(space.sample(random.Random(0)), **{"regtile:P": True, "tile:P.i": 8})
    assert space._fits(dict(choice, **{"nr:P": 2 * lanes}))
    assert not space._fits(dict(choice, **{"nr:P": 5 * lanes}))      # 8 rows of 5 vectors: 40


def test_column_tiles_compute_the_product():
    """Rows of 144: column tiles of 32 or 64 leave a shifted last tile (with 16 lanes)."""
    n, d = 144, 24
    args = chain(n, d)
    space = Space(Task(args, "llvm"))
    rng = np.random.default_rng(2)
    a, b, c = rng.standard_normal((3, n, d)).astype("float32")
    for nr in dict(space.decisions)["nr:P"][1:3]:
        choice = dict(space.sample(random.Random(nr)), **{"regtile:P": True, "rfactor:P": False, "nr:P": nr,
                                                          "tile:P.i": 2, "place:P": "tile"})
        s = space.apply(choice)
        got = np.full((n, d), np.nan, "float32")
        lw.build(s, args)(a, b, c, got)
        np.testing.assert_allclose(got, (a @ b.T) @ c, rtol=1e-4, atol=1e-3, err_msg=f"nr:P={nr}")
