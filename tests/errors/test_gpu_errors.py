"""Illegal GPU schedules: each raises a specific error whose message names the stage or loop and the fix.
None of these needs a GPU or a CUDA compiler: they are raised while lowering."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops


def T(tag):
    return lw.thread_axis(tag)


def _vec(n=1024):
    A = lw.placeholder((n,), name="A")
    C = lw.compute((n,), lambda i: A[i] * 2.0, name="C")
    return A, C, lw.create_schedule(C)


def test_unbound_root_stage_runs_on_host():
    A, C, s = _vec()
    with pytest.raises(lw.ScheduleError, match=r"stage 'C': its outermost loop 'i' is not bound to a GPU block axis"
                                               r"[\s\S]*fix: bind the outer loops to blockIdx"):
        lw.lower(s, [A, C], target="cuda")


def test_unbound_producer_at_root_names_the_producer():
    A = lw.placeholder((64,), name="A")
    B = lw.compute((64,), lambda i: A[i] + 1.0, name="B")
    C = lw.compute((64,), lambda i: B[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    with pytest.raises(lw.ScheduleError, match=r"stage 'B': its outermost loop 'i' is not bound"):
        lw.build(s, [A, C], target="cuda")


def test_too_many_threads_per_block():
    A, C, s = _vec(4096)
    o, i = s[C].split(C.op.axis[0], factor=2048)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    with pytest.raises(lw.LoweringError, match=r"threadIdx.x has extent 2048, over the limit 1024"):
        lw.lower(s, [A, C], target="cuda")


def test_too_many_threads_over_two_axes():
    A = lw.placeholder((64, 64), name="A")
    C = lw.compute((64, 64), lambda i, j: A[i, j] + 1.0, name="C")
    s = lw.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=64)
    jo, ji = s[C].split(j, factor=32)
    s[C].reorder(io, jo, ii, ji)
    for ax, tag in ((io, "blockIdx.y"), (jo, "blockIdx.x"), (ii, "threadIdx.y"), (ji, "threadIdx.x")):
        s[C].bind(ax, T(tag))
    with pytest.raises(lw.LoweringError, match=r"computing C: 2048 threads per block \(32 x 64 x 1\) is over the "
                                               r"limit of 1024[\s\S]*fix: split the threadIdx-bound axes"):
        lw.lower(s, [A, C], target="cuda")


def test_shared_memory_over_the_limit():
    A = lw.placeholder((512, 512), name="A")
    C = lw.compute((512, 512), lambda i, j: A[i, j] + 1.0, name="C")
    s = lw.create_schedule(C)
    AA = s.cache_read(A, "shared", [C])
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=32)   # 32 rows of 512 floats: 64 KiB
    s[C].bind(io, T("blockIdx.x"))
    jo, ji = s[C].split(j, factor=128)
    s[C].reorder(io, ii, jo, ji)
    s[C].bind(ji, T("threadIdx.x"))
    s[AA].compute_at(s[C], io)
    with pytest.raises(lw.LoweringError, match=r"shared buffers \(A.shared\) take 65536 bytes, over the 49152-byte "
                                               r"static shared memory limit[\s\S]*fix: use smaller tiles"):
        lw.lower(s, [A, C], target="cuda")


def test_shared_memory_limit_comes_from_the_target():
    A = lw.placeholder((64, 64), name="A")
    C = lw.compute((64, 64), lambda i, j: A[i, j] + 1.0, name="C")
    s = lw.create_schedule(C)
    AA = s.cache_read(A, "shared", [C])
    i, j = C.op.axis
    s[C].bind(i, T("blockIdx.x"))
    s[C].bind(j, T("threadIdx.x"))
    s[AA].compute_at(s[C], i)
    lw.lower(s, [A, C], target="cuda")   # one row: 256 bytes
    small = lw.Target("cuda", max_shared_memory_per_block=128)
    with pytest.raises(lw.LoweringError, match=r"take 256 bytes, over the 128-byte"):
        lw.lower(s, [A, C], target=small)


def test_bind_reduction_axis_says_there_is_no_cross_thread_reduction():
    A = lw.placeholder((64, 64), name="A")
    k = lw.reduce_axis((0, 64), name="k")
    C = lw.compute((64,), lambda i: lw.sum(A[i, k], axis=k), name="C")
    s = lw.create_schedule(C)
    with pytest.raises(lw.ScheduleError, match=r"bind on stage 'C': axis 'k' is a reduction axis[\s\S]*"
                                               r"fix: loopweave has no cross-thread reduction: rfactor"):
        s[C].bind(k, T("threadIdx.x"))


def test_reduction_loop_outside_thread_loop():
    A = lw.placeholder((64, 64), name="A")
    k = lw.reduce_axis((0, 64), name="k")
    C = lw.compute((64,), lambda i: lw.sum(A[i, k], axis=k), name="C")
    s = lw.create_schedule(C)
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].reorder(o, k, i)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    with pytest.raises(lw.ScheduleError, match=r"stage 'C': reduction loop 'k' is outside the loop 'i.inner' bound "
                                               r"to threadIdx.x[\s\S]*fix: reorder"):
        lw.lower(s, [A, C], target="cuda")


def test_parallel_on_gpu():
    A, C, s = _vec()
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].parallel(i)
    with pytest.raises(lw.ScheduleError, match=r"stage 'C': axis 'i.inner' is marked parallel\(\), which has no "
                                               r"meaning on a GPU[\s\S]*fix: bind it"):
        lw.lower(s, [A, C], target="cuda")


def test_shared_stage_at_root():
    A = lw.placeholder((64,), name="A")
    C = lw.compute((64,), lambda i: A[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    AA = s.cache_read(A, "shared", [C])
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    with pytest.raises(lw.ScheduleError, match=r"stage 'A.shared': a 'shared' buffer is computed at root[\s\S]*"
                                               r"fix: compute_at it inside a blockIdx-bound loop"):
        lw.lower(s, [A, C], target="cuda")


def test_local_stage_bound_to_threads():
    A = lw.placeholder((64,), name="A")
    C = lw.compute((64,), lambda i: A[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    AL = s.cache_read(A, "local", [C])
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    s[AL].compute_at(s[C], o)
    s[AL].bind(AL.op.axis[0], T("threadIdx.x"))
    with pytest.raises(lw.ScheduleError, match=r"stage 'A.local': axis 'ax0' is bound to threadIdx.x, but the "
                                               r"stage lives in 'local' \(per-thread\) memory"):
        lw.lower(s, [A, C], target="cuda")


def test_block_axis_in_a_stage_inside_a_kernel():
    A = lw.placeholder((64,), name="A")
    C = lw.compute((64,), lambda i: A[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    AA = s.cache_read(A, "shared", [C])
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    s[AA].compute_at(s[C], o)
    s[AA].bind(AA.op.axis[0], T("blockIdx.x"))
    with pytest.raises(lw.ScheduleError, match=r"stage 'A.shared': axis 'ax0' is bound to blockIdx.x, but the stage "
                                               r"is computed inside 'C'"):
        lw.lower(s, [A, C], target="cuda")


def test_one_thread_axis_with_two_extents_in_a_kernel():
    A = lw.placeholder((64,), name="A")
    C = lw.compute((64,), lambda i: A[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    AA = s.cache_read(A, "shared", [C])
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    s[AA].compute_at(s[C], o)
    ao, ai = s[AA].split(AA.op.axis[0], factor=16)
    s[AA].bind(ai, T("threadIdx.x"))
    with pytest.raises(lw.LoweringError, match=r"threadIdx.x is bound to loops 'ax0.inner' \(extent 16\) and "
                                               r"'i.inner' \(extent 32\) in one kernel[\s\S]*fix: split them by "
                                               r"the same factor"):
        lw.lower(s, [A, C], target="cuda")


def test_symbolic_thread_extent():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    C = lw.compute((n, n), lambda i, j: A[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    i, j = C.op.axis
    s[C].bind(i, T("blockIdx.x"))
    s[C].bind(j, T("threadIdx.x"))
    with pytest.raises(lw.LoweringError, match=r"threadIdx.x is bound to loop 'j' of non-constant extent n"
                                               r"[\s\S]*fix: split the axis by a constant factor"):
        lw.lower(s, [A, C], target="cuda")


def test_bound_axis_twice_in_a_stage():
    A = lw.placeholder((64, 64), name="A")
    C = lw.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    i, j = C.op.axis
    s[C].bind(i, T("blockIdx.x"))
    s[C].bind(j, T("blockIdx.x"))
    with pytest.raises(lw.ScheduleError, match=r"stage 'C': axes 'i' and 'j' are both bound to blockIdx.x"):
        lw.lower(s, [A, C], target="cuda")


def test_block_axis_not_outermost():
    A = lw.placeholder((64, 64), name="A")
    C = lw.compute((64, 64), lambda i, j: A[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    i, j = C.op.axis
    io, ii = s[C].split(i, factor=8)
    s[C].bind(io, T("blockIdx.x"))
    s[C].bind(j, T("blockIdx.y"))
    with pytest.raises(lw.ScheduleError, match=r"axis 'j' is bound to blockIdx.y but is not among the outermost loops"):
        lw.lower(s, [A, C], target="cuda")


def test_gpu_function_built_for_the_cpu():
    A, C, s = _vec()
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    with pytest.raises(lw.BuildError, match=r"loops i.inner, i.outer are bound to GPU thread axes"):
        lw.build(s, [A, C], target="llvm")
    func = lw.lower(s, [A, C], target="cuda")
    with pytest.raises(lw.BuildError, match=r"was lowered for target 'cuda' \(it launches GPU kernels\)"):
        lw.build(func, target="llvm")


def test_cpu_function_built_for_cuda():
    A, C, s = _vec()
    with pytest.raises(lw.BuildError, match=r"'main' has no GPU kernel: lower it with lw.lower\(..., target='cuda'\)"):
        lw.build(lw.lower(s, [A, C]), target="cuda")


def test_unsupported_dtype_on_cuda():
    A = lw.placeholder((64,), name="A", dtype="float16")
    C = lw.compute((64,), lambda i: A[i] * lw.const(2.0, "float16"), name="C")
    s = lw.create_schedule(C)
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    with pytest.raises(lw.BuildError, match=r"'A' has dtype float16, which the CUDA backend does not support yet"):
        lw.build(s, [A, C], target="cuda")


def _built_vector_kernel():
    A, C, s = _vec(64)
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    return lw.build(s, [A, C], target="cuda")


def test_cuda_module_checks_arguments_before_anything_runs():
    f = _built_vector_kernel()
    a = np.ones(64, "float32")
    with pytest.raises(lw.ArgumentError, match=r"argument 'A' must have dtype float32, got float64"):
        f(a.astype("float64"), np.empty(64, "float32"))
    with pytest.raises(lw.ArgumentError, match=r"argument 'C' must have shape \(64\), got \(63,\)"):
        f(a, np.empty(63, "float32"))
    with pytest.raises(lw.ArgumentError, match=r"argument 'A' must be a numpy.ndarray, a loopweave DeviceArray or "
                                               r"a CUDA tensor with __dlpack__"):
        f([1.0] * 64, np.empty(64, "float32"))
    with pytest.raises(lw.ArgumentError, match=r"argument 'C' is written by main and overlaps argument 'A'"):
        f(a, a)
    with pytest.raises(lw.ArgumentError, match=r"no source of kind 'll'; kinds: lowered, cuda, ptx"):
        f.get_source("ll")


def test_calling_without_a_gpu_says_so():
    from loopweave.backends.cuda.driver import gpu_available
    if gpu_available():
        pytest.skip("this machine has a GPU")
    f = _built_vector_kernel()
    assert "main_kernel0" in f.get_source("cuda")
    with pytest.raises(lw.BuildError, match=r"no CUDA driver/GPU found[\s\S]*runs only on a machine with an "
                                            r"NVIDIA GPU"):
        f(np.ones(64, "float32"), np.empty(64, "float32"))
    with pytest.raises(lw.BuildError, match=r"no CUDA driver/GPU found"):
        lw.device_array(np.ones(4, "float32"))


def test_op_without_a_cuda_schedule_names_the_stage():
    X = lw.placeholder((8, 8), name="X")
    Y = lw.compute((8, 8), lambda i, j: X[j, i] * 2.0, name="mine", tag="custom")
    s = nn_ops.schedule(Y, "cuda")
    with pytest.raises(lw.ScheduleError, match=r"target 'cuda', stage 'mine': its outermost loop 'i' is not bound"):
        lw.lower(s, [X, Y], target="cuda")
