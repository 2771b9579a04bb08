"""Lowered IR that reads like the code it is: tail bounds as the split says (loop_partition with
isl_adapter.one_piece), no loops of one iteration (drop_unit_loops), accesses per dimension (printer)."""
import textwrap

import islpy as isl
import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.expr import Var, const
from loopweave.lowering.ir import Buffer, BufferLoad, BufferStore, For, PrimFunc, Ramp
from loopweave.lowering.ir_json import primfunc_from_json, primfunc_to_json
from loopweave.lowering.isl_adapter import one_piece
from loopweave.lowering.printer import primfunc_to_str


def _loops(stmt):
    found = []
    from loopweave.dsl.visitor import post_order_visit
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, For) else None)
    return found


# ------------------------------------------------------------------ tail bounds

def test_one_piece_is_the_formula_right_for_every_size():
    pw = isl.PwAff("[n] -> { [(-1)] : n <= 7; [(floor(n/8) - 1)] : n >= 8 }")
    assert str(one_piece(pw, ["n"])) == str(isl.PwAff("[n] -> { [(floor(n/8) - 1)] }"))
    # without n >= 0 the pieces differ (n = -8: -1 against -2): kept as they are
    assert one_piece(pw, []).is_equal(pw) and len(one_piece(pw, []).get_pieces()) == 2
    # pieces no single formula gives: kept
    clamp = isl.PwAff("[n] -> { [(n)] : n <= 7; [(7)] : n >= 8 }")
    assert len(one_piece(clamp, ["n"]).get_pieces()) == 2


@pytest.mark.parametrize("factor", [3, 8])
def test_symbolic_tail_bounds_read_as_quotients_and_keep_results(factor):
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] + 1.0, name="B")
    s = lw.create_schedule(B)
    s[B].split(B.op.axis[0], factor=factor)
    text = str(lw.lower(s, [A, B]))
    assert "select(" not in text
    assert f"range(n // {factor}, (n + {factor - 1}) // {factor})" in text
    f = lw.build(s, [A, B])
    for size in (0, 1, factor - 1, factor, 2 * factor + 1):
        a = np.arange(size, dtype="float32")
        b = np.full(size, -1, "float32")
        f(a, b)
        np.testing.assert_array_equal(b, a + 1)


# ------------------------------------------------------------------ loops of one iteration

