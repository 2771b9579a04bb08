"""Core numbers: compile time (cold and from the disk cache), parallel launch
overhead, and the matmul schedule of docs/design.md at N=1024 against numpy, interleaved.

``python -m benchmarks.core``
"""
from __future__ import annotations

import os
import subprocess
import sys
import tempfile

from .kernels import compare_with_numpy



_COMPILE = """
import time, loopweave as lw
t0 = time.perf_counter()
from loopweave.kernels import design_matmul_schedule
s, args = design_matmul_schedule()
lw.build(s, args)
print(time.perf_counter() - t0)
"""


def compile_times() -> tuple:
    """(cold seconds, cached seconds) for lower+build of the docs/design.md matmul, each in a fresh process."""
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
    print(f"lower + build of the docs/design.md matmul: cold {cold:.3f} s, from the disk cache {cached:.3f} s "
          f"(imports excluded)")
    from .parallel_launch import launch_overhead_us
    for threads in (2,):
        print(f"parallel launch overhead ({threads} threads, empty body): {launch_overhead_us(threads):.2f} us")
    s, args = design_matmul_schedule()
    f = lw.build(s, args)

    row = compare_with_numpy(f, (1024, 1024), (1024, 1024), "design.md matmul N=1024 (2 thr)", pairs=15)
    print(f"{'':<34} {'ours GF':>9} {'numpy GF':>9} {'ratio':>7}")
    print(row)

if __name__ == "__main__":
    main()
