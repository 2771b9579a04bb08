"""Lowering for target cuda: kernels and launch extents, per-block shared regions, barriers."""
import pytest

import loopweave as lw
from loopweave.dsl.expr import Call, Const
from loopweave.dsl.visitor import post_order_visit
from loopweave.lowering.ir import Allocate, Evaluate, For, KernelLaunch, Seq


def T(tag):
    return lw.thread_axis(tag)


def _nodes(stmt, kind):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, kind) else None)
    return found


def _is_sync(s):
    return isinstance(s, Evaluate) and isinstance(s.value, Call) and s.value.name == "__syncthreads"


def _tiled_matmul(n=256, tile=32, nthreads=8, k_tile=8):
    A, B = lw.placeholder((n, n), name="A"), lw.placeholder((n, n), name="B")
    k = lw.reduce_axis((0, n), name="k")
    C = lw.compute((n, n), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    s = lw.create_schedule(C)
    AA, BB = s.cache_read(A, "shared", [C]), s.cache_read(B, "shared", [C])
    CL = s.cache_write(C, "local")
    i, j = C.op.axis
    by, yi = s[C].split(i, factor=tile)
    bx, xi = s[C].split(j, factor=tile)
    ty, yi = s[C].split(yi, nparts=nthreads)
    tx, xi = s[C].split(xi, nparts=nthreads)
    s[C].reorder(by, bx, ty, tx, yi, xi)
    for a, t in ((by, "blockIdx.y"), (bx, "blockIdx.x"), (ty, "threadIdx.y"), (tx, "threadIdx.x")):
        s[C].bind(a, T(t))
    s[CL].compute_at(s[C], tx)
    ko, ki = s[CL].split(s[CL].op.reduce_axis[0], factor=k_tile)
    ci, cj = s[CL].op.axis
    s[CL].reorder(ko, ki, ci, cj)
    for S in (AA, BB):
        s[S].compute_at(s[CL], ko)
        f = s[S].fuse(*s[S].op.axis)
        rest, fx = s[S].split(f, factor=nthreads)
        rest, fy = s[S].split(rest, factor=nthreads)
        s[S].bind(fy, T("threadIdx.y"))
        s[S].bind(fx, T("threadIdx.x"))
    return s, [A, B, C], (CL, ci)


def test_one_kernel_per_root_nest_with_launch_extents():
    s, args, _ = _tiled_matmul()
    func = lw.lower(s, args, target="cuda")
    (kernel,) = _nodes(func.body, KernelLaunch)
    assert kernel.name == "main_kernel0"
    assert [e.value for e in kernel.grid] == [8, 8, 1]
    assert [e.value for e in kernel.block] == [8, 8, 1]
    assert [b.name for b in kernel.params] == ["A", "B", "C"]
    assert "launch main_kernel0[grid=(8, 8, 1), block=(8, 8, 1)](A, B, C)" in str(func)


def test_grid_extent_follows_symbolic_sizes_and_scalars_are_passed():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] + 1.0, name="B")
    C = lw.compute((n,), lambda i: B[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    for st in (s[B], s[C]):
        o, i = st.split(st.op.axis[0], factor=128)
        st.bind(o, T("blockIdx.x"))
        st.bind(i, T("threadIdx.x"))
    func = lw.lower(s, [A, C], target="cuda")
    k0, k1 = _kernels_in_order(func.body)
    assert (k0.name, k1.name) == ("main_kernel0", "main_kernel1")
    assert str(k0.grid[0]) == "(n + 127) // 128" and k0.block[0].value == 128
    assert [v.name for v in k0.scalars] == ["n"]
    allocs = [a for a in _nodes(func.body, Allocate)]
    assert [(a.buffer.name, a.buffer.scope) for a in allocs] == [("B", "global")]   # on the host, between kernels


def _kernels_in_order(stmt):
    found = []

    def walk(s):
        if isinstance(s, KernelLaunch):
            found.append(s)
        elif isinstance(s, Seq):
            for c in s.stmts:
                walk(c)
        elif hasattr(s, "body"):
            walk(s.body)
    walk(stmt)
    return found


def test_shared_region_is_per_block_and_local_per_thread():
    s, args, _ = _tiled_matmul()
    func = lw.lower(s, args, target="cuda")
    shapes = {a.buffer.name: ([e.value for e in a.buffer.shape], a.buffer.scope) for a in _nodes(func.body, Allocate)}
    # a 32 x 32 output tile per block, k steps of 8: A's 32 x 8 panel and B's 8 x 32 panel, shared by 64 threads;
    # each thread accumulates its own 4 x 4 block
    assert shapes["A.shared"] == ([32, 8], "shared")
    assert shapes["B.shared"] == ([8, 32], "shared")
    assert shapes["C.local"] == ([4, 4], "local")


def _straight_line(stmt):
    """The statements of a block as executed, through lets and allocations: 'sync' or the buffers a loop writes."""
    order = []

    def walk(st):
        if _is_sync(st):
            order.append("sync")
        elif isinstance(st, Seq):
            for c in st.stmts:
                walk(c)
        elif isinstance(st, Allocate) or type(st).__name__ == "LetStmt":
            walk(st.body)
        else:
            names = set()
            post_order_visit(st, lambda n: names.add(n.buffer.name) if type(n).__name__ == "BufferStore" else None)
            order.append("+".join(sorted(names)))
    walk(stmt)
    return order


def test_barriers_around_the_shared_copies_in_the_reduction_loop():
    s, args, _ = _tiled_matmul()
    func = lw.lower(s, args, target="cuda")
    (ko,) = [f for f in _nodes(func.body, For) if f.var.name == "k.outer"]
    # before the copies (the last step's readers are done), after them (the copies are visible)
    assert _straight_line(ko.body) == ["sync", "A.shared", "B.shared", "sync", "C.local"]
    assert len(_nodes(func.body, Evaluate)) == 2


def test_no_barriers_without_shared_memory():
    A = lw.placeholder((64,), name="A")
    C = lw.compute((64,), lambda i: A[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    o, i = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    assert not _nodes(lw.lower(s, [A, C], target="cuda").body, Evaluate)


def test_divergent_barrier_is_refused():
    # a 16 x 16 matrix in 32 x 32 tiles: threads past row 16 have an empty spatial loop; the shared
    # copies (and their barriers) must not be inside it
    s, args, (CL, ci) = _tiled_matmul(n=16)
    ko = s[CL].leaf_iter_vars[0]
    s[CL].reorder(ci, ko)
    with pytest.raises(lw.LoweringError, match=r"a __syncthreads\(\) barrier would sit inside loop 'i.c', whose "
                                               r"bounds depend on the thread index"):
        lw.lower(s, args, target="cuda")


def test_dump_after_gpu_passes_and_cpu_lowering_unchanged():
    s, args, _ = _tiled_matmul()
    func = lw.lower(s, args, target="cuda", dump_after="split_host_device")
    assert "split_host_device" in func.dumps and not _nodes(func.dumps["split_host_device"], Evaluate)
    plain = lw.lower(s, args)   # no target: no kernels, thread loops stay loops
    assert not _nodes(plain.body, KernelLaunch)
    assert any(f.kind == "thread" for f in _nodes(plain.body, For))


def test_thread_loops_are_not_partitioned():
    A = lw.placeholder((1000,), name="A")
    C = lw.compute((1000,), lambda i: A[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    o, i = s[C].split(C.op.axis[0], factor=128)
    s[C].bind(o, T("blockIdx.x"))
    s[C].bind(i, T("threadIdx.x"))
    func = lw.lower(s, [A, C], target="cuda")
    loops = [f for f in _nodes(func.body, For) if f.kind == "thread"]
    assert len(loops) == 2 and all(isinstance(f.extent, Const) for f in loops)
    assert "if i.outer * 128 + i.inner < 1000:" in str(func)   # the tail is guarded, not split off


def test_producer_and_consumer_computed_at_the_same_loop_on_the_cpu():
    """Softmax's CUDA schedule needs it (partial results and their combination at the row loop);
    it holds on the CPU too: the producer's region is what the consumer's own loops read."""
    import numpy as np
    A = lw.placeholder((6, 10), name="A")
    P = lw.compute((6, 10), lambda i, j: A[i, j] + 1.0, name="P")
    k = lw.reduce_axis((0, 10), name="k")
    Q = lw.compute((6,), lambda i: lw.sum(P[i, k] * 2.0, axis=k), name="Q")
    R = lw.compute((6, 10), lambda i, j: P[i, j] / Q[i], name="R")
    s = lw.create_schedule(R)
    i, j = R.op.axis
    s[Q].compute_at(s[R], i)
    s[P].compute_at(s[R], i)
    f = lw.build(s, [A, R])
    a = np.random.default_rng(0).standard_normal((6, 10)).astype("float32")
    r = np.empty_like(a)
    f(a, r)
    np.testing.assert_allclose(r, (a + 1) / ((a + 1) * 2).sum(1, keepdims=True), rtol=1e-5)
    allocs = {x.buffer.name: [e.value for e in x.buffer.shape] for x in _nodes(lw.lower(s, [A, R]).body, Allocate)}
    assert allocs["P"] == [1, 10] and allocs["Q"] == [1]