def test_a_producer_at_the_innermost_loop_has_no_loops_of_one_iteration():
    n, m = lw.var("n"), lw.var("m")
    A = lw.placeholder((n, m), name="A")
    B = lw.compute((n, m), lambda i, j: A[i, j] + 1.0, name="B")
    C = lw.compute((n, m), lambda i, j: B[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    s[B].compute_at(s[C], C.op.axis[1])
    f = lw.lower(s, [A, C], dump_after="remove_noops")
    assert any(l.extent == const(1) for l in _loops(f.dumps["remove_noops"]))     # there before
    assert str(f) == textwrap.dedent("""\
        def main(A: float32[n, m], C: float32[n, m]):
            for i in range(n):
                for j in range(m):
                    B = allocate((1, 1), float32, 'local')
                    B[0, 0] = A[i, j] + 1.0
                    C[i, j] = B[0, 0] * 2.0""")
    a = np.random.default_rng(0).random((3, 5)).astype("float32")
    c = np.empty((3, 5), "float32")
    lw.build(s, [A, C])(a, c)
    np.testing.assert_allclose(c, (a + 1) * 2, rtol=1e-6)


def test_a_gpu_axis_of_extent_one_stays_a_launch_dimension():
    A = lw.placeholder((1, 64), name="A")
    B = lw.compute((1, 64), lambda i, j: A[i, j] * 2.0, name="B")
    s = lw.create_schedule(B)
    i, j = B.op.axis
    s[B].bind(i, lw.thread_axis("blockIdx.x"))
    s[B].bind(j, lw.thread_axis("threadIdx.x"))
    f = lw.lower(s, [A, B], target="cuda")
    assert [(l.extent.value, l.kind) for l in _loops(f.body)] == [(64, "thread"), (1, "thread")]


# ------------------------------------------------------------------ accesses per dimension

def _flat_buffer(name, shape, strides):
    return Buffer(name, tuple(const(d) if isinstance(d, int) else d for d in shape), "float32",
                  strides=tuple(const(d) if isinstance(d, int) else d for d in strides))


def test_a_flat_index_prints_per_dimension_and_the_key_stays_flat():
    n = Var("n")
    i, j = Var("i"), Var("j")
    A = _flat_buffer("A", (n, n), (n, 1))
    B = _flat_buffer("B", (4, 8, 16), (128, 16, 1))
    body = BufferStore(A, BufferLoad(B, (i * 128 + j * 16 + 5,)), (i * n + j,))
    f = PrimFunc("f", [A, B], [n], For(i, const(0), const(4), "serial", For(j, const(0), const(8), "serial", body)))
    assert str(f).splitlines()[-1].strip() == "A[i, j] = B[i, j, 5]"
    assert primfunc_to_str(f, flat=True).splitlines()[-1].strip() == "A[i * n + j] = B[i * 128 + j * 16 + 5]"
    assert "A[i * n + j]" in f.structural_key()


def test_a_flat_index_that_does_not_split_by_the_strides_prints_flat():
    i = Var("i")
    B = _flat_buffer("B", (4, 8), (8, 1))
    A = _flat_buffer("A", (32,), (1,))
    store = For(i, const(0), const(32), "serial", BufferStore(A, BufferLoad(B, (i // 3,)), (i,)))
    assert str(PrimFunc("f", [A, B], [], store)).splitlines()[-1].strip() == "A[i] = B[i // 3]"   # i // 3 > 7


def test_a_vector_access_prints_its_ramp_in_the_unit_stride_dimension():
    i = Var("i")
    B = _flat_buffer("B", (4, 8), (8, 1))
    store = BufferStore(B, const(0.0), (Ramp(i * 8, const(1), 8),))
    assert str(PrimFunc("f", [B], [], store)).splitlines()[-1].strip() == "B[i, ramp(0, 1, 8)] = 0.0"


def test_a_padded_layout_is_shown_where_the_buffer_is_allocated():
    A = lw.placeholder((16, 10), name="A")
    B = lw.compute((16, 10), lambda i, j: A[i, j] + 1.0, name="B")
    C = lw.compute((16, 10), lambda i, j: B[i, j] * 2.0, name="C")
    s = lw.create_schedule(C)
    s[B].storage_align(B.op.axis[0], 8, 1)
    plain = lw.create_schedule(C)
    padded, unpadded = lw.lower(s, [A, C]), lw.lower(plain, [A, C])
    assert "B = allocate((16, 10), float32, 'global', strides=(17, 1))" in str(padded)
    assert "strides=" not in str(unpadded)
    assert padded.structural_key() != unpadded.structural_key()


def test_json_round_trip_prints_alike():
    n = lw.var("n")
    A = lw.placeholder((n, 8), name="A")
    B = lw.compute((n, 8), lambda i, j: A[i, j] * 2.0, name="B")
    s = lw.create_schedule(B)
    s[B].vectorize(B.op.axis[1])
    f = lw.lower(s, [A, B])
    back = primfunc_from_json(primfunc_to_json(f))
    assert str(back) == str(f) and back.structural_key() == f.structural_key()
    assert "B[i, ramp(0, 1, 8)] = A[i, ramp(0, 1, 8)] * 2.0" in str(f)


def test_a_reversed_row_reads_per_dimension():
    """``A[i * n + n - j - 1]``: the size term and the constant belong to the column, not the row."""
    n = lw.var("n")
    A = lw.placeholder((4, n), name="A")
    B = lw.compute((4, n), lambda i, j: A[i, n - 1 - j], name="B")
    text = str(lw.lower(lw.create_schedule(B), [A, B]))
    assert text.splitlines()[-1].strip() == "B[i, j] = A[i, n - j - 1]"


def test_a_symbolic_reduction_tail_runs_no_step_past_its_end():
    """The last k tile of a reduction of n split by 4 runs its n - 4*k.outer steps; the steps past n,
    whose guard never held, are gone with their row loop."""
    n = lw.var("n")
    A = lw.placeholder((8, n), name="A")
    k = lw.reduce_axis((0, n), name="k")
    S = lw.compute((8,), lambda i: lw.sum(A[i, k], axis=k), name="S")
    s = lw.create_schedule(S)
    ko, ki = s[S].split(k, factor=4)
    s[S].reorder(ko, ki, S.op.axis[0])
    f = lw.lower(s, [A, S])
    assert "if " not in str(f)
    assert str(f).count("for k.inner in range(") == 2        # the whole tiles' 4 steps, the tail's n - 4*k.outer
    fn = lw.build(s, [A, S])
    for size in (1, 4, 6):
        a = np.random.default_rng(size).random((8, size)).astype("float32")
        out = np.empty(8, "float32")
        fn(a, out)
        np.testing.assert_allclose(out, a.sum(axis=1), rtol=1e-5)
