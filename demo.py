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
    print(f"  matmul   (design.md schedule) built in {t_build:.2f}s, matches numpy; "
          f"loopweave {flops / ours / 1e9:7.1f} GFLOPS, numpy {flops / theirs / 1e9:7.1f} GFLOPS")
    import loopweave as lw
    from . import nn_ops
    A = lw.placeholder((size, size), name="A")
    B = lw.placeholder((size, size), name="B")
    C = nn_ops.matmul(A, B)
    t0 = time.perf_counter()
    g = lw.build(nn_ops.schedule(C), [A, B, C])
    t_build = time.perf_counter() - t0
    g(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)
    ours = g.time(a, b, c)
    print(f"  matmul   (nn_ops default)     built in {t_build:.2f}s, matches numpy; "
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
    print(f"  stencil  (compute_at)         built in {t_build:.2f}s, matches numpy; "
          f"loopweave {ours * 1e3:7.3f} ms, numpy {theirs * 1e3:7.3f} ms")
    _network_demo(quick=size < 512)
    print("demo: ok")
    return 0


def _network_demo(quick: bool) -> None:
    """Compile the bundled MobileNetV2 (seeded weights) and check it against a reference."""
    try:
        import onnx  # noqa: F401
    except ImportError:
        print("  network  skipped: install the 'onnx' extra (pip install loopweave[onnx]) to compile ONNX models")
        return
    import loopweave as lw
    from .nn_ops.testing import model_zoo
    size = 96 if quick else 224
    model = model_zoo.mobilenet_v2(size=size)
    t0 = time.perf_counter()
    exe = lw.compile(lw.from_onnx(model), progress=False)
    t_build = time.perf_counter() - t0
    x = np.random.default_rng(1).standard_normal((1, 3, size, size)).astype(np.float32)
    ours = exe.run({"input": x})[0]
    reference, peer = _reference_run(model, x)
    scale = float(np.abs(reference).max())
    np.testing.assert_allclose(ours, reference, rtol=1e-3, atol=1e-3 * scale)
    ours_t = _median_time(lambda: exe.run({"input": x}))
    line = (f"  network  MobileNetV2 {size}x{size} compiled in {t_build:.1f}s ({len(exe.kernels)} kernels), "
            f"matches {peer}; loopweave {ours_t * 1e3:.2f} ms")
    if peer == "onnxruntime":
        from .nn_ops.testing.onnxruntime_peer import onnxruntime_session
        sess = onnxruntime_session(model, threads=2)
        line += f", onnxruntime {_median_time(lambda: sess.run(None, {'input': x})) * 1e3:.2f} ms"
    print(line)


def _reference_run(model, x):
    """(output, name of the reference): onnxruntime when installed, else onnx's numpy evaluator."""
    try:
        from .nn_ops.testing.onnxruntime_peer import onnxruntime_session
        sess = onnxruntime_session(model, threads=2)
        return sess.run(None, {"input": x})[0], "onnxruntime"
    except ImportError:
        from onnx.reference import ReferenceEvaluator
        return ReferenceEvaluator(model).run(None, {"input": x})[0], "onnx.reference (numpy)"
