"""Bound inference (loopweave.lowering.bound_inference.required_region) and how lowering uses it."""
import re

import numpy as np

import loopweave as lw
from loopweave.dsl.expr import Const, Var, const
from loopweave.dsl.visitor import post_order_visit
from loopweave.lowering.accesses import Access
from loopweave.lowering.bound_inference import Loop, required_region
from loopweave.dsl.arith import simplify_expr


def _same(e, expected):
    """Equal as affine expressions, whatever form isl printed them in."""
    diff = simplify_expr(e - expected)
    return isinstance(diff, Const) and diff.value == 0


def _c(e):
    assert isinstance(e, Const), f"expected a constant, got {e}"
    return e.value


def test_1d_stencil_region_at_tile_loop_is_exact():
    A = lw.placeholder((66,), name="A")
    xo, xi = Var("xo"), Var("xi")
    accesses = [Access(A, (xo * 8 + xi + d,), const(True)) for d in (0, 1, 2)]
    r = required_region([Loop(xo, const(0), const(8))], [Loop(xi, const(0), const(8))], [], accesses,
                        (const(66),), [])
    assert _same(r.mins[0], xo * 8)
    assert _c(r.extents[0]) == 10       # 8 outputs + a halo of 2
    assert _c(r.alloc_extents[0]) == 10


def test_2d_stencil_region_at_tile_loop_is_exact():
    A = lw.placeholder((34, 34), name="A")
    io, jo, ii, ji = Var("io"), Var("jo"), Var("ii"), Var("ji")
    accesses = [Access(A, (io * 8 + ii + di, jo * 4 + ji + dj), const(True))
                for di in range(3) for dj in range(3)]
    ctx = [Loop(io, const(0), const(4)), Loop(jo, const(0), const(8))]
    inner = [Loop(ii, const(0), const(8)), Loop(ji, const(0), const(4))]
    r = required_region(ctx, inner, [], accesses, (const(34), const(34)), [])
    assert _same(r.mins[0], io * 8) and _same(r.mins[1], jo * 4)
    assert [_c(e) for e in r.extents] == [10, 6]
    assert [_c(e) for e in r.alloc_extents] == [10, 6]


def test_region_with_symbolic_size_and_tail_guard():
    n = lw.var("n")
    A = lw.placeholder((n + 2,), name="A")
    xo, xi = Var("xo"), Var("xi")
    accesses = [Access(A, (xo * 8 + xi + d,), const(True)) for d in (0, 1, 2)]
    r = required_region([Loop(xo, const(0), (n + 7) // 8)], [Loop(xi, const(0), const(8))],
                        [xo * 8 + xi < n], accesses, (n + 2,), [n])
    assert _same(r.mins[0], xo * 8)
    # the last tile needs only what is left: n - 8*xo + 2 elements; the others 10
    from loopweave.dsl.visitor import substitute
    for n_val, xo_val, expected in [(20, 0, 10), (20, 1, 10), (20, 2, 6), (16, 1, 10), (17, 2, 3)]:
        value = simplify_expr(substitute(r.extents[0], {n: const(n_val), xo: const(xo_val)}))
        assert _c(value) == expected, (n_val, xo_val, str(r.extents[0]))
    assert _c(r.alloc_extents[0]) == 10   # the buffer is sized by the largest instance, exactly


def test_non_affine_index_falls_back_to_full_extent():
    A = lw.placeholder((66,), name="A")
    xo, xi = Var("xo"), Var("xi")
    x = xo * 8 + xi
    r = required_region([Loop(xo, const(0), const(8))], [Loop(xi, const(0), const(8))], [],
                        [Access(A, (x * x,), const(True))], (const(66),), [])
    assert _c(r.mins[0]) == 0
    assert _c(r.extents[0]) == 66 and _c(r.alloc_extents[0]) == 66


def test_guarded_access_condition_restricts_region():
    A = lw.placeholder((64,), name="A")
    x = Var("x")
    acc = Access(A, (x - 1,), x >= 1)      # the read only happens for x >= 1
    r = required_region([], [Loop(x, const(0), const(64))], [], [acc], (const(64),), [])
    assert _c(r.mins[0]) == 0 and _c(r.extents[0]) == 63


def _allocs(func):
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if type(n).__name__ == "Allocate" else None)
    return found


def test_lowered_stencil_at_tile_loop_allocates_exact_buffer():
    A = lw.placeholder((34, 34), name="A")
    B = lw.compute((34, 34), lambda i, j: A[i, j] * 2.0, name="B")
    C = lw.compute((32, 32), lambda i, j: B[i, j] + B[i + 1, j + 1] + B[i + 2, j + 2], name="C")
    s = lw.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 4)
    s[B].compute_at(s[C], jo)
    f = lw.lower(s, [A, C])
    (alloc,) = [a for a in _allocs(f) if a.buffer.name == "B"]
    assert [_c(e) for e in alloc.buffer.shape] == [10, 6]
    assert _c(alloc.extent) == 60
    text = str(f)
    assert re.search(r"for i in range\(10\)", text) and re.search(r"for j in range\(6\)", text)


def test_lowered_stencil_computes_right():
    import numpy as np
    A = lw.placeholder((34, 34), name="A")
    B = lw.compute((34, 34), lambda i, j: A[i, j] * 2.0, name="B")
    C = lw.compute((32, 32), lambda i, j: B[i, j] + B[i + 1, j + 1] + B[i + 2, j + 2], name="C")
    s = lw.create_schedule(C)
    io, jo, ii, ji = s[C].tile(C.op.axis[0], C.op.axis[1], 8, 4)
    s[B].compute_at(s[C], jo)
    f = lw.build(s, [A, C])
    a = np.random.default_rng(1131).random((34, 34)).astype("float32")
    c = np.empty((32, 32), "float32")
    f(a, c)
    b = 2 * a
    np.testing.assert_allclose(c, b[:-2, :-2] + b[1:-1, 1:-1] + b[2:, 2:], rtol=1e-6)


def test_packed_panel_under_a_fused_loop_with_a_shifted_tail_is_one_panel(x86_level):
    """A column tile of two vectors shifted inwards at the end (197 = 6*32 + 5 on 16 lanes,
    12*16 + 5 on 8) under a loop fused with the batch makes the tile's start a select; the packed
    panel of B must stay one 64 x tile panel (it was the whole 3x64x197 tensor, copied once per
    tile: a 4x slower attention Q.K^T)."""
    from loopweave import nn_ops
    tile = 2 * x86_level.lanes("float32")
    A = lw.placeholder((3, 197, 64), name="A")
    B = lw.placeholder((3, 64, 197), name="B")
    C = nn_ops.batch_matmul(A, B)
    text = str(lw.lower(nn_ops.schedule(C, x86_level), [A, B, C]))
    assert f"B.local = allocate((1, 64, {tile})" in text, [l for l in text.splitlines() if "allocate" in l]
    if not x86_level.runs_here():
        return
    a = np.random.default_rng(1341).random((3, 197, 64)).astype("float32")
    b = np.random.default_rng(1351).random((3, 64, 197)).astype("float32")
    out = np.empty((3, 197, 197), "float32")
    lw.build(nn_ops.schedule(C, x86_level), [A, B, C], target=x86_level)(a, b, out)
    np.testing.assert_allclose(out, a @ b, rtol=1e-4)
