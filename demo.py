"""``loopweave demo``: build bundled kernels, check them against numpy, print timings."""
from __future__ import annotations

import time

import numpy as np

from .kernels import matmul_kernel, stencil_kernel


def _median_time(fn, repeat: int = 9) -> float:
    fn()
    samples = []
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        samples.append(time.perf_counter() - t0)
    return float(np.median(samples))


def run_demo(size: int = 1024) -> int:
    rng = np.random.default_rng(0)
    print(f"loopweave demo  (matmul N={size}, 3x3 stencil {size}x{size})")
    t0 = time.perf_counter()
    f, _ = matmul_kernel()
    t_build = time.perf_counter() - t0
    a = rng.random((size, size), dtype=np.float32)
    b = rng.random((size, size), dtype=np.float32)
    c = np.empty((size, size), np.float32)
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    ours = f.time(a, b, c)
    theirs = _median_time(lambda: a @ b)
    flops = 2.0 * size ** 3
    print(f"  matmul   built in {t_build:.2f}s, matches numpy; "
          f"loopweave {flops / ours / 1e9:7.1f} GFLOPS, numpy {flops / theirs / 1e9:7.1f} GFLOPS")
    t0 = time.perf_counter()
    g, _ = stencil_kernel()
    t_build = time.perf_counter() - t0
    x = rng.random((size, size), dtype=np.float32)
    y = np.empty((size - 2, size - 2), np.float32)
    g(x, y)
    blur_x = (x[:, :-2] + x[:, 1:-1] + x[:, 2:]) / 3
    ref = (blur_x[:-2] + blur_x[1:-1] + blur_x[2:]) / 3
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-5)
    ours = g.time(x, y)

    def numpy_stencil():
        bx = (x[:, :-2] + x[:, 1:-1] + x[:, 2:]) / 3
        return (bx[:-2] + bx[1:-1] + bx[2:]) / 3
    theirs = _median_time(numpy_stencil)
    print(f"  stencil  built in {t_build:.2f}s, matches numpy; "
          f"loopweave {ours * 1e3:7.3f} ms, numpy {theirs * 1e3:7.3f} ms")
    print("demo: ok")
    return 0
