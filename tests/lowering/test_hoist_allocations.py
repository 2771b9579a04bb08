"""hoist_allocations: buffers of run-time size allocated once per loop, not per iteration."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.expr import Var, binary, const
from loopweave.dsl.visitor import post_order_visit
from loopweave.lowering.ir import Allocate, Buffer, BufferStore, For, IfThenElse, seq
from loopweave.lowering.passes.hoist_allocations import hoist_allocations
from loopweave.nn_ops.ops.registry import schedule
from loopweave.nn_ops.ops.shape import softmax


def _softmax_over_symbolic_rows():
    b, s = lw.var("b"), lw.var("s")
    X = lw.placeholder((b, 4, s, s), name="X")
    Y = softmax(X)
    return schedule([Y]), [X, Y]


def test_softmax_row_of_exponentials_is_allocated_once_per_parallel_iteration():
    func = lw.lower(*_softmax_over_symbolic_rows())
    loops_above = {}

    def walk(stmt, loops):
        if isinstance(stmt, Allocate):
            loops_above[stmt.buffer.name] = loops
            walk(stmt.body, loops)
        elif isinstance(stmt, For):
            walk(stmt.body, loops + [stmt.kind])
        else:
            for child in getattr(stmt, "stmts", ()):
                walk(child, loops)
            for attr in ("then_case", "else_case", "body"):
                if getattr(stmt, attr, None) is not None:
                    walk(getattr(stmt, attr), loops)
    walk(func.body, [])
    assert loops_above["softmax.exp"] == ["parallel"]       # not inside the serial row loop


@pytest.mark.parametrize("batch, seq", [(1, 1), (2, 7), (1, 33)])
def test_softmax_with_the_hoisted_row_matches_numpy(batch, seq):
    f = lw.build(*_softmax_over_symbolic_rows())
    x = np.random.default_rng(seq).standard_normal((batch, 4, seq, seq)).astype(np.float32)
    y = np.full_like(x, np.nan)
    f(x, y)
    e = np.exp(x - x.max(-1, keepdims=True))
    np.testing.assert_allclose(y, e / e.sum(-1, keepdims=True), rtol=1e-5, atol=1e-6)


def _allocs(stmt):
    found = []
    post_order_visit(stmt, lambda n: found.append(n) if isinstance(n, Allocate) else None)
    return found


def _store(buf, i):
    return BufferStore(buf, const(1.0, "float32"), (i,))


def test_only_sizes_read_outside_the_loop_and_only_sequential_loops_are_hoisted_over():
    n = Var("n", "int64")
    i, j = Var("i", "int64"), Var("j", "int64")
    free = Buffer("free", (n,), "float32", scope="local")          # extent n: independent of i and j
    per_row = Buffer("per_row", (j,), "float32", scope="local")     # extent reads the loop variable
    per_block = Buffer("per_block", (i,), "float32", scope="local")  # reads the parallel one: climbs to it
    guarded = Buffer("guarded", (n,), "float32", scope="local")     # under an if: its size may be invalid
    inner = seq(Allocate(free, n, _store(free, j)),
                Allocate(per_row, binary("add", j, const(1, "int64")), _store(per_row, j)),
                Allocate(per_block, binary("add", i, const(1, "int64")), _store(per_block, j)),
                IfThenElse(j < n, Allocate(guarded, n, _store(guarded, j))))
    serial = For(j, const(0, "int64"), n, "serial", inner)
    outer = For(i, const(0, "int64"), n, "parallel", serial)
    result = hoist_allocations(outer, None)
    assert isinstance(result, For) and result.kind == "parallel"          # nothing climbs a parallel loop
    top = result.body
    assert isinstance(top, Allocate) and top.buffer is free
    assert top.extent.op == "max"                                          # a loop of no iteration: size >= 0
    assert isinstance(top.body, Allocate) and top.body.buffer is per_block and isinstance(top.body.body, For)
    assert {a.buffer.name for a in _allocs(top.body.body)} == {"per_row", "guarded"}


def test_a_buffer_allocated_in_a_loop_and_its_tail_is_hoisted_once():
    n = Var("n", "int64")
    i, j, k = Var("i", "int64"), Var("j", "int64"), Var("k", "int64")
    row = Buffer("row", (n,), "float32", scope="local")
    body = seq(For(j, const(0, "int64"), n, "serial", Allocate(row, n, _store(row, j))),
               For(k, const(0, "int64"), const(3, "int64"), "serial", Allocate(row, n, _store(row, k))))
    result = hoist_allocations(For(i, const(0, "int64"), n, "serial", body), None)
    assert [a.buffer.name for a in _allocs(result)] == ["row"]
    assert isinstance(result, Allocate)


def test_cuda_is_left_alone():
    class Cuda:
        kind = "cuda"

    class Ctx:
        target = Cuda()
    n, i = Var("n", "int64"), Var("i", "int64")
    buf = Buffer("b", (n,), "float32", scope="local")
    loop = For(i, const(0, "int64"), n, "serial", Allocate(buf, n, _store(buf, i)))
    assert hoist_allocations(loop, Ctx()) is loop
