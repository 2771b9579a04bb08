"""Tensor cores (``precision="tf32"`` / ``"fp16"``): warp tiles lowered to mma.sync, checked without a GPU.

The generated CUDA C runs on the CPU (``simt``, one fiber per GPU thread) with mma.sync emulated warp by warp in
PTX's fragment layout, so a wrong lane mapping (rows, columns, which lane holds what) gives
wrong values here; the PTX is assembled by ptxas where it is installed (the instruction's
operands, registers without spills).  On a GPU (marker ``gpu``) the same kernels run for real.
"""
import shutil
import subprocess

import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.errors import LoweringError
from loopweave.target import Target

TF32 = Target("cuda", cpu="sm_80", precision="tf32")


FP16 = Target("cuda", cpu="sm_80", precision="fp16")


def tf32(x):
    """``x`` rounded to tf32 as cvt.rna does (10 mantissa bits, ties away from zero)."""
    bits = np.ascontiguousarray(x, np.float32).view(np.uint32)
    return ((bits + np.uint32(0x1000)) & np.uint32(0xFFFFE000)).view(np.float32)


def fp16(x):
    """``x`` rounded to float16 (to nearest even) and back."""
    return np.asarray(x, np.float32).astype(np.float16).astype(np.float32)


def _case(kind, rng, rounded=tf32):
    """(output, arguments, inputs, the expected output from inputs ``rounded`` as the tensor cores round them)."""
    if kind == "matmul":
        A, B = lw.placeholder((128, 64), name="A"), lw.placeholder((64, 96), name="B")
        a, b = rng.standard_normal((128, 64)).astype("f4"), rng.standard_normal((64, 96)).astype("f4")
        return nn_ops.matmul(A, B), [A, B], [a, b], rounded(a).astype("f8") @ rounded(b)
    if kind == "dense_bias_relu":     # the epilogue runs on each lane's fragment elements
        X, W, bias = lw.placeholder((64, 40), name="X"), lw.placeholder((160, 40), name="W"), lw.placeholder(
            (160,), name="bias")
        x, w, bb = (rng.standard_normal(sh).astype("f4") for sh in ((64, 40), (160, 40), (160,)))
        return (nn_ops.relu(nn_ops.dense(X, W, bias)), [X, W, bias], [x, w, bb],
                np.maximum(rounded(x).astype("f8") @ rounded(w).T + bb, 0))
    if kind == "conv_padded_rows_and_taps":   # 24 channels (rows padded to 32), 27 taps (padded to 32)
        from loopweave.nn_ops.ops.conv2d_gemm import conv2d_implicit_gemm
        X, W2 = lw.placeholder((1, 3, 8, 8), name="X"), lw.placeholder((32, 32), name="W2")
        Y = conv2d_implicit_gemm(X, W2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), columns_multiple=32, out_channels=24)
        x, w = rng.standard_normal((1, 3, 8, 8)).astype("f4"), rng.standard_normal((24, 3, 3, 3)).astype("f4")
        w2 = np.zeros((32, 32), "f4")
        w2[:24, :27] = w.reshape(24, 27)
        windows = np.lib.stride_tricks.sliding_window_view(np.pad(rounded(x), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3),
                                                           axis=(2, 3))
        return Y, [X, W2], [x, w2], np.einsum("ncyxij,ocij->noyx", windows.astype("f8"), rounded(w))
    if kind == "conv_split_k":        # 1 tile of 32 x 32 (16 pixels padded) over 576 taps: 4 slices, then their sum
        from loopweave.nn_ops.ops.conv2d_gemm import conv2d_implicit_gemm
        X, W2 = lw.placeholder((1, 64, 4, 4), name="X"), lw.placeholder((32, 576), name="W2")
        Y = nn_ops.relu(conv2d_implicit_gemm(X, W2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), columns_multiple=32))
        x, w = rng.standard_normal((1, 64, 4, 4)).astype("f4"), rng.standard_normal((32, 64, 3, 3)).astype("f4")
        windows = np.lib.stride_tricks.sliding_window_view(np.pad(rounded(x), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3),
                                                           axis=(2, 3))
        expected = np.einsum("ncyxij,ocij->noyx", windows.astype("f8"), rounded(w))
        return Y, [X, W2], [x, w.reshape(32, 576)], np.maximum(expected, 0)
    if kind.startswith("conv"):       # implicit GEMM: rows the output channels, columns the pixels
        from loopweave.nn_ops.ops.conv2d_gemm import conv2d_implicit_gemm
        size = 8 if kind == "conv_bias_relu" else 6     # 36 pixels: columns padded to 64, two kernels
        X, W2, bias = lw.placeholder((1, 8, size, size), name="X"), lw.placeholder((32, 72), name="W2"), \
            lw.placeholder((32,), name="bias")
        Y = conv2d_implicit_gemm(X, W2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1), columns_multiple=32)
        Z = nn_ops.relu(lw.compute(Y.shape, lambda n, o, y, x: Y[n, o, y, x] + bias[o], name="Z", tag="broadcast"))
        x, w, bb = (rng.standard_normal(sh).astype("f4") for sh in ((1, 8, size, size), (32, 8, 3, 3), (32,)))
        windows = np.lib.stride_tricks.sliding_window_view(np.pad(rounded(x), ((0, 0), (0, 0), (1, 1), (1, 1))), (3, 3),
                                                           axis=(2, 3))
        expected = np.einsum("ncyxij,ocij->noyx", windows.astype("f8"), rounded(w)) + bb[None, :, None, None]
        return Z, [X, W2, bias], [x, w.reshape(32, 72), bb], np.maximum(expected, 0)
    A, B = lw.placeholder((2, 32, 24), name="A"), lw.placeholder((2, 24, 64), name="B")
    a, b = rng.standard_normal((2, 32, 24)).astype("f4"), rng.standard_normal((2, 24, 64)).astype("f4")
    return nn_ops.batch_matmul(A, B), [A, B], [a, b], rounded(a).astype("f8") @ rounded(b)


