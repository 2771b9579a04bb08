"""The op library's default CUDA schedules: the kernels they make (launch shape, shared memory,
vector accesses), their values (emulated on the CPU; on a GPU with marker ``gpu``)."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.dsl.visitor import post_order_visit
from loopweave.lowering.ir import Allocate, KernelLaunch


def _kernels(func):
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, KernelLaunch) else None)
    return found


def _matmul(m, n, k):
    A, B = lw.placeholder((m, k), name="A"), lw.placeholder((k, n), name="B")
    C = nn_ops.matmul(A, B)
    return nn_ops.schedule(C, "cuda"), [A, B, C]


def test_matmul_kernel_shape():
    s, args = _matmul(4096, 4096, 4096)
    func = lw.lower(s, args, target="cuda")
    (k,) = _kernels(func)
    assert [g.value for g in k.grid] == [64, 32, 1]          # 128 x 64 tiles
    assert [b.value for b in k.block] == [16, 16, 1]         # 8 x 4 outputs per thread
    shared = []
    post_order_visit(k.body, lambda n: shared.append(n) if isinstance(n, Allocate) and n.buffer.scope == "shared"
                     else None)
    # whole tiles: the 128 x 32 and 32 x 64 panels double-buffered (two slots each), 48 KB in all
    assert sorted((a.buffer.name, a.extent.value) for a in shared) == [("A.shared", 8192), ("B.shared", 4096)]
    source = lw.build(s, args, target="cuda:sm_90").get_source("cuda")
    assert "lw_cp_async16(&A_shared[" in source                     # 16-byte cp.async copies
    assert "reinterpret_cast<const float4*>(&B_shared[" in source   # float4 shared loads in the inner loop
    assert "long long" not in source                                # 32-bit index arithmetic
    assert "*reinterpret_cast<float4*>(&matmul[" in source          # float4 stores of the register block
    loop = source[source.index("for (int k_outer"):]
    assert loop.count("lw_cp_async_wait<1>();") == 1                # the next step's copies stay in flight
    assert loop.count("__syncthreads();") == 2                      # two barriers per k step


def test_matmul_before_sm80_fills_its_panels_through_registers():
    """cp.async exists from sm_80 on: for an older GPU the default schedule keeps the register pipeline."""
    A, B = lw.placeholder((1024, 1024), name="A"), lw.placeholder((1024, 1024), name="B")
    C = nn_ops.matmul(A, B)
    kernel = lw.build(nn_ops.schedule(C, "cuda:sm_75"), [A, B, C], target="cuda:sm_75").get_source("cuda")
    assert "lw_cp_async16(" not in kernel.split("extern")[-1] and "float4*>(&A[" in kernel


def test_matmul_panels_through_registers():
    """``asynchronous=False``: the register pipeline (float4 global loads held over the step's
    arithmetic, one barrier per step), the form for GPUs before sm_80."""
    from loopweave.nn_ops.ops.cuda.matmul import _schedule_gemm_cuda
    A, B = lw.placeholder((4096, 4096), name="A"), lw.placeholder((4096, 4096), name="B")
    C = nn_ops.matmul(A, B)
    s = lw.create_schedule(C)
    _schedule_gemm_cuda(s, C.op, lw.target.resolve_target("cuda"), batch=False, asynchronous=False)
    source = lw.build(s, [A, B, C], target="cuda:sm_90").get_source("cuda")
    assert "reinterpret_cast<const float4*>(&A[" in source and "cp_async" not in source.split("extern")[-1]
    loop = source[source.index("for (int k_outer"):]
    assert loop.count("__syncthreads();") == 1                      # one barrier per k step
    assert source.count("__syncthreads();") == 3                    # + the two around the first panels


@pytest.mark.parametrize("panel, floats", [("steps", 2 * 16 * 128), ("padded_steps", 2 * 16 * 132)])
def test_matmul_a_panel_by_steps(panel, floats):
    """Step-major A (``store_a_panel``): a thread's 8 rows of one step are two float4 loads into
    registers; padded, each step's row is 132 floats."""
    from loopweave.nn_ops.ops.cuda.matmul import _schedule_gemm_cuda
    A, B = lw.placeholder((1024, 1024), name="A"), lw.placeholder((1024, 1024), name="B")
    C = nn_ops.matmul(A, B)
    s = lw.create_schedule(C)
    _schedule_gemm_cuda(s, C.op, lw.target.resolve_target("cuda"), batch=False, k_tile=16, a_panel=panel)
    (k,) = _kernels(lw.lower(s, [A, B, C], target="cuda"))
    shared = []
    post_order_visit(k.body, lambda n: shared.append(n) if isinstance(n, Allocate) and n.buffer.scope == "shared"
                     else None)
    assert max(a.extent.value for a in shared if a.buffer.name == "A.shared") == floats
    source = lw.build(s, [A, B, C], target="cuda:sm_90").get_source("cuda")
    assert source.count("reinterpret_cast<const float4*>(&A_shared[") == 2 * 16
    assert "A_shared_local[0] * " in source
    with pytest.raises(ValueError, match="a_panel='columns': use one of rows, steps, padded_steps"):
        _schedule_gemm_cuda(lw.create_schedule(C), C.op, lw.target.resolve_target("cuda"), batch=False,
                            a_panel="columns")


