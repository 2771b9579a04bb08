"""The lowering passes, one group per file in lowering/passes/: loop_partition, simplify,
storage_flatten, vectorize; plus dump_after."""
import textwrap

import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.arith import simplify_expr
from loopweave.dsl.expr import Const, Var, const, structural_equal
from loopweave.dsl.visitor import post_order_visit
from loopweave.lowering.ir import Buffer, BufferStore, For, IfThenElse, Ramp
from loopweave.lowering.passes.simplify import simplify
from loopweave.lowering.passes.storage_flatten import buffer_strides


def _nodes(stmt, cls):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, cls) else None)
    return found


def _split_kernel(extent, factor):
    A = lw.placeholder((extent,), name="A")
    C = lw.compute((extent,), lambda i: A[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=factor)
    return s, A, C


# ------------------------------------------------------------------ loop_partition

def test_divisible_split_has_no_guard():
    s, A, C = _split_kernel(64, 8)
    f = lw.lower(s, [A, C], dump_after="schedule_to_loops")
    assert not _nodes(f.body, IfThenElse)
    assert "if " not in str(f)


def test_non_divisible_split_guards_only_the_tail():
    s, A, C = _split_kernel(60, 8)
    f = lw.lower(s, [A, C], dump_after="loop_partition")
    assert _nodes(f.dumps["schedule_to_loops"], IfThenElse)          # before: guard in every iteration
    top = f.dumps["loop_partition"]
    loops = top.stmts
    assert len(loops) == 2
    main, tail = loops
    assert isinstance(main, For) and main.extent.value == 7
    assert not _nodes(main, IfThenElse)                                # main part: guard-free
    assert tail.min.value == 7 and tail.extent.value == 1              # the tail iteration
    # its inner loop is cut where the guard starts failing: it runs i.inner < 4, with no guard
    assert not _nodes(tail, IfThenElse)
    assert [l.extent for l in _nodes(tail, For) if l.var.name == "i.inner" and isinstance(l.extent, Const)
            and l.extent.value > 0] and not _nodes(f.body, IfThenElse)


def test_symbolic_split_main_part_is_guard_free():
    """The main part runs the whole tiles, n // 8 of them, vector-free and guard-free; the tail
    tile its n - 8*i.outer elements (no guard per element)."""
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    C = lw.compute((n,), lambda i: A[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    s[C].split(C.op.axis[0], factor=8)
    f = lw.lower(s, [A, C])
    assert str(f) == textwrap.dedent("""\
        def main(A: float32[n], C: float32[n]):
            for i.outer in range(n // 8):
                for i.inner in range(8):
                    C[i.outer * 8 + i.inner] = A[i.outer * 8 + i.inner] * 2.0
            for i.outer in range(n // 8, (n + 7) // 8):
                for i.inner in range(n - i.outer * 8):
                    C[i.outer * 8 + i.inner] = A[i.outer * 8 + i.inner] * 2.0""")


def _symbolic_register_block():
    """A batched matmul with ``n`` columns and an epilogue, blocked 4 x 16 with the matmul
    computed in the block, its reduction outside the block's rows and columns (the op library's
    gemm schedule in small, as the attention's ``Q @ K^T`` has it): bound inference gives the
    block, its accumulator and the accumulator's copy-out the extent ``min(n - 16*jo, 16)``."""
    n = lw.var("n")
    A = lw.placeholder((2, 8, 32), name="A")
    B = lw.placeholder((2, 32, n), name="B")
    k = lw.reduce_axis((0, 32), name="k")
    C = lw.compute((2, 8, n), lambda b, i, j: lw.sum(A[b, i, k] * B[b, k, j], axis=k), name="C")
    D = lw.compute((2, 8, n), lambda b, i, j: C[b, i, j] * 0.5, name="D")
    s = lw.create_schedule(D)
    b, i, j = D.op.axis
    jo, ji = s[D].split(j, factor=16)
    io, ii = s[D].split(i, factor=4)
    s[D].reorder(b, jo, io, ii, ji)
    s[D].vectorize(ji)
    s[C].compute_at(s[D], io)
    cb, ci, cj = s[C].op.axis
    s[C].reorder(cb, s[C].op.reduce_axis[0], ci, cj)
    s[C].unroll(ci)
    s[C].vectorize(cj)
    return s, A, B, D


def test_symbolic_tile_main_part_has_constant_extents_and_vector_code():
    """In the main part of a loop of symbolic extent, min/max and selects are decided over that
    part's range: the block (``min(n - 16*jo, 16)`` wide in general) is 16 wide there, so its
    accumulator updates and copy-out are vector code; only the tail keeps the ``min``
    (the attention's Q @ K^T)."""
    s, A, B, D = _symbolic_register_block()
    f = lw.lower(s, [A, B, D], target="llvm")
    main, tail = f.body.body.stmts
    assert "min(" not in str(main) and "not_vectorized" not in str(main)
    stores = {name: [st for st in _nodes(main, BufferStore) if st.buffer.name == name] for name in ("C.acc", "C", "D")}
    assert all(stores.values())
    assert all(isinstance(st.indices[0], Ramp) for found in stores.values() for st in found)
    assert "min(" in str(tail)


@pytest.mark.parametrize("n", [1, 7, 16, 33, 48])
def test_symbolic_tile_decided_extents_keep_results(n):
    np = pytest.importorskip("numpy")
    s, A, B, D = _symbolic_register_block()
    fn = lw.build(s, [A, B, D], target="llvm")
    rng = np.random.default_rng(n)
    a, b = rng.standard_normal((2, 8, 32)).astype("float32"), rng.standard_normal((2, 32, n)).astype("float32")
    d = np.full((2, 8, n), np.nan, "float32")
    fn(a, b, d)
    np.testing.assert_allclose(d, (a @ b) * 0.5, rtol=1e-5, atol=1e-5)


# ------------------------------------------------------------------ simplify

def test_simplify_cancels_affine_terms():
    i, j = Var("i"), Var("j")
    assert simplify_expr((i * 4 + j) - i * 4) is j
    assert structural_equal(simplify_expr((i + 3) - (i + 1)), const(2))
    assert structural_equal(simplify_expr(i * 2 + i * 3), simplify_expr(i * 5))


def _simplify_in_loops(expr, *loops):
    buf = Buffer("out", (const(1),), "int64")
    body = BufferStore(buf, expr, (const(0),))
    for var, extent in reversed(loops):
        body = For(var, const(0), const(extent), "serial", body)
    out = simplify(body, None)
    return _nodes(out, BufferStore)[0].value


def test_simplify_folds_divmod_with_loop_ranges():
    i, j = Var("i"), Var("j")
    assert _simplify_in_loops((i * 8 + j) // 8, (i, 10), (j, 8)) is i
    assert _simplify_in_loops((i * 8 + j) % 8, (i, 10), (j, 8)) is j
    assert _simplify_in_loops(j // 8, (j, 8)).value == 0
    # not provable when j may reach 8: left alone
    e = _simplify_in_loops((i * 8 + j) // 8, (i, 10), (j, 9))
    assert "//" in str(e)


def test_simplify_drops_proven_guards():
    i = Var("i")
    buf = Buffer("out", (const(10),), "float32")
    store = BufferStore(buf, const(1.0), (i,))
    loop = For(i, const(0), const(10), "serial", IfThenElse(i < 10, store))
    out = simplify(loop, None)
    assert not _nodes(out, IfThenElse)


def test_simplify_min_max_with_ranges():
    i = Var("i")
    assert _simplify_in_loops(lw.min(i, 20), (i, 10)) is i
    assert _simplify_in_loops(lw.max(i, 20), (i, 10)).value == 20


# ------------------------------------------------------------------ storage_flatten

def test_buffer_strides_row_major_and_aligned():
    n = lw.var("n")
    strides, size = buffer_strides(Buffer("B", (const(16), n), "float32"))
    assert strides[1].value == 1 and strides[0] is n
    strides, size = buffer_strides(Buffer("B", (const(16), const(10)), "float32"), {0: (8, 1)})
    assert [s.value for s in strides] == [17, 1] and size.value == 16 * 17


def test_storage_flatten_gives_flat_indices():
    n = lw.var("n")
    A = lw.placeholder((n, n), name="A")
    B = lw.compute((n, n), lambda i, j: A[i, j] + 1.0, name="B")
    s = lw.create_schedule(B)
    f = lw.lower(s, [A, B], dump_after="storage_flatten")
    before = f.dumps["schedule_to_loops"]
    assert all(len(st.indices) == 2 for st in _nodes(before, BufferStore))
    after = f.dumps["storage_flatten"]
    assert all(len(st.indices) == 1 for st in _nodes(after, BufferStore))
    assert "B[i, j] = A[i, j] + 1.0" in str(f)               # printed per dimension
    assert "B[i * n + j] = A[i * n + j] + 1.0" in f.structural_key()   # stored flat


def test_storage_align_pads_intermediate_buffer():
    A = lw.placeholder((16, 10), name="A")
    B = lw.compute((16, 10), lambda i, j: A[i, j] + 1.0, name="B")
    C = lw.compute((16, 10), lambda i, j: B[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    s[B].storage_align(B.op.axis[0], 8, 1)
    f = lw.lower(s, [A, C])
    allocs = []
    post_order_visit(f.body, lambda n: allocs.append(n) if type(n).__name__ == "Allocate" else None)
    (b,) = [a for a in allocs if a.buffer.name == "B"]
    assert b.extent.value == 16 * 17
    assert "B = allocate((16, 10), float32, 'global', strides=(17, 1))" in str(f)
    assert "B[i * 17 + j]" in f.structural_key()


def test_reorder_storage_lays_the_buffer_out_in_that_order_with_the_same_values():
    A = lw.placeholder((6, 10), name="A")
    B = lw.compute((6, 10), lambda i, j: A[i, j] + 1.0, name="B")
    C = lw.compute((10, 6), lambda j, i: B[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    s[B].reorder_storage(B.op.axis[1], B.op.axis[0])
    s[B].storage_align(B.op.axis[1], 8, 1)         # pads j's stride, now the outer one: 6 -> 9
    f = lw.lower(s, [A, C])
    assert "strides=(1, 9)" in str(f) and "B[j * 9 + i]" in f.structural_key()
    a = np.random.default_rng(0).standard_normal((6, 10)).astype("float32")
    c = np.zeros((10, 6), "float32")
    lw.build(s, [A, C])(a, c)
    np.testing.assert_array_equal(c, ((a + 1) * 2).T)


# ------------------------------------------------------------------ vectorize

def test_vectorized_loop_becomes_ramps():
    s, A, C = _split_kernel(64, 8)
    s[C].vectorize(s[C].leaf_iter_vars[1])
    f = lw.lower(s, [A, C])
    (store,) = _nodes(f.body, BufferStore)
    assert isinstance(store.indices[0], Ramp) and store.indices[0].lanes == 8
    assert str(f) == textwrap.dedent("""\
        def main(A: float32[64], C: float32[64]):
            for i.outer in range(8):
                C[ramp(i.outer * 8, 1, 8)] = A[ramp(i.outer * 8, 1, 8)] * 2.0""")


def test_symbolic_tail_of_vectorized_loop_is_annotated_not_vectorized_and_unguarded():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    C = lw.compute((n,), lambda i: A[i] * 2.0, name="C")
    s = lw.create_schedule(C)
    io, ii = s[C].split(C.op.axis[0], factor=8)
    s[C].vectorize(ii)
    f = lw.lower(s, [A, C])
    main, tail = f.body.stmts
    assert _nodes(main, Ramp)                                  # the guard-free main part is vector code
    assert not _nodes(tail, Ramp)
    # the tail tile runs its n - 8*io elements: no loop over 8 with a guard per element
    assert not _nodes(tail, IfThenElse)
    notes = [dict(l.annotations) for l in _nodes(tail, For)]
    assert any(a.get("not_vectorized") == "its extent is not a constant" for a in notes)
    assert "not_vectorized=" in str(f)
    fn = lw.build(s, [A, C])
    for size in (1, 7, 8, 13):
        a = np.arange(size, dtype="float32")
        c = np.full(size, -1, dtype="float32")
        fn(a, c)
        np.testing.assert_array_equal(c, a * 2)


def test_constant_tail_of_vectorized_loop_is_vector_code_too():
    s, A, C = _split_kernel(60, 8)
    s[C].vectorize(s[C].leaf_iter_vars[1])
    f = lw.lower(s, [A, C])
    lanes = sorted({r.lanes for r in _nodes(f.body, Ramp)})
    assert lanes == [4, 8]                                     # 7 full vectors, then one of 4 lanes
    assert not _nodes(f.body, IfThenElse)


def test_vectorize_with_inner_loop_says_why():
    A = lw.placeholder((8, 8), name="A")
    C = lw.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    s[C].vectorize(C.op.axis[0])
    assert "not_vectorized=it contains an inner loop" in str(lw.lower(s, [A, C]))


# ------------------------------------------------------------------ dump_after

def test_dump_after_all_and_one():
    s, A, C = _split_kernel(60, 8)
    f = lw.lower(s, [A, C], dump_after="all")
    from loopweave.lowering.lower import PASSES
    assert list(f.dumps) == ["schedule_to_loops"] + [name for name, _ in PASSES]
    assert {"simplify", "loop_partition", "storage_flatten", "vectorize", "unroll"} <= set(f.dumps)
    assert set(f.timings) >= {"schedule_to_loops", "simplify", "loop_partition"}
    g = lw.lower(s, [A, C], dump_after="simplify")
    assert set(g.dumps) == {"schedule_to_loops", "simplify"}


def test_dump_after_unknown_pass():
    s, A, C = _split_kernel(60, 8)
    with pytest.raises(lw.LoweringError, match="unknown pass 'nope' for dump_after; passes: schedule_to_loops, simplify"):
        lw.lower(s, [A, C], dump_after="nope")


def test_flat_index_division_of_an_aligned_ramp_stays_a_contiguous_load():
    """A reshape reads its input at ``f // 12608 * 12608 + f // 64 % 197 * 64 + f % 64``;
    vectorized over 16 lanes of a 16-aligned ``f`` no lane crosses a multiple of 64, so the
    load is one ramp (it was a 16-lane gather: 62 us instead of 5 for a ViT attention output)."""
    import numpy as np
    A = lw.placeholder((3, 197, 64), name="A")
    def at(a, b, c, d):       # the reshape's form: the output's flat index, unflattened for A
        flat = ((a * 3 + b) * 197 + c) * 64 + d
        return A[flat // 12608, flat // 64 % 197, flat % 64]
    R = lw.compute((1, 3, 197, 64), at, name="R")
    s = lw.create_schedule(R)
    f = s[R].fuse(*s[R].op.axis)
    fo, fi = s[R].split(f, factor=16)
    s[R].vectorize(fi)
    text = lw.lower(s, [A, R]).structural_key()
    load = text[text.index("A["):]
    assert load.startswith("A[ramp(") and "ramp(" not in load[len("A[ramp("):], text
    a = np.random.default_rng(3051).random((3, 197, 64)).astype("float32")
    out = np.empty((1, 3, 197, 64), "float32")
    lw.build(s, [A, R])(a, out)
    np.testing.assert_array_equal(out[0], a)


def test_a_guard_s_failing_set_leaves_out_outer_loops_unrelated_to_it(monkeypatch):
    """The set of iterations where a guard fails carries only the outer loops linked to the guard
    by a variable: the tail guard of ``j`` (``8*jo + ji < m``) does not take the row loop's
    ``i < n`` along (isl parsed every outer loop's bounds, selects too, once per guard).  The
    loop's domain keeps them all, so the main range is what it was."""
    import re
    from loopweave.lowering.passes import loop_partition as lp
    calls = []
    make_set = lp.make_set

    def recording(params, dims, constraints):
        constraints = list(constraints)
        calls.append((list(dims), constraints))
        return make_set(params, dims, constraints)
    monkeypatch.setattr(lp, "make_set", recording)
    n, m = lw.var("n"), lw.var("m")
    A = lw.placeholder((n, m), name="A")
    C = lw.compute((n, m), lambda i, j: A[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    s[C].split(C.op.axis[1], factor=8)
    f = lw.lower(s, [A, C])
    row = re.compile(r"\bi_\d+\b")
    failing = [cons for dims, cons in calls if len(dims) == 2]          # [jo, ji]: the guard's failing set
    domains = [cons for dims, cons in calls if len(dims) == 1 and dims[0].startswith("j_outer")]
    assert failing and not any(row.search(c) for cons in failing for c in cons), failing
    assert domains and all(any(row.search(c) for c in cons) for cons in domains), domains
    a = np.random.default_rng(0).standard_normal((3, 13)).astype("float32")
    out = np.empty_like(a)
    lw.build(f)(a, out)
    np.testing.assert_array_equal(out, a * 2)


def test_related_constraints_are_those_linked_to_the_seeds_through_shared_variables():
    from loopweave.lowering.passes.loop_partition import _related
    constraints = [("a", {1, 2}), ("b", {3}), ("c", {2, 4}), ("d", {4, 5}), ("e", {6, 3})]
    assert _related(constraints, {1}) == ["a", "c", "d"]
    assert _related(constraints, {6}) == ["b", "e"]
    assert _related(constraints, {7}) == []


def test_isl_giving_up_on_a_partition_question_leaves_the_select(monkeypatch):
    """loop_partition asks isl whether a select's condition can hold in the main part; when isl
    cannot answer (an operation limit, a parse failure) the answer is "not proven"."""
    import islpy as isl
    from loopweave.errors import InternalError
    from loopweave.lowering.passes import loop_partition as lp
    names = type("Names", (), {"var_of": {"x": 0}})()
    assert lp._Decide(isl.Set("{ [x] : 0 <= x < 8 }"), names, "x").never("x > 100") is True

    def gives_up(*args, **kwargs):
        raise InternalError("isl could not parse ...: maximal number of operations exceeded")
    monkeypatch.setattr(lp, "make_set", gives_up)
    assert lp._Decide(isl.Set("{ [x] : 0 <= x < 8 }"), names, "x").never("x > 100") is False
