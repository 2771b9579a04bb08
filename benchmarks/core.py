"""Core-issue numbers: compile time (cold and from the disk cache), parallel launch
overhead, and the DESIGN.md matmul schedule at N=1024 against numpy, interleaved.

``python -m benchmarks.core``
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

import numpy as np

from .compare import interleaved

_COMPILE = """
import time, loopweave as lw
t0 = time.perf_counter()
from loopweave.kernels import design_matmul_schedule
s, args = design_matmul_schedule()
lw.build(s, args)
print(time.perf_counter() - t0)
"""


def compile_times() -> tuple:
    """(cold seconds, cached seconds) for lower+build of the DESIGN.md matmul, each in a fresh process."""
    env = dict(os.environ, LOOPWEAVE_CACHE_DIR=tempfile.mkdtemp())
    # warm the interpreter's imports once so both numbers measure lower + build only
    subprocess.run([sys.executable, "-c", "import loopweave, llvmlite.binding, islpy"], env=env, check=True)
    timing = "import loopweave, islpy, llvmlite.binding\n" + _COMPILE
    cold = float(subprocess.run([sys.executable, "-c", timing], env=env, check=True, capture_output=True,
                                text=True).stdout.split()[-1])
    cached = float(subprocess.run([sys.executable, "-c", timing], env=env, check=True, capture_output=True,
                                  text=True).stdout.split()[-1])
    return cold, cached


def main() -> None:
    import loopweave as lw
    from loopweave.kernels import design_matmul_schedule
    cold, cached = compile_times()
    print(f"lower + build of the DESIGN.md matmul: cold {cold:.3f} s, from the disk cache {cached:.3f} s "
          f"(imports excluded)")
    from .parallel_launch import launch_overhead_us
    for threads in (2,):
        print(f"parallel launch overhead ({threads} threads, empty body): {launch_overhead_us(threads):.2f} us")
    s, args = design_matmul_schedule()
    f = lw.build(s, args)
    n = 1024
    rng = np.random.default_rng(0)
    a = rng.random((n, n), dtype=np.float32)
    b = rng.random((n, n), dtype=np.float32)
    c = np.empty((n, n), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    out = np.empty_like(c)
    cmp = interleaved(lambda: f(a, b, c), lambda: np.matmul(a, b, out=out), pairs=15)
    print(f"{'':<34} {'ours GF':>9} {'numpy GF':>9} {'ratio':>7}")
    print(cmp.row("DESIGN.md matmul N=1024 (2 thr)", 2.0 * n ** 3))


if __name__ == "__main__":
    main()