@pytest.mark.parametrize("k, step", [(4096, 32), (48, 16), (20, 8)])
def test_matmul_reduction_step_is_the_deepest_whole_one(k, step):
    """32-deep steps where they are whole (and fit: 48 KB of double-buffered 128 x 64 panels),
    then 16; partial steps are 8 deep, single-buffered."""
    s, args = _matmul(1024, 1024, k)
    (kern,) = _kernels(lw.lower(s, args, target="cuda"))
    shared = []
    post_order_visit(kern.body, lambda n: shared.append(n) if isinstance(n, Allocate) and n.buffer.scope == "shared"
                     else None)
    slots = 2 if step > 8 else 1          # (a partial step has a copy of its own: more allocations)
    assert max(a.extent.value for a in shared if a.buffer.name == "A.shared") == slots * 128 * step
    assert max(a.extent.value for a in shared if a.buffer.name == "B.shared") == slots * 64 * step


def test_matmul_with_partial_tiles_is_not_double_buffered():
    s, args = _matmul(130, 200, 20)
    (k,) = _kernels(lw.lower(s, args, target="cuda"))
    shared = []
    post_order_visit(k.body, lambda n: shared.append(n) if isinstance(n, Allocate) and n.buffer.scope == "shared"
                     else None)
    # 64 x 64 tiles (4 x 4 per thread: 130 x 200 at 128 x 128 would be 4 blocks), k steps of 8, one slot
    # each, sized for a whole tile also where the last tile is partial (the partial register block's
    # select-valued extent bounds the region: left unbounded, A's panel took all 130 rows); the
    # reduction's whole steps and its last, partial one are separate loops, each with its panels
    assert {(a.buffer.name, a.extent.value) for a in shared} == {("A.shared", 512), ("B.shared", 512)}
    assert not any(a.buffer.name.endswith("prefetch") for a in shared)


def test_gemm_tiles_are_whole_where_they_can_be_and_fill_the_gpu():
    from loopweave.dsl.expr import Const
    from loopweave.nn_ops.ops.cuda.matmul import gemm_tiles
    c = lambda v: Const(v, "int64")   # noqa: E731
    assert gemm_tiles(c(4096), c(4096)) == (8, 4)             # 2048 blocks of 128 x 64
    assert gemm_tiles(c(1024), c(1024)) == (8, 4)             # 128 blocks (128 x 128 would be 64)
    assert gemm_tiles(c(128), c(64), c(32)) == (4, 4)         # the encoder's attention . V: 64 blocks, not 32
    assert gemm_tiles(c(4096), c(96)) == (8, 2)               # 96 = 3 x 32 columns: whole tiles


def test_batch_matmul_with_narrow_output_has_constant_register_blocks():
    """A partial register block has run-time extents, which nvcc puts in local memory (360 us
    instead of ~10 for the encoder's attention . V on an H100); whole tiles must have none."""
    A, B = lw.placeholder((32, 128, 128), name="A"), lw.placeholder((32, 128, 64), name="B")
    C = nn_ops.batch_matmul(A, B)
    lowered = lw.build(nn_ops.schedule(C, "cuda"), [A, B, C], target="cuda:sm_90").get_source("lowered")
    assert ".extent = select(" not in lowered and "cp_async_wait(" in lowered     # and double-buffered


