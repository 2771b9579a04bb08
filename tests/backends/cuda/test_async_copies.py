"""``double_buffer(asynchronous=True)``: shared panels filled by cp.async, checked without a GPU.

The generated CUDA C runs on the CPU (``simt``, where a cp.async copy lands only at the wait that
covers it, so the waits' and barriers' placement is what is checked); the PTX is assembled by ptxas where it is installed.
"""
import shutil
import subprocess

import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.errors import LoweringError
from loopweave.nn_ops.ops.cuda.matmul import _schedule_gemm_cuda
from loopweave.target import Target

from .test_tensor_cores import tf32


def _matmul(m, n, k, target, asynchronous=True):
    A, B = lw.placeholder((m, k), name="A"), lw.placeholder((k, n), name="B")
    C = nn_ops.matmul(A, B)
    s = lw.create_schedule(C)
    if target.precision == "tf32":
        from loopweave.nn_ops.ops.cuda import matmul_tensor_cores
        saved, matmul_tensor_cores.ASYNC_COPIES = matmul_tensor_cores.ASYNC_COPIES, asynchronous
        try:
            assert matmul_tensor_cores.schedule_gemm_tensor_cores(s, C.op, target, batch=False)
        finally:
            matmul_tensor_cores.ASYNC_COPIES = saved
    else:
        _schedule_gemm_cuda(s, C.op, target, batch=False, asynchronous=asynchronous)
    return s, [A, B, C]


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_async_double_buffering_runs_on_cpu_threads(precision, simt):
    target = Target("cuda", cpu="sm_80", precision=precision)
    s, args = _matmul(128, 64, 96, target)
    f = lw.build(s, args, target=target)
    source = f.get_source("cuda")
    loop = source[source.index("for (int k_outer"):]
    assert loop.count("lw_cp_async16(") == source.count("lw_cp_async16(") // 2 > 0   # the prologue's and the loop's
    assert loop.count("lw_cp_async_wait<1>();") == 1 and loop.count("__syncthreads();") == 2
    assert "_prefetch" not in source                                # no registers carry the next tile
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((128, 96)).astype("f4"), rng.standard_normal((96, 64)).astype("f4")
    got = np.full((128, 64), np.nan, "f4")
    simt(f)(a, b, got)
    expected = tf32(a).astype("f8") @ tf32(b) if precision == "tf32" else a.astype("f8") @ b
    np.testing.assert_allclose(got, expected, rtol=1e-5, atol=1e-4)


def test_async_copies_assemble(cuda_compilers):
    target = Target("cuda", cpu="sm_80")
    s, args = _matmul(256, 256, 256, target)
    ptx = lw.build(s, args, target=target).get_source("ptx")
    assert "cp.async.cg.shared.global" in ptx and "cp.async.wait_group 1" in ptx
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas to assemble the PTX")
    proc = subprocess.run([ptxas, "-arch=sm_80", "-o", "/dev/null", "-"], input=ptx, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[:2000]


def test_async_copy_of_a_computed_value_is_refused():
    """A copy that computes (here a transposed, scaled operand) cannot be a cp.async: lowering says so;
    the flag survives a trace replay."""
    A, B = lw.placeholder((64, 64), name="A"), lw.placeholder((64, 64), name="B")
    T = lw.compute((64, 64), lambda i, j: B[j, i] * 2.0, name="T")
    k = lw.reduce_axis((0, 64), name="k")
    C = lw.compute((64, 64), lambda i, j: lw.sum(A[i, k] * T[k, j], axis=k), name="C")
    s = lw.create_schedule(C)
    s[T].compute_inline()
    CL = s.cache_write(C, "local")
    TS = s.cache_read(T, "shared", [CL])
    i, j = s[C].op.axis
    s[C].bind(i, lw.thread_axis("blockIdx.x"))
    s[CL].compute_at(s[C], i)
    ko, _ = s[CL].split(s[CL].op.reduce_axis[0], factor=16)
    s[TS].compute_at(s[CL], ko)
    s[TS].bind(s[TS].op.axis[1], lw.thread_axis("threadIdx.x"))
    s[TS].double_buffer(asynchronous=True)
    assert "s[T_shared].double_buffer(asynchronous=True)" in s.trace.code_lines()
    replayed = lw.create_schedule(C)
    s.trace.apply(replayed)
    assert replayed.stage_by_name("T.shared").double_buffered == "async"
    for schedule in (s, replayed):
        with pytest.raises(LoweringError, match=r"double_buffer on 'T.shared': an asynchronous copy must store "
                                                r"a plain"):
            lw.lower(schedule, [A, B, C], target="cuda")


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_async_double_buffering_on_gpu(precision):
    target = Target("cuda", precision=precision)
    s, args = _matmul(1024, 512, 768, target)
    f = lw.build(s, args, target=target)
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((1024, 768)).astype("f4"), rng.standard_normal((768, 512)).astype("f4")
    got = np.empty((1024, 512), "f4")
    f(a, b, got)
    expected = tf32(a).astype("f8") @ tf32(b) if precision == "tf32" else a.astype("f8") @ b
    np.testing.assert_allclose(got, expected, rtol=1e-4, atol=1e-3)
