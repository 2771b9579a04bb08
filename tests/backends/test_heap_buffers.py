"""Large fixed-size intermediate buffers live on the heap: one per call (per chunk in a parallel
loop), kept by its allocation site between calls (the workspace slot in backends/llvm/codegen.py)."""
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


def test_workspace_is_reused_and_safe_across_threads():
    """Repeated and concurrent calls of kernels with a cached workspace give right answers:
    a call that finds the slot taken mallocs its own buffer."""
    import threading
    n = 256
    A = lw.placeholder((n, n), name="A")
    B = lw.compute((n, n), lambda i, j: A[i, j] * 3.0, name="B")
    C = lw.compute((n, n), lambda i, j: B[i, j] - A[i, j], name="C")
    f = lw.build(lw.create_schedule(C), [A, C])
    g = lw.build(lw.create_schedule(C), [A, C])     # the same kernel again: the same code and slot
    assert "lw.workspace" in f.get_source("ll")
    rng = np.random.default_rng(1)
    errors = []

    def work(fn, seed):
        a = np.random.default_rng(seed).random((n, n), dtype=np.float32)
        for _ in range(50):
            c = np.empty_like(a)
            fn(a, c)
            if not np.allclose(c, a * 2, rtol=1e-6):
                errors.append(seed)
    # one thread per Module (a Module's argument array is its own), both on the same slot
    threads = [threading.Thread(target=work, args=(fn, k)) for k, fn in enumerate([f, g])]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors
    a = rng.random((n, n), dtype=np.float32)
    c = np.empty_like(a)
    for _ in range(3):
        f(a, c)
        np.testing.assert_allclose(c, a * 2, rtol=1e-6)


def test_a_buffer_of_run_time_size_is_on_the_stack_when_it_fits():
    """A row buffer of symbolic length at a parallel row loop: on the stack (released after each row)
    up to the stack limit, from malloc above it; right either way."""
    m, n = lw.var("m"), lw.var("n")
    A = lw.placeholder((m, n), name="A")
    B = lw.compute((m, n), lambda i, j: A[i, j] * 2.0, name="B")
    C = lw.compute((m, n), lambda i, j: B[i, j] + 1.0, name="C")
    s = lw.create_schedule(C)
    s[B].compute_at(s[C], C.op.axis[0])
    s[C].parallel(C.op.axis[0])
    f = lw.build(s, [A, C])
    text = f.get_source("ll")
    assert "llvm.stacksave" in text and "llvm.stackrestore" in text and "@\"malloc\"" in text
    rng = np.random.default_rng(2)
    for rows, cols in ((7, 33), (3, 20000)):    # 20000 floats: past the 64 KiB stack limit
        a = rng.random((rows, cols), dtype=np.float32)
        c = np.empty_like(a)
        for _ in range(3):
            f(a, c)
            np.testing.assert_allclose(c, a * 2 + 1, rtol=1e-6)
