"""Large fixed-size intermediate buffers live on the heap, allocated once per call."""
import numpy as np

import loopweave as lw


def test_large_intermediate_at_root_and_inside_a_parallel_loop():
    n = 300  # 300*300*4 bytes: above the stack limit, so malloc'd at function entry
    A = lw.placeholder((n, n), name="A")
    B = lw.compute((n, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = lw.compute((n, n), lambda i, j: B[i, j] + 1.0, name="C")
    s = lw.create_schedule(C)          # B at root: a heap buffer in the entry block
    f = lw.build(s, [A, C])
    a = np.random.default_rng(0).random((n, n), dtype=np.float32)
    c = np.empty_like(a)
    f(a, c)
    np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)

    k = lw.reduce_axis((0, n), name="k")
    D = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * A[k, j], axis=k), name="D")
    s = lw.create_schedule(D)
    io, ii = s[D].split(D.op.axis[0], factor=16)
    AA = s.cache_read(A, "local", [D])
    s[AA].compute_at(s[D], io)       # a 300x300 copy per parallel iteration: one per chunk
    s[D].parallel(io)
    d = np.empty_like(a)
    lw.build(s, [A, D])(a, d)
    np.testing.assert_allclose(d, a @ a, rtol=1e-4, atol=1e-3)
