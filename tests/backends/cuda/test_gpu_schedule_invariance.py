"""A GPU schedule never changes the result (the GPU variant of tests/test_schedule_invariance.py).

hypothesis draws GPU schedules, made of the primitives a GPU user calls: for an
elementwise pipeline, fusing, block and thread sizes, float4 lanes, and how the
producer is computed (inlined, its own kernel, or per thread in registers); for a
matmul, block tiles, threads per block, the per-thread register block, the k step,
whether A and B are staged through shared memory, and whether that staging is
double-buffered.  A schedule the GPU checks
reject (``ScheduleError`` / ``LoweringError``, e.g. too many threads) is skipped as
illegal.  Every legal one is emulated on the CPU and compared with numpy (the
lowering is what varies), its CUDA C is run on the CPU (``simt``, with real
barriers, shuffled threads and poisoned shared memory), compiled with NVRTC when present (fast; nvcc would take a second per
example), and, marker ``gpu``, run on the GPU.
"""
import numpy as np
import pytest
from hypothesis import HealthCheck, assume, given, settings
from hypothesis import strategies as st

import loopweave as lw

SETTINGS = dict(deadline=None, derandomize=True, database=None,
                suppress_health_check=[HealthCheck.too_slow, HealthCheck.function_scoped_fixture])


def T(tag):
    return lw.thread_axis(tag)


def _elementwise(data):
    n = data.draw(st.integers(1, 70), label="n")
    m = data.draw(st.sampled_from([1, 4, 7, 16, 33]), label="m")
    A, B = lw.placeholder((n, m), name="A"), lw.placeholder((m,), name="B")
    P = lw.compute((n, m), lambda i, j: A[i, j] * 2.0 + B[j], name="P")
    C = lw.compute((n, m), lambda i, j: lw.exp(P[i, j]) - P[i, j] * B[j], name="C")
    s = lw.create_schedule(C)
    i, j = C.op.axis
    threads = data.draw(st.sampled_from([1, 3, 32, 64, 128, 256]), label="threads")
    lanes = data.draw(st.sampled_from([1, 2, 4]), label="lanes")
    inner = j
    if lanes > 1:
        j, inner = s[C].split(j, factor=lanes)
        s[C].vectorize(inner)
    fused = s[C].fuse(i, j) if data.draw(st.booleans(), label="fuse") else None
    if fused is None:
        s[C].bind(i, T("blockIdx.y"))
        bx, tx = s[C].split(j, factor=threads)
        s[C].reorder(i, bx, tx)
        s[C].bind(bx, T("blockIdx.x"))
    else:
        bx, tx = s[C].split(fused, factor=threads)
        s[C].bind(bx, T("blockIdx.x"))
    s[C].bind(tx, T("threadIdx.x"))
    where = data.draw(st.sampled_from(["inline", "kernel", "thread"]), label="producer")
    if where == "inline":
        s[P].compute_inline()
    elif where == "thread":
        s[P].compute_at(s[C], tx)
    else:
        po, pi = s[P].split(s[P].fuse(*P.op.axis), factor=threads)
        s[P].bind(po, T("blockIdx.x"))
        s[P].bind(pi, T("threadIdx.x"))
    return s, [A, B, C], lambda a, b: [np.exp(a * 2 + b) - (a * 2 + b) * b]


