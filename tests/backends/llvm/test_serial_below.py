"""The ``serial_below`` pragma of a parallel loop (backends/llvm/codegen.py): below the given run-time
extent the iterations run on the calling thread (the outlined body called directly), from it on
through the pool; the same values both ways.  The op library sets it where a loop of run-time extent
does little work an iteration (``registry.parallel_unless_little``)."""
import numpy as np

import loopweave as lw


def test_a_small_run_time_extent_runs_on_the_calling_thread():
    n = lw.var("n")
    A = lw.placeholder((n, 16), name="A")
    B = lw.compute((n, 16), lambda i, j: A[i, j] * 3.0 + 1.0, name="B")
    s = lw.create_schedule(B)
    s[B].parallel(B.op.axis[0])
    s[B].pragma(B.op.axis[0], "serial_below", 8)
    f = lw.build(s, [A, B])
    text = f.get_source("ll")
    body = next(line.split("@")[1].split("(")[0] for line in text.splitlines()
                if "call" in line and "lw_parallel_for" in line)      # the outlined body, as the pool gets it
    assert sum(f"call void @{body}(" in line for line in text.splitlines()) == 1     # and called directly
    for rows in (1, 7, 8, 100):
        a = np.random.default_rng(rows).random((rows, 16), dtype=np.float32)
        b = np.empty_like(a)
        f(a, b)
        np.testing.assert_allclose(b, a * 3 + 1, rtol=1e-6)