def test_injective_schedule_uses_float4_and_one_kernel():
    A, B = lw.placeholder((32, 256), name="A"), lw.placeholder((32, 256), name="B")
    C = nn_ops.relu(nn_ops.add(A, B))
    s = nn_ops.schedule(C, "cuda")
    f = lw.build(s, [A, B, C], target="cuda:sm_90")
    (k,) = _kernels(lw.lower(s, [A, B, C], target="cuda"))
    assert [b.value for b in k.block] == [256, 1, 1] and k.grid[0].value == 8
    assert "make_float4(" in f.get_source("cuda")


def test_softmax_is_one_kernel_a_block_per_row():
    X = lw.placeholder((64, 100), name="X")
    Y = nn_ops.softmax(X, axis=1)
    func = lw.lower(nn_ops.schedule(Y, "cuda"), [X, Y], target="cuda")
    (k,) = _kernels(func)
    assert k.grid[0].value == 64 and k.block[0].value == 128
    shared = []
    post_order_visit(k.body, lambda n: shared.append(n.buffer.name) if isinstance(n, Allocate)
                     and n.buffer.scope == "shared" else None)
    assert sorted(shared) == ["softmax.max.rf", "softmax.sum.rf"]   # the partial results of 128 threads


def test_softmax_not_over_the_last_axis_falls_back_to_a_thread_per_row(emulate):
    X = lw.placeholder((5, 9, 4), name="X")
    Y = nn_ops.softmax(X, axis=1)
    s = nn_ops.schedule(Y, "cuda")
    assert len(_kernels(lw.lower(s, [X, Y], target="cuda"))) == 3
    x = np.random.default_rng(0).standard_normal((5, 9, 4)).astype("float32")
    y = np.empty_like(x)
    emulate(s, [X, Y])(x, y)
    e = np.exp(x - x.max(1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(1, keepdims=True), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kind", ["sum", "mean", "max", "min"])
def test_reductions_emulated(kind, emulate):
    from loopweave.nn_ops.ops.shape import reduce
    X = lw.placeholder((6, 7, 5), name="X")
    Y = reduce(X, [1], kind=kind, keepdims=False)
    f = emulate(nn_ops.schedule(Y, "cuda"), [X, Y])
    x = np.random.default_rng(1).standard_normal((6, 7, 5)).astype("float32")
    y = np.empty((6, 5), "float32")
    f(x, y)
    np.testing.assert_allclose(y, getattr(np, kind)(x, axis=1), rtol=1e-5, atol=1e-6)


def test_long_reduction_gets_a_block_per_output_short_ones_a_thread():
    from loopweave.nn_ops.ops.shape import reduce
    X = lw.placeholder((3, 5000), name="X")
    Y = reduce(X, [1], kind="max")
    (k,) = _kernels(lw.lower(nn_ops.schedule(Y, "cuda"), [X, Y], target="cuda"))
    assert k.grid[0].value == 3 and k.block[0].value == 256
    Z = reduce(X, [0], kind="max")       # 5000 outputs of 3 elements
    (k,) = _kernels(lw.lower(nn_ops.schedule(Z, "cuda"), [X, Z], target="cuda"))
    assert k.block[0].value == 128 and k.grid[0].value == 40


@pytest.mark.parametrize("shape", [(1, 300, 7), (2, 130, 129, 70)])
def test_gemm_ragged_shapes_emulated(shape, emulate):
    if len(shape) == 3:
        m, n, k = shape
        s, args = _matmul(m, n, k)
        ref = lambda a, b: a @ b   # noqa: E731
        shapes = [(m, k), (k, n), (m, n)]
    else:
        b, m, n, k = shape
        A, B = lw.placeholder((b, m, k), name="A"), lw.placeholder((b, k, n), name="B")
        C = nn_ops.batch_matmul(A, B)
        s, args = nn_ops.schedule(C, "cuda"), [A, B, C]
        ref = lambda a, b_: a @ b_   # noqa: E731
        shapes = [(b, m, k), (b, k, n), (b, m, n)]
    rng = np.random.default_rng(0)
    a, bb = (rng.standard_normal(sh).astype("float32") for sh in shapes[:2])
    c = np.empty(shapes[2], "float32")
    emulate(s, args)(a, bb, c)
    np.testing.assert_allclose(c, ref(a, bb), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
@pytest.mark.parametrize("mnk", [(512, 512, 512), (1000, 700, 300), (4096, 4096, 256)])
def test_matmul_on_gpu(mnk):
    m, n, k = mnk
    s, args = _matmul(m, n, k)
    f = lw.build(s, args, target="cuda")
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((m, k)).astype("float32"), rng.standard_normal((k, n)).astype("float32")
    c = np.empty((m, n), "float32")
    f(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_dense_bias_relu_and_softmax_on_gpu():
    X, W, bias = lw.placeholder((256, 512), name="X"), lw.placeholder((384, 512), name="W"), lw.placeholder((384,),
                                                                                                          name="b")
    Y = nn_ops.relu(nn_ops.dense(X, W, bias))
    rng = np.random.default_rng(0)
    x, w, b = (rng.standard_normal(sh).astype("float32") * 0.1 for sh in ((256, 512), (384, 512), (384,)))
    h = np.maximum(x @ w.T + b, 0)
    f = lw.build(nn_ops.schedule(Y, "cuda"), [X, W, bias, Y], target="cuda")
    got = np.empty((256, 384), "float32")
    f(x, w, b, got)
    np.testing.assert_allclose(got, h, rtol=1e-3, atol=1e-4)
    H = lw.placeholder((256, 384), name="H")
    S = nn_ops.softmax(H, axis=1)
    f = lw.build(nn_ops.schedule(S, "cuda"), [H, S], target="cuda")
    f(h.astype("float32"), got)
    e = np.exp(h - h.max(1, keepdims=True))
    np.testing.assert_allclose(got, e / e.sum(1, keepdims=True), rtol=1e-4, atol=1e-6)


def test_cuda_schedules_replay_from_their_trace():
    X = lw.placeholder((16, 300), name="X")
    A, B = lw.placeholder((200, 64), name="A"), lw.placeholder((64, 130), name="B")
    C, D = lw.placeholder((256, 64), name="C"), lw.placeholder((64, 128), name="D")   # whole tiles: double-buffered
    for out, args in ((nn_ops.softmax(X, axis=1), [X]), (nn_ops.matmul(A, B), [A, B]), (nn_ops.matmul(C, D), [C, D])):
        s = nn_ops.schedule(out, "cuda")
        again = lw.create_schedule(out)
        lw.Trace.from_json(s.trace.to_json()).apply(again)
        assert "set_scope('shared')" in str(s.trace) or "cache_read" in str(s.trace)
        assert str(lw.lower(again, args + [out], target="cuda")) == str(lw.lower(s, args + [out], target="cuda"))
    assert ".double_buffer(asynchronous=True)" in "\n".join(s.trace.code_lines())   # cp.async, replayed


@pytest.mark.parametrize("kind", ["max", "avg"])
def test_pooling_emulated(kind, emulate):
    X = lw.placeholder((2, 3, 9, 9), name="X")
    Y = nn_ops.pool2d(X, (3, 3), (2, 2), (1, 1, 1, 1), pool_type=kind)
    G = nn_ops.global_pool(X, kind)
    x = np.random.default_rng(0).standard_normal((2, 3, 9, 9)).astype("float32")
    g = np.empty((2, 3, 1, 1), "float32")
    emulate(nn_ops.schedule(G, "cuda"), [X, G])(x, g)
    want = x.max((2, 3), keepdims=True) if kind == "max" else x.mean((2, 3), keepdims=True)
    np.testing.assert_allclose(g, want, rtol=1e-5, atol=1e-6)
    f_cpu = lw.build(nn_ops.schedule(Y, "llvm"), [X, Y])
    y_cpu = np.empty((2, 3, 5, 5), "float32")
    f_cpu(x, y_cpu)
    y = np.empty_like(y_cpu)
    emulate(nn_ops.schedule(Y, "cuda"), [X, Y])(x, y)
    np.testing.assert_allclose(y, y_cpu, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("shape,axis", [((6, 100), -1), ((2, 3, 40), -1), ((2, 3, 4, 5), 1)])
def test_layer_norm_emulated(shape, axis, emulate):
    from loopweave.nn_ops.ops.norm import layer_norm
    X = lw.placeholder(shape, name="X")
    inner = shape[axis % len(shape):]
    G, B = lw.placeholder(inner, name="G"), lw.placeholder(inner, name="B")
    Y = layer_norm(X, G, B, axis, 1e-5)
    s = nn_ops.schedule(Y, "cuda")
    func = lw.lower(s, [X, G, B, Y], target="cuda")
    if axis == -1:
        (k,) = _kernels(func)                                    # a block per row, one kernel
        assert k.grid[0].value == int(np.prod(shape[:-1]))
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape).astype("float32")
    g, b = rng.standard_normal(inner).astype("float32"), rng.standard_normal(inner).astype("float32")
    y = np.empty_like(x)
    emulate(s, [X, G, B, Y])(x, g, b, y)
    ax = tuple(range(axis % len(shape), len(shape)))
    ref = (x - x.mean(ax, keepdims=True)) / np.sqrt(x.var(ax, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)
    lw.build(s, [X, G, B, Y], target="cuda:sm_90")               # and the CUDA C compiles (where a compiler is)


def _gemv_bias_relu(m, k, n):
    from loopweave.nn_ops.ops.gemv import matmul_small_m
    X, W, b = lw.placeholder((m, k), name="X"), lw.placeholder((k, n), name="W"), lw.placeholder((n,), name="b")
    Y = nn_ops.relu(nn_ops.add(matmul_small_m(X, W), b))
    return nn_ops.schedule(Y, "cuda"), [X, W, b, Y]


def test_gemv_splits_k_over_blocks_and_combines_in_a_second_kernel():
    s, args = _gemv_bias_relu(1, 512, 1000)
    partial, combine = _kernels(lw.lower(s, args, target="cuda"))
    assert [g.value for g in partial.grid] == [32, 4, 1] and [b.value for b in partial.block] == [32, 8, 1]
    assert [g.value for g in combine.grid] == [8, 1, 1]


@pytest.mark.parametrize("mkn", [(1, 512, 1000), (3, 100, 17), (16, 1280, 40)])
def test_gemv_with_epilogue_emulated(mkn, emulate):
    m, k, n = mkn
    s, args = _gemv_bias_relu(m, k, n)
    rng = np.random.default_rng(1)
    x, w, b = (rng.standard_normal(sh).astype("float32") for sh in ((m, k), (k, n), (n,)))
    y = np.full((m, n), np.nan, "float32")
    emulate(s, args)(x, w, b, y)
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)


@pytest.mark.gpu
def test_gemv_on_gpu():
    s, args = _gemv_bias_relu(1, 512, 1000)
    f = lw.build(s, args, target="cuda")
    rng = np.random.default_rng(2)
    x, w, b = (rng.standard_normal(sh).astype("float32") for sh in ((1, 512), (512, 1000), (1000,)))
    y = np.full((1, 1000), np.nan, "float32")
    f(x, w, b, y)
    np.testing.assert_allclose(y, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)



def _implicit_gemm_conv(n, c, oc, size, kernel, stride, pad, residual=False):
    from loopweave.nn_ops.ops.conv2d_gemm import conv2d_implicit_gemm
    X = lw.placeholder((n, c, size, size), name="X")
    W2 = lw.placeholder((oc, c * kernel * kernel), name="W2")
    b = lw.placeholder((oc, 1, 1), name="b")
    Y = nn_ops.add(conv2d_implicit_gemm(X, W2, (kernel, kernel), (stride, stride), (pad,) * 4, (1, 1)), b)
    args = [X, W2, b]
    if residual:
        R = lw.placeholder(tuple(int(d.value) for d in Y.shape), name="R")
        Y = nn_ops.add(Y, R)
        args.append(R)
    Z = nn_ops.relu(Y)
    return nn_ops.schedule(Z, "cuda"), args + [Z]


def _conv_reference(x, w, stride, pad):
    oc, c, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh = (xp.shape[2] - kh) // stride + 1
    ow = (xp.shape[3] - kw) // stride + 1
    ref = np.zeros((x.shape[0], oc, oh, ow), "float64")
    for ky in range(kh):
        for kx in range(kw):
            patch = xp[:, :, ky:ky + stride * oh:stride, kx:kx + stride * ow:stride]
            ref += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx])
    return ref


def test_implicit_gemm_conv_tiles_like_a_matmul():
    """3x3 64->64 at 56x56, batch 2: a 64 x 576 by 576 x 6272 product in 64 x 64 tiles, both panels
    double-buffered, the accumulator in registers (constant indices only)."""
    import re
    s, args = _implicit_gemm_conv(2, 64, 64, 56, 3, 1, 1, residual=True)
    (k,) = _kernels(lw.lower(s, args, target="cuda"))
    assert [g.value for g in k.grid] == [98, 1, 1] and [b.value for b in k.block] == [16, 16, 1]
    source = lw.build(s, args, target="cuda:sm_90").get_source("cuda")
    assert "W2_shared_prefetch" in source and "conv2d_cols_shared_prefetch" in source
    reads = re.findall(r"conv2d_gemm\[([^\]]*)\]", source)
    assert reads and all(re.fullmatch(r"[0-9]+", r.strip()) for r in reads), set(reads)


def _check_conv_with_residual(run, case, seed: int, tol: float) -> None:
    """Run ``run(x, W2, b, r, z)`` on random data and compare with numpy's conv + bias + residual + relu."""
    n, c, oc, size, kernel, stride, pad = case
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, c, size, size)).astype("float32")
    w = rng.standard_normal((oc, c, kernel, kernel)).astype("float32")
    b = rng.standard_normal((oc, 1, 1)).astype("float32")
    ref = _conv_reference(x, w, stride, pad)
    r = rng.standard_normal(ref.shape).astype("float32")
    z = np.full(ref.shape, np.nan, "float32")
    run(x, w.reshape(oc, -1), b, r, z)
    np.testing.assert_allclose(z, np.maximum(ref + b + r, 0), rtol=tol, atol=tol)