def _matmul(data):
    ty_n = data.draw(st.sampled_from([1, 2, 4, 8]), label="threads y")
    tx_n = data.draw(st.sampled_from([1, 4, 8, 16]), label="threads x")
    py = data.draw(st.sampled_from([1, 2, 4]), label="rows per thread")
    px = data.draw(st.sampled_from([1, 2, 4]), label="cols per thread")
    k_step = data.draw(st.sampled_from([1, 4, 8]), label="k step")
    double = data.draw(st.booleans(), label="double buffer")
    if double:   # double buffering copies the same shape every step: whole tiles only
        n = ty_n * py * data.draw(st.integers(1, 3), label="row blocks")
        m = tx_n * px * data.draw(st.integers(1, 3), label="col blocks")
        kk = k_step * data.draw(st.integers(1, 5), label="k steps")
    else:
        n = data.draw(st.integers(1, 48), label="n")
        m = data.draw(st.integers(1, 48), label="m")
        kk = data.draw(st.integers(1, 40), label="k")
    A, B = lw.placeholder((n, kk), name="A"), lw.placeholder((kk, m), name="B")
    k = lw.reduce_axis((0, kk), name="k")
    C = lw.compute((n, m), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lw.create_schedule(C)
    shared = [data.draw(st.booleans(), label="A shared"), data.draw(st.booleans(), label="B shared")]
    caches = [s.cache_read(t, "shared", [C]) if on else None for t, on in zip((A, B), shared)]
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    by, yi = s[C].split(i, factor=ty_n * py)
    bx, xi = s[C].split(j, factor=tx_n * px)
    ty, yi = s[C].split(yi, nparts=ty_n)
    tx, xi = s[C].split(xi, nparts=tx_n)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    for a, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[C].bind(a, T(tag))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=k_step)
    ci, cj = s[CL].op.axis
    s[CL].reorder(ko, ki, ci, cj)
    if data.draw(st.booleans(), label="unroll"):
        s[CL].unroll(ki)
    for cache in caches:
        if cache is None:
            continue
        if double:
            s[cache].double_buffer()
        s[cache].compute_at(s[CL], ko)
        f = s[cache].fuse(*s[cache].op.axis)
        rest, fx = s[cache].split(f, factor=tx_n)
        rest, fy = s[cache].split(rest, factor=ty_n)
        s[cache].bind(fy, T("threadIdx.y"))
        s[cache].bind(fx, T("threadIdx.x"))
    return s, [A, B, C], lambda a, b: [a @ b]


def _legal(s, args):
    try:
        lw.lower(s, args, target="cuda")
        return True
    except (lw.ScheduleError, lw.LoweringError):
        return False


def _compare(f, args, ref, n_inputs):
    rng = np.random.default_rng(0)
    ins = [rng.uniform(-1, 1, size=tuple(int(str(d)) for d in t.shape)).astype(t.dtype) for t in args[:n_inputs]]
    want = ref(*ins)
    outs = [np.full(w.shape, np.nan, "float32") for w in want]
    f(*ins, *outs)
    for got, w in zip(outs, want):
        np.testing.assert_allclose(got, w.astype("float32"), rtol=1e-4, atol=1e-5)


FAMILIES = {"elementwise": _elementwise, "matmul": _matmul}


@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=12, **SETTINGS)
@given(data=st.data())
def test_gpu_schedules_emulated_on_cpu(family, data, emulate):
    s, args, ref = FAMILIES[family](data)
    assume(_legal(s, args))
    _compare(emulate(s, args), args, ref, 2)


@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=12, **SETTINGS)
@given(data=st.data())
def test_gpu_schedules_compile_with_nvrtc(family, data):
    from loopweave.backends.cuda.compiler import compile_ptx, find_nvrtc
    if find_nvrtc() is None:
        pytest.skip("NVRTC is not installed (pip install 'loopweave[cuda]'); nvcc is too slow for many examples")
    s, args, _ = FAMILIES[family](data)
    assume(_legal(s, args))
    f = lw.build(s, args, target="cuda:sm_80")
    ptx, _ = compile_ptx(f.get_source("cuda"), "sm_80", "nvrtc")
    assert ".entry main_kernel0(" in ptx


@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=8, **SETTINGS)
@given(data=st.data())
def test_gpu_schedules_generated_cuda_on_cpu_threads(family, data, simt):
    s, args, ref = FAMILIES[family](data)
    assume(_legal(s, args))
    _compare(simt(lw.build(s, args, target="cuda:sm_80")), args, ref, 2)


@pytest.mark.gpu
@pytest.mark.parametrize("family", sorted(FAMILIES))
@settings(max_examples=25, **SETTINGS)
@given(data=st.data())
def test_gpu_schedules_on_gpu(family, data):
    s, args, ref = FAMILIES[family](data)
    assume(_legal(s, args))
    _compare(lw.build(s, args, target="cuda"), args, ref, 2)
