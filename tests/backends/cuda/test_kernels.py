"""The CUDA test kernels: each is generated, compiled to PTX by every compiler present
(NVRTC, nvcc), emulated on the CPU against numpy (the schedule's values), its CUDA C run
on the CPU against numpy (``simt``: the code itself, barriers included), and
(marker ``gpu``) run on a GPU.

A case is ``(schedule, args, env)`` plus a numpy reference; ``env`` binds the
symbolic sizes for the run.  Outputs are the arguments after the inputs.
"""
import math
import re

import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops

BX, TX = lw.thread_axis("blockIdx.x"), lw.thread_axis("threadIdx.x")


def _bind_1d(stage, axis, threads=64):
    o, i = stage.split(axis, factor=threads)
    stage.bind(o, lw.thread_axis("blockIdx.x"))
    stage.bind(i, lw.thread_axis("threadIdx.x"))
    return o, i


def case_vector_add():
    n = lw.var("n")
    A, B = lw.placeholder((n,), name="A"), lw.placeholder((n,), name="B")
    C = lw.compute((n,), lambda i: A[i] + B[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    _bind_1d(s[C], C.op.axis[0])
    return s, [A, B, C], {"n": 1000}, lambda a, b: [a + b * 2]


def case_math_intrinsics():
    A = lw.placeholder((37, 5), name="A")
    C = lw.compute((37, 5), lambda i, j: lw.exp(A[i, j]) + lw.sqrt(lw.abs(A[i, j])) + lw.tanh(A[i, j])
                   + lw.sigmoid(A[i, j]) + lw.erf(A[i, j]) + lw.pow(lw.abs(A[i, j]), 1.5) + lw.floor(A[i, j] * 3.0)
                   + lw.round(A[i, j] * 2.0) + lw.log(lw.abs(A[i, j]) + 1.0) + lw.rsqrt(lw.abs(A[i, j]) + 1.0),
                   name="C")
    s = lw.create_schedule(C)
    _bind_1d(s[C], s[C].fuse(*C.op.axis), 32)

    def ref(a):
        erf = np.vectorize(math.erf)(a).astype("float32")
        return [np.exp(a) + np.sqrt(np.abs(a)) + np.tanh(a) + 1 / (1 + np.exp(-a)) + erf + np.abs(a) ** 1.5
                + np.floor(a * 3) + np.round(a * 2) + np.log(np.abs(a) + 1) + 1 / np.sqrt(np.abs(a) + 1)]
    return s, [A, C], {}, ref


def case_int_floordiv_float64():
    A = lw.placeholder((50,), name="A", dtype="int32")
    D = lw.placeholder((50,), name="D", dtype="float64")
    C = lw.compute((50,), lambda i: A[i] // 3 + A[i] % 4 + lw.max(A[i], 0) // 8, name="C")
    E = lw.compute((50,), lambda i: lw.cast("float64", C[i]) * D[i] + lw.min(D[i], 0.25), name="E")
    s = lw.create_schedule(E)
    s[C].compute_inline()
    _bind_1d(s[E], E.op.axis[0], 32)

    def ref(a, d):
        c = a // 3 + a % 4 + np.maximum(a, 0) // 8
        return [c.astype("float64") * d + np.minimum(d, 0.25)]
    return s, [A, D, E], {}, ref


def case_bitwise_and_shifts():
    """&, |, ^, ~ and shifts on a narrow signed and a wide unsigned dtype; the amounts (-40..39)
    leave [0, bits), where C is undefined and the result must be numpy's (0 or the sign fill)."""
    tensors = []
    for dt in ("int8", "uint32"):
        A, B = lw.placeholder((50,), name="A_" + dt, dtype=dt), lw.placeholder((50,), name="B_" + dt, dtype=dt)
        tensors += [A, B]
    outs = []
    for A, B in (tensors[:2], tensors[2:]):
        outs += [lw.compute((50,), lambda i: (A[i] & B[i]) ^ (~A[i] | B[i]), name="logic_" + A.dtype),
                 lw.compute((50,), lambda i: A[i] << B[i], name="shl_" + A.dtype),
                 lw.compute((50,), lambda i: A[i] >> B[i], name="shr_" + A.dtype)]
    s = lw.create_schedule(outs)
    for C in outs:
        _bind_1d(s[C], C.op.axis[0], 32)

    def ref(a8, b8, a32, b32):
        return [r for a, b in ((a8, b8), (a32, b32))
                for r in ((a & b) ^ (~a | b), np.left_shift(a, b), np.right_shift(a, b))]
    return s, tensors + outs, {}, ref


def case_bool_select_uint8():
    A = lw.placeholder((64,), name="A")
    M = lw.compute((64,), lambda i: A[i] > 0.0, name="M")
    C = lw.compute((64,), lambda i: lw.select(M[i], lw.cast("uint8", 7), lw.cast("uint8", 3)), name="C")
    s = lw.create_schedule([M, C])
    _bind_1d(s[M], M.op.axis[0], 32)
    _bind_1d(s[C], C.op.axis[0], 32)
    return s, [A, M, C], {}, lambda a: [a > 0, np.where(a > 0, 7, 3).astype("uint8")]


def case_row_sum_and_max():
    n, m = lw.var("n"), lw.var("m")
    A = lw.placeholder((n, m), name="A")
    k = lw.reduce_axis((0, m), name="k")
    S = lw.compute((n,), lambda i: lw.sum(A[i, k], axis=k), name="S")
    k2 = lw.reduce_axis((0, m), name="k2")
    M = lw.compute((n,), lambda i: lw.max(A[i, k2], axis=k2), name="M")
    s = lw.create_schedule([S, M])
    _bind_1d(s[S], S.op.axis[0], 32)
    _bind_1d(s[M], M.op.axis[0], 32)
    return s, [A, S, M], {"n": 70, "m": 33}, lambda a: [a.sum(1), a.max(1)]


def _shared_matmul(n, m, kk, tile=32, per_thread=4, k_tile=8, double_buffer=False):
    A = lw.placeholder((n, kk), name="A")
    B = lw.placeholder((kk, m), name="B")
    k = lw.reduce_axis((0, kk), name="k")
    C = lw.compute((n, m), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lw.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    by, yi = s[C].split(i, factor=tile)
    bx, xi = s[C].split(j, factor=tile)
    threads = tile // per_thread
    ty, yi = s[C].split(yi, nparts=threads)
    tx, xi = s[C].split(xi, nparts=threads)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    for axis, tag in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[C].bind(axis, lw.thread_axis(tag))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=k_tile)
    ci, cj = s[CL].op.axis
    s[CL].reorder(ko, ki, ci, cj)
    s[CL].unroll(ki)
    for cache in (AA, BB):
        s[cache].compute_at(s[CL], ko)
        fused = s[cache].fuse(*s[cache].op.axis)
        rest, fx = s[cache].split(fused, factor=threads)
        rest, fy = s[cache].split(rest, factor=threads)
        s[cache].bind(fy, lw.thread_axis("threadIdx.y"))
        s[cache].bind(fx, lw.thread_axis("threadIdx.x"))
        if double_buffer:
            s[cache].double_buffer()
    return s, [A, B, C], {}, lambda a, b: [a @ b]


def case_shared_matmul_divisible():
    return _shared_matmul(64, 96, 48)


def case_shared_matmul_tails():
    return _shared_matmul(50, 70, 45)


def case_shared_matmul_double_buffered():
    return _shared_matmul(64, 96, 48, double_buffer=True)


def case_nn_matmul():
    A, B = lw.placeholder((256, 128), name="A"), lw.placeholder((128, 256), name="B")
    C = nn_ops.matmul(A, B)
    return nn_ops.schedule(C, "cuda"), [A, B, C], {}, lambda a, b: [a @ b]


def _gemm_variant(m, n, k, **variant):
    from loopweave.nn_ops.ops.cuda.matmul import _schedule_gemm_cuda
    A, B = lw.placeholder((m, k), name="A"), lw.placeholder((k, n), name="B")
    C = nn_ops.matmul(A, B)
    s = lw.create_schedule(C)
    _schedule_gemm_cuda(s, C.op, lw.target.resolve_target("cuda"), batch=False, **variant)
    return s, [A, B, C], {}, lambda a, b: [a @ b]


def case_nn_matmul_deep_reduction_steps():
    return _gemm_variant(64, 128, 64, tiles=(4, 4), k_tile=32)


def case_nn_matmul_a_by_steps():
    return _gemm_variant(128, 64, 64, a_panel="steps")


def case_nn_matmul_warps_of_four_thread_rows():
    """32 x 8 threads: a warp is 4 rows of 8 threads (A step-major, read as float4s)."""
    return _gemm_variant(256, 64, 32, tiles=(8, 4), k_tile=16, a_panel="steps", threads=(32, 8))


def case_nn_matmul_a_by_padded_steps():
    return _gemm_variant(128, 64, 64, a_panel="padded_steps", k_tile=16)


def case_nn_matmul_sixteen_rows_per_thread():
    return _gemm_variant(256, 64, 48, tiles=(16, 4), k_tile=16, a_panel="steps")


def case_nn_matmul_square_register_block():
    return _gemm_variant(128, 128, 64, tiles=(8, 8), k_tile=16)


def case_nn_matmul_ragged():
    A, B = lw.placeholder((130, 20), name="A"), lw.placeholder((20, 200), name="B")
    C = nn_ops.matmul(A, B)
    return nn_ops.schedule(C, "cuda"), [A, B, C], {}, lambda a, b: [a @ b]


def case_nn_dense_bias_relu():
    X, W, b = lw.placeholder((64, 96), name="X"), lw.placeholder((128, 96), name="W"), lw.placeholder((128,), name="b")
    Y = nn_ops.relu(nn_ops.dense(X, W, b))
    return nn_ops.schedule(Y, "cuda"), [X, W, b, Y], {}, lambda x, w, bias: [np.maximum(x @ w.T + bias, 0)]


def case_nn_batch_matmul():
    A, B = lw.placeholder((3, 64, 32), name="A"), lw.placeholder((3, 32, 128), name="B")
    C = nn_ops.batch_matmul(A, B)
    return nn_ops.schedule(C, "cuda"), [A, B, C], {}, lambda a, b: [a @ b]


def case_nn_softmax():
    X = lw.placeholder((33, 50), name="X")
    Y = nn_ops.softmax(X, axis=1)

    def ref(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return [e / e.sum(1, keepdims=True)]
    return nn_ops.schedule(Y, "cuda"), [X, Y], {}, ref


def case_nn_softmax_long_rows():
    X = lw.placeholder((3, 1000), name="X")
    Y = nn_ops.softmax(X, axis=1)

    def ref(x):
        e = np.exp(x - x.max(1, keepdims=True))
        return [e / e.sum(1, keepdims=True)]
    return nn_ops.schedule(Y, "cuda"), [X, Y], {}, ref


def case_nn_long_reductions_block_per_output():
    from loopweave.nn_ops.ops.shape import reduce
    X = lw.placeholder((4, 3000), name="X")
    Z = lw.placeholder((2, 40, 60), name="Z")
    S = reduce(X, [1], kind="sum", keepdims=False, name="S")
    M = reduce(Z, [1, 2], kind="mean", keepdims=True, name="M")
    return (nn_ops.schedule([S, M], "cuda"), [X, Z, S, M], {},
            lambda x, z: [x.astype("float64").sum(1), z.astype("float64").mean((1, 2), keepdims=True)])


def case_nn_broadcast_add_vectorized():
    A, B = lw.placeholder((16, 64), name="A"), lw.placeholder((64,), name="B")
    C = nn_ops.add(A, B)
    return nn_ops.schedule(C, "cuda"), [A, B, C], {}, lambda a, b: [a + b]


def case_vector_types_int4_double2_and_8_lanes():
    A = lw.placeholder((16, 8), name="A", dtype="int32")
    D = lw.placeholder((16, 8), name="D", dtype="float64")
    F = lw.placeholder((16, 8), name="F")
    C = lw.compute((16, 8), lambda i, j: A[i, j] * 3 - A[i, j] // 2, name="C")
    E = lw.compute((16, 8), lambda i, j: D[i, j] * D[i, j] + 1.0, name="E")
    G = lw.compute((16, 8), lambda i, j: F[i, j] + 2.0, name="G")
    s = lw.create_schedule([C, E, G])
    for T_, lanes in ((C, 4), (E, 2), (G, 8)):
        i, j = T_.op.axis
        jo, ji = s[T_].split(j, factor=lanes)
        s[T_].vectorize(ji)
        s[T_].bind(i, lw.thread_axis("blockIdx.x"))
        s[T_].bind(jo, lw.thread_axis("threadIdx.x"))
    return s, [A, D, F, C, E, G], {}, lambda a, d, f: [a * 3 - a // 2, d * d + 1, f + 2]


def case_local_cache_read():
    A = lw.placeholder((40, 8), name="A")
    C = lw.compute((40,), lambda i: A[i, 0] * A[i, 7] + A[i, 3], name="C")
    s = lw.create_schedule(C)
    AL = s.cache_read(A, "local", [C])
    o, i = _bind_1d(s[C], C.op.axis[0], 16)
    s[AL].compute_at(s[C], i)
    return s, [A, C], {}, lambda a: [a[:, 0] * a[:, 7] + a[:, 3]]


def _conv_ref(x, w, pad, groups):
    """Direct NCHW convolution, stride 1."""
    x = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    oh, ow = h - kh + 1, wd - kw + 1
    out = np.zeros((n, oc, oh, ow), "float64")
    per_group = oc // groups
    for o in range(oc):
        g = o // per_group
        for ry in range(kh):
            for rx in range(kw):
                patch = x[:, g * cg:(g + 1) * cg, ry:ry + oh, rx:rx + ow]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, ry, rx])
    return out


def _conv_case(wshape, pad, groups, epilogue, xshape=(1, 8, 10, 10), stride=1):
    X = lw.placeholder(xshape, name="X")
    W = lw.placeholder(wshape, name="W")
    Y = nn_ops.conv2d(X, W, stride=stride, padding=pad, groups=groups)

    def conv(x, w):
        return _conv_ref(x, w, pad, groups)[:, :, ::stride, ::stride]
    if not epilogue:
        return nn_ops.schedule(Y, "cuda"), [X, W, Y], {}, lambda x, w: [conv(x, w)]
    b = lw.placeholder((wshape[0],), name="b")
    Z = nn_ops.relu(nn_ops.add(Y, nn_ops.reshape(b, (1, wshape[0], 1, 1))))
    return (nn_ops.schedule(Z, "cuda"), [X, W, b, Z], {},
            lambda x, w, bias: [np.maximum(conv(x, w) + bias.reshape(1, -1, 1, 1), 0)])


def case_nn_conv2d_32_channels():
    return _conv_case((32, 16, 3, 3), 1, 1, False, xshape=(1, 16, 12, 12))


def case_nn_conv2d_strided_batch_bias_relu():
    return _conv_case((64, 32, 3, 3), 1, 1, True, xshape=(2, 32, 9, 9), stride=2)


def case_nn_conv2d_stem():
    """7x7 stride 2 on 3 channels (a 3-channel input block)."""
    return _conv_case((32, 3, 7, 7), 3, 1, False, xshape=(1, 3, 20, 20), stride=2)


def case_nn_conv2d_3x3_bias_relu():
    return _conv_case((16, 8, 3, 3), 1, 1, True)


def case_nn_conv2d_1x1():
    return _conv_case((16, 8, 1, 1), 0, 1, False)


def case_nn_implicit_gemm_conv_whole_tiles():
    """64 x 144 by 144 x 128: whole tiles, so both panels double-buffered and the weights' panel
    stored as ``cuda/matmul.A_PANEL`` says."""
    from loopweave.nn_ops.ops.conv2d_gemm import conv2d_implicit_gemm
    X, W2 = lw.placeholder((2, 16, 8, 8), name="X"), lw.placeholder((64, 144), name="W2")
    Y = nn_ops.relu(conv2d_implicit_gemm(X, W2, (3, 3), (1, 1), (1, 1, 1, 1), (1, 1)))

    def ref(x, w2):
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)))
        cols = np.stack([xp[:, :, ky:ky + 8, kx:kx + 8] for ky in range(3) for kx in range(3)], axis=2)
        return [np.maximum(np.einsum("nckhw,ock->nohw", cols, w2.reshape(64, 16, 9)), 0)]
    return nn_ops.schedule(Y, "cuda"), [X, W2, Y], {}, ref


def case_nn_matmul_u8s8():
    """The int8 product over packed words (dp4a from sm_61; the simt run takes the C fallback)."""
    from loopweave.nn_ops.ops.int8_matmul import matmul_u8s8
    A, W = lw.placeholder((37, 68), name="A", dtype="uint8"), lw.placeholder((17, 50), name="W", dtype="int32")
    D = matmul_u8s8(A, W)

    def ref(a, w):
        a_bytes = a.astype(np.int64).reshape(37, 17, 4)
        w_bytes = w.view(np.int8).reshape(17, 50, 4).astype(np.int64)
        return [np.einsum("ikr,kjr->ij", a_bytes, w_bytes)]
    return nn_ops.schedule(D, "cuda"), [A, W, D], {}, ref


def case_nn_patches_padded_with_a_value():
    """An int8 convolution's patches (channels last), padded with a run-time zero point."""
    from loopweave.nn_ops.ops.patches import patches
    X, Z = lw.placeholder((1, 5, 6, 4), name="X", dtype="uint8"), lw.placeholder((1,), name="Z", dtype="uint8")
    P = patches(X, (3, 3), (2, 1), (1, 1, 1, 1), (1, 1), Z)

    def ref(x, z):
        xp = np.full((1, 7, 8, 4), z[0], np.uint8)
        xp[:, 1:6, 1:7] = x
        return [np.stack([np.stack([xp[:, ky:ky + 5:2, kx:kx + 6] for kx in range(3)], axis=3) for ky in range(3)],
                         axis=3)]
    return nn_ops.schedule(P, "cuda"), [X, Z, P], {}, ref


def case_nn_conv2d_depthwise():
    return _conv_case((8, 1, 3, 3), 1, 8, False)


def case_nn_conv2d_transpose_bias_relu():
    """Stride 2, padding, output_padding and groups; the bias/relu epilogue is the thread-bound stage."""
    X, W = lw.placeholder((1, 4, 5, 6), name="X"), lw.placeholder((4, 3, 3, 3), name="W")
    b = lw.placeholder((6,), name="b")
    Y = nn_ops.conv2d_transpose(X, W, stride=2, padding=(1, 1, 0, 1), output_padding=1, groups=2)
    Z = nn_ops.relu(nn_ops.add(Y, nn_ops.reshape(b, (1, 6, 1, 1))))

    def ref(x, w, bias):
        out = np.zeros((1, 6, 12, 14))      # the full output; the padding crops it to 11 x 12
        for c in range(4):
            g = c // 2
            for ky in range(3):
                for kx in range(3):
                    out[:, 3 * g:3 * g + 3, ky:ky + 9:2, kx:kx + 11:2] += \
                        np.einsum("nij,o->noij", x[:, c], w[c, :, ky, kx])
        return [np.maximum(out[:, :, 1:12, 1:13] + bias.reshape(1, -1, 1, 1), 0)]
    return nn_ops.schedule(Z, "cuda"), [X, W, b, Z], {}, ref


CASES = {name[5:]: fn for name, fn in globals().items() if name.startswith("case_")}


def _inputs(args, n_inputs, env, rng):
    arrays = []
    for t in args[:n_inputs]:
        shape = tuple(env[str(d)] if not str(d).isdigit() else int(str(d)) for d in t.shape)
        if t.dtype.startswith("float"):
            arrays.append(rng.uniform(-1, 1, size=shape).astype(t.dtype))
        else:
            arrays.append(rng.integers(-40, 40, size=shape).astype(t.dtype))
    return arrays


def _unwritten(want, dtype: str) -> np.ndarray:
    """An output before the kernel runs: NaN, the most negative integer, or for bools the opposite
    of the expected value, so an element the kernel should write and does not cannot pass."""
    if dtype.startswith("float"):
        return np.full(np.shape(want), np.nan, dtype)
    if dtype == "bool":
        return np.logical_not(want)
    return np.full(np.shape(want), np.iinfo(dtype).min, dtype)


def _run_and_compare(f, case):
    s, args, env, ref = case
    rng = np.random.default_rng(0)
    import inspect
    n_inputs = len(inspect.signature(ref).parameters)
    ins = _inputs(args, n_inputs, env, rng)
    expected = ref(*ins)
    outs = [_unwritten(e, t.dtype) for t, e in zip(args[n_inputs:], expected)]
    f(*ins, *outs)
    for t, got, want in zip(args[n_inputs:], outs, expected):
        if t.dtype.startswith("float"):
            np.testing.assert_allclose(got, np.asarray(want, t.dtype), rtol=2e-4, atol=2e-5, err_msg=t.name)
        else:
            np.testing.assert_array_equal(got, np.asarray(want).astype(t.dtype), err_msg=t.name)


@pytest.mark.parametrize("name", sorted(CASES))
def test_cuda_source_compiles_to_ptx(name, cuda_compilers):
    from loopweave.backends.cuda.compiler import compile_ptx
    s, args, _, _ = CASES[name]()
    f = lw.build(s, args, target="cuda:sm_80")
    source = f.get_source("cuda")
    kernels = [line for line in source.splitlines() if line.startswith('extern "C" __global__')]
    assert kernels and all("__restrict__" in k for k in kernels)
    for compiler in cuda_compilers:
        ptx, used = compile_ptx(source, "sm_80", compiler)
        assert used == compiler
        for k in kernels:
            name_ = re.findall(r"(\w+)\(", k)[1]   # after __launch_bounds__(
            assert f".entry {name_}(" in ptx


@pytest.mark.parametrize("name", sorted(CASES))
def test_gpu_schedule_emulated_on_cpu(name, emulate):
    case = CASES[name]()
    s, args, _, _ = case
    _run_and_compare(emulate(s, args), case)


@pytest.mark.gpu
@pytest.mark.parametrize("name", sorted(CASES))
def test_runs_on_gpu(name):
    case = CASES[name]()
    s, args, _, _ = case
    _run_and_compare(lw.build(s, args, target="cuda"), case)


@pytest.mark.parametrize("name", sorted(CASES))
def test_generated_cuda_runs_on_cpu_threads(name, simt):
    """The CUDA C itself, one fiber per GPU thread, two blocks at a time (see simt.py)."""
    case = CASES[name]()
    s, args, _, _ = case
    _run_and_compare(simt(lw.build(s, args, target="cuda:sm_80")), case)