@pytest.mark.parametrize("kind, precision", [
    (kind, "tf32") for kind in ("matmul", "dense_bias_relu", "batch_matmul", "conv_bias_relu", "conv_padded_columns",
                                "conv_padded_rows_and_taps", "conv_split_k")] + [
    (kind, "fp16") for kind in ("matmul", "conv_padded_rows_and_taps", "conv_split_k")])   # (reductions of 16)
def test_tensor_core_kernels_run_on_cpu_threads(kind, precision, simt):
    rng = np.random.default_rng(0)
    target, rounded, mma = (TF32, tf32, "lw_mma_m16n8k8_tf32(") if precision == "tf32" else \
        (FP16, fp16, "lw_mma_m16n8k16_f16(")
    out, args, feeds, expected = _case(kind, rng, rounded)
    f = lw.build(nn_ops.schedule(out, target), args + [out], target=target)
    assert mma in f.get_source("cuda")
    if kind == "conv_split_k":
        assert "launch main_kernel0[grid=(1, 1, 4)" in f.get_source("lowered")
    got = np.full(expected.shape, np.nan, "f4")
    simt(f)(*feeds, got)
    # inputs rounded as the tensor cores round them: only the fp32 accumulation differs
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=2e-4)


def test_warp_tiles_compute_the_same_on_the_cpu(emulate):
    """A "warp" stage means what a "local" one means: target llvm computes it whole (exact fp32)."""
    rng = np.random.default_rng(1)
    out, args, feeds, _ = _case("dense_bias_relu", rng)
    got = np.zeros((64, 160), "f4")
    emulate(nn_ops.schedule(out, TF32), args + [out])(*feeds, got)
    x, w, bb = feeds
    np.testing.assert_allclose(got, np.maximum(x @ w.T + bb, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("precision", ["tf32", "fp16"])
def test_tensor_core_ptx_assembles_without_spills(precision, cuda_compilers):
    A, B = lw.placeholder((256, 512), name="A"), lw.placeholder((512, 256), name="B")
    C = nn_ops.matmul(A, B)
    target = TF32 if precision == "tf32" else FP16
    f = lw.build(nn_ops.schedule(C, target), [A, B, C], target=target)
    ptx = f.get_source("ptx")
    # 128 x 128 blocks, 64 x 64 warps: 4 x 8 sub-tiles, two 8-deep steps (or one 16-deep) per 16-deep
    # shared step (a 32-deep one would not fit double-buffered in 48 KiB)
    if precision == "tf32":
        assert ptx.count("mma.sync.aligned.m16n8k8.row.col.f32.tf32.tf32.f32") == 64
        assert "cvt.rna.tf32.f32" in ptx
    else:
        assert ptx.count("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32") == 32
        assert "cvt.rn.f16x2.f32" in ptx and "cvt.rn.f16.f32" in ptx
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas to assemble the PTX")
    proc = subprocess.run([ptxas, "-arch=sm_80", "-v", "-o", "/dev/null", "-"], input=ptx, capture_output=True,
                          text=True)
    assert proc.returncode == 0, proc.stderr[:2000]
    assert "0 bytes spill stores" in proc.stderr and "0 bytes stack frame" in proc.stderr, proc.stderr


def test_ragged_shapes_keep_the_fp32_schedule():
    """tf32 permits rounding, it does not demand it: shapes that make no whole warp tiles stay exact."""
    A, B = lw.placeholder((100, 64), name="A"), lw.placeholder((64, 128), name="B")
    C = nn_ops.matmul(A, B)
    source = lw.build(nn_ops.schedule(C, TF32), [A, B, C], target=TF32).get_source("cuda")
    assert "mma" not in source
    assert Target("cuda", precision="tf32").key() != Target("cuda").key()   # kernels cached apart


def _warp_schedule(vectorize_epilogue=False, warp_inside_lanes=False):
    A, B = lw.placeholder((64, 32), name="A"), lw.placeholder((32, 64), name="B")
    k = lw.reduce_axis((0, 32), name="k")
    C = lw.compute((64, 64), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lw.create_schedule(C)
    CW = s.cache_write(C, "warp")
    i, j = s[C].op.axis
    ti, i16 = s[C].split(i, factor=16)
    tj, j8 = s[C].split(j, factor=8)
    s[C].reorder(ti, tj, i16, j8)
    s[C].bind(ti, lw.thread_axis("blockIdx.x"))
    if warp_inside_lanes:
        s[C].bind(tj, lw.thread_axis("threadIdx.x"))
    if vectorize_epilogue:
        s[C].vectorize(j8)
    s[CW].compute_at(s[C], tj if warp_inside_lanes else ti)
    ci, cj = s[CW].op.axis
    cti, ci16 = s[CW].split(ci, factor=16)
    ctj, cj8 = s[CW].split(cj, factor=8)
    ko, k8 = s[CW].split(s[CW].op.reduce_axis[0], factor=8)
    s[CW].reorder(ko, cti, ctj, ci16, cj8, k8)
    return s, [A, B, C]


def test_warp_tile_lowering_names_what_does_not_fit():
    s, args = _warp_schedule(vectorize_epilogue=True)
    with pytest.raises(LoweringError, match=r"warp buffer 'C.warp' is accessed outside a warp tile nest"):
        lw.lower(s, args, target="cuda")
    s, args = _warp_schedule(warp_inside_lanes=True)
    with pytest.raises(LoweringError, match=r"inside a loop bound to threadIdx.x"):
        lw.lower(s, args, target="cuda")


def test_hand_written_warp_schedule_runs(simt):
    """The DSL primitive itself (``cache_write(C, "warp")``), one warp per 16-row block, no shared stages."""
    s, args = _warp_schedule()
    f = lw.build(s, args, target="cuda:sm_80")
    rng = np.random.default_rng(2)
    a, b = rng.standard_normal((64, 32)).astype("f4"), rng.standard_normal((32, 64)).astype("f4")
    got = np.zeros((64, 64), "f4")
    simt(f)(a, b, got)
    np.testing.assert_allclose(got, tf32(a).astype("f8") @ tf32(b), rtol=1e-5, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("mnk", [(512, 512, 512), (4096, 4096, 256)])
def test_tensor_core_matmul_on_gpu(mnk):
    m, n, k = mnk
    A, B = lw.placeholder((m, k), name="A"), lw.placeholder((k, n), name="B")
    C = nn_ops.matmul(A, B)
    target = Target("cuda", precision="tf32")
    f = lw.build(nn_ops.schedule(C, target), [A, B, C], target=target)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype("f4"), rng.standard_normal((k, n)).astype("f4")
    c = np.empty((m, n), "f4")
    f(a, b, c)
    np.testing.assert_allclose(c, tf32(a).astype("f8") @ tf32(b), rtol=1e-4, atol=1e-3)
