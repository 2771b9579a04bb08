"""The CPU run of generated CUDA C (``simt``) fails where a GPU would, not only where a GPU always does.

Each case is a kernel with a fault a GPU shows only sometimes (a barrier before the
cp.async wait, a read of shared memory nobody wrote, a block counting on another, a
barrier some threads skip): under ``simt`` it gives a wrong result, or an error, on
every run.  The same kernels without the fault give the right one.
"""
import ctypes
import re

import numpy as np
import pytest

import loopweave as lw
from loopweave.target import Target

from .simt import EmulationError, compile_source, launch, launcher
from .test_async_copies import _matmul


def _run(simt_compiler, source: str, name: str, grid, block, *arrays):
    """Run hand-written kernel ``name(float* ...)`` of ``source`` over ``grid`` x ``block`` on ``arrays``."""
    lib = compile_source(*simt_compiler, source + "\n" +
                         launcher(name, [f"(float*)(*(unsigned long long*)args[{k}])" for k in range(len(arrays))]))
    launch(lib, getattr(lib, f"lw_launch_{name}"), grid, block,
           [ctypes.c_uint64(a.ctypes.data) for a in arrays])


@pytest.mark.parametrize("precision", ["fp32", "tf32"])
def test_a_barrier_before_the_cp_async_wait_gives_a_wrong_product(precision, simt):
    """The generated double-buffered GEMM with its wait and the barrier after it swapped: the barrier
    no longer publishes the copies, and threads read tiles other threads have not received yet."""
    target = Target("cuda", cpu="sm_80", precision=precision)
    s, args = _matmul(128, 64, 96, target)
    f = lw.build(s, args, target=target)
    source = f.get_source("cuda")
    swapped, n = re.subn(r"lw_cp_async_wait<1>\(\);\n(\s*)__syncthreads\(\);",
                         r"__syncthreads();\n\1lw_cp_async_wait<1>();", source)
    assert n == 1
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((128, 96)).astype("f4"), rng.standard_normal((96, 64)).astype("f4")
    right, wrong = np.zeros((128, 64), "f4"), np.zeros((128, 64), "f4")
    simt(f)(a, b, right)
    simt(f, swapped)(a, b, wrong)
    expected = a.astype("f8") @ b
    tolerance = dict(rtol=1e-5, atol=1e-4) if precision == "fp32" else dict(rtol=1e-2, atol=1e-2)
    np.testing.assert_allclose(right, expected, **tolerance)
    assert not np.allclose(wrong, expected, **tolerance, equal_nan=False)


def test_a_wait_group_leaves_the_newest_groups_in_flight(simt_compiler):
    """wait_group 1 lands every committed group but the newest; copies land in the issuing
    thread's shared memory only then."""
    source = r"""
    extern "C" __global__ void groups(float* __restrict__ x, float* __restrict__ y) {
      __shared__ __align__(16) float s[16];
      lw_cp_async16(&s[4 * threadIdx.x], &x[4 * threadIdx.x]);
      lw_cp_async_commit();
      lw_cp_async16(&s[8 + 4 * threadIdx.x], &x[8 + 4 * threadIdx.x]);
      lw_cp_async_commit();
      for (int i = 0; i < 4; ++i) y[4 * threadIdx.x + i] = s[4 * threadIdx.x + i];
      for (int i = 0; i < 4; ++i) y[16 + 4 * threadIdx.x + i] = s[8 + 4 * threadIdx.x + i];
      lw_cp_async_wait<1>();
      for (int i = 0; i < 4; ++i) y[32 + 4 * threadIdx.x + i] = s[4 * threadIdx.x + i];
      for (int i = 0; i < 4; ++i) y[48 + 4 * threadIdx.x + i] = s[8 + 4 * threadIdx.x + i];
      lw_cp_async_wait<0>();
      for (int i = 0; i < 4; ++i) y[64 + 4 * threadIdx.x + i] = s[8 + 4 * threadIdx.x + i];
    }
    """
    x = np.arange(16, dtype="f4")
    y = np.zeros(80, "f4")
    _run(simt_compiler, source, "groups", (1, 1, 1), (2, 1, 1), x, y)
    assert np.isnan(y[:8]).all() and np.isnan(y[16:24]).all()       # nothing landed before a wait
    np.testing.assert_array_equal(y[32:40], x[:8])                     # the older group landed at wait<1>
    assert np.isnan(y[48:56]).all()                                    # the newest is still in flight
    np.testing.assert_array_equal(y[64:72], x[8:])                     # wait<0> lands it


def test_a_read_of_shared_memory_nobody_wrote_is_nan(simt_compiler):
    source = r"""
    extern "C" __global__ void halo(float* __restrict__ x, float* __restrict__ y) {
      __shared__ __align__(16) float tile[64];
      tile[threadIdx.x] = x[blockIdx.x * 32 + threadIdx.x];
      __syncthreads();
      y[blockIdx.x * 32 + threadIdx.x] = tile[READ];
    }
    """
    x = np.arange(128, dtype="f4")
    y = np.zeros(128, "f4")
    _run(simt_compiler, source.replace("READ", "31 - threadIdx.x"), "halo", (4, 1, 1), (32, 1, 1), x, y)
    np.testing.assert_array_equal(y, x.reshape(4, 32)[:, ::-1].ravel())     # what the block wrote
    _run(simt_compiler, source.replace("READ", "threadIdx.x + 32"), "halo", (4, 1, 1), (32, 1, 1), x, y)
    assert np.isnan(y).all()                                              # what nobody wrote


def test_a_missing_barrier_reads_what_other_threads_have_not_written(simt_compiler):
    source = r"""
    extern "C" __global__ void reverse(float* __restrict__ x, float* __restrict__ y) {
      __shared__ __align__(16) float tile[32];
      tile[threadIdx.x] = x[threadIdx.x];
      BARRIER
      y[threadIdx.x] = tile[31 - threadIdx.x];
    }
    """
    x = np.arange(32, dtype="f4")
    y = np.zeros(32, "f4")
    _run(simt_compiler, source.replace("BARRIER", "__syncthreads();"), "reverse", (1, 1, 1), (32, 1, 1), x, y)
    np.testing.assert_array_equal(y, x[::-1])
    _run(simt_compiler, source.replace("BARRIER", ""), "reverse", (1, 1, 1), (32, 1, 1), x, y)
    assert np.isnan(y).any()


def test_blocks_run_out_of_order(simt_compiler):
    """A block that reads what the block before it wrote in the same launch (a chain no GPU keeps)."""
    source = r"""
    extern "C" __global__ void chain(float* __restrict__ y) {
      if (threadIdx.x == 0) y[blockIdx.x] = blockIdx.x == 0 ? 1.0f : y[blockIdx.x - 1] + 1.0f;
    }
    """
    y = np.zeros(16, "f4")
    _run(simt_compiler, source, "chain", (16, 1, 1), (32, 1, 1), y)
    assert not np.array_equal(y, np.arange(1, 17, dtype="f4"))


def test_a_barrier_some_threads_skip_is_an_error_not_a_hang(simt_compiler):
    source = r"""
    extern "C" __global__ void skip(float* __restrict__ y) {
      if (threadIdx.x < 16) __syncthreads();
      y[threadIdx.x] = 1.0f;
    }
    """
    with pytest.raises(EmulationError, match=r"waits at a barrier that not all threads of its block"):
        _run(simt_compiler, source, "skip", (1, 1, 1), (32, 1, 1), np.zeros(32, "f4"))