@pytest.mark.parametrize("case", [(2, 16, 32, 9, 3, 1, 1), (1, 3, 64, 20, 7, 2, 3), (2, 32, 64, 10, 1, 2, 0),
                                  (1, 24, 40, 7, 3, 1, 1)])
def test_implicit_gemm_conv_with_epilogue_emulated(case, emulate):
    s, args = _implicit_gemm_conv(*case, residual=True)
    _check_conv_with_residual(emulate(s, args), case, seed=5, tol=1e-4)


@pytest.mark.gpu
def test_implicit_gemm_conv_on_gpu():
    case = (2, 64, 128, 28, 3, 1, 1)
    s, args = _implicit_gemm_conv(*case, residual=True)
    _check_conv_with_residual(lw.build(s, args, target="cuda"), case, seed=6, tol=1e-3)


def test_implicit_gemm_conv_splits_long_reductions_over_few_tiles():
    """512->512 3x3 at 7x7, batch 1: 8 tiles of a 4608-long reduction; split into slices (a batch
    of partial products on blockIdx.z) and added by a second kernel with the epilogue."""
    from loopweave.nn_ops.ops.cuda.conv2d_gemm import split_k
    assert split_k(8, 4608) == 32 and split_k(98, 576) == 1 and split_k(4, 100) == 1
    s, args = _implicit_gemm_conv(1, 512, 512, 7, 3, 1, 1, residual=True)
    partial, combine = _kernels(lw.lower(s, args, target="cuda"))
    assert partial.grid[2].value == 32 and [b.value for b in partial.block] == [16, 16, 1]


@pytest.mark.parametrize("case", [(1, 256, 128, 7, 3, 1, 1), (2, 128, 64, 4, 3, 2, 1)])
def test_split_k_conv_emulated(case, emulate):
    s, args = _implicit_gemm_conv(*case, residual=True)
    assert len(_kernels(lw.lower(s, args, target="cuda"))) == 2
    _check_conv_with_residual(emulate(s, args), case, seed=7, tol=1e-3)


def test_partial_register_blocks_are_padded_to_constant_loops():
    """128 x 100 per batch in 64 x 64 tiles: the threads at the edge have partial register
    blocks; their loops run to the block's size behind a guard, so the indices stay constants."""
    import re
    A, B = lw.placeholder((32, 128, 128), name="A"), lw.placeholder((32, 128, 100), name="B")
    C = nn_ops.batch_matmul(A, B)
    source = lw.build(nn_ops.schedule(C, "cuda"), [A, B, C], target="cuda:sm_90").get_source("cuda")
    reads = set(re.findall(r"batch_matmul_local\[([^\]]*)\]", source))
    assert reads and all(re.fullmatch(r"[0-9]+(LL)?", r.strip()) for r in reads), reads
