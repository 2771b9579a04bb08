"""lowering/verify.py: hand-built loop IR that breaks one invariant each must be refused, naming the
pass and the fault; the IR of real schedules passes after every pass (the suite runs with it on)."""
import pytest

import loopweave as lw
from loopweave.dsl.expr import Binary, CheckedIndex, Logical, Select, Var, const
from loopweave.errors import InternalError
from loopweave.lowering.ir import (Allocate, Broadcast, Buffer, BufferLoad, BufferStore, Evaluate, For, IfThenElse,
                                   KernelLaunch, LetStmt, PrimFunc, Ramp, seq)
from loopweave.lowering.verify import VerifyMemo, verify, verify_enabled, verifying


def _func(body, params, size_vars=()):
    return PrimFunc("f", list(params), list(size_vars), body)


def _flat(name, n, dtype="float32", scope="global"):
    return Buffer(name, (const(n),), dtype, scope, strides=(const(1),))


def _refused(func, fault, after="some_pass", done=("storage_flatten",), memo=None):
    with pytest.raises(InternalError) as info:
        verify(func, after, done, memo)
    message = str(info.value)
    assert f"after pass '{after}'" in message and fault in message, message


def test_a_correct_function_passes():
    n = Var("n")
    A, B = _flat("A", 8), _flat("B", 8)
    i = Var("i")
    body = For(i, const(0), n, "serial", BufferStore(B, BufferLoad(A, (i,)), (i,)))
    verify(_func(body, [A, B], [n]), "simplify", ("storage_flatten",))


def test_a_variable_bound_nowhere():
    A = _flat("A", 8)
    i, j = Var("i"), Var("j")
    body = For(i, const(0), const(8), "serial", BufferStore(A, const(1.0), (j,)))
    _refused(_func(body, [A]), "reads j, bound by no enclosing loop")


def test_a_loop_variable_read_after_its_loop():
    A = _flat("A", 8)
    i = Var("i")
    body = seq(For(i, const(0), const(8), "serial", BufferStore(A, const(1.0), (i,))),
               BufferStore(A, const(2.0), (i,)))
    _refused(_func(body, [A]), "reads i, bound by no enclosing loop")


def test_a_let_expression_binds_its_variable_only_in_its_body():
    from loopweave.dsl.expr import Let
    A = _flat("A", 8)
    x = Var("x")
    verify(_func(BufferStore(A, const(1.0), (Let(x, const(2), x),)), [A]), "p", ("storage_flatten",))
    _refused(_func(BufferStore(A, const(1.0), (Binary("add", Let(x, const(2), x), x),)), [A]),
             "reads x, bound by no")


def test_a_buffer_neither_argument_nor_allocated():
    A, T = _flat("A", 8), _flat("T", 8, scope="local")
    body = BufferStore(A, BufferLoad(T, (const(0),)), (const(0),))
    _refused(_func(body, [A]), "buffer 'T' is accessed but is neither an argument nor allocated")


def test_a_buffer_used_after_its_allocation_ends():
    A, T = _flat("A", 8), _flat("T", 8, scope="local")
    body = seq(Allocate(T, const(8), BufferStore(T, const(0.0), (const(0),))),
               BufferStore(A, BufferLoad(T, (const(0),)), (const(0),)))
    _refused(_func(body, [A]), "buffer 'T' is accessed but is neither")


def test_a_loop_extent_that_is_not_an_integer():
    A = _flat("A", 8)
    i = Var("i")
    body = For(i, const(0), const(8.0), "serial", BufferStore(A, const(1.0), (i,)))
    _refused(_func(body, [A]), "the extent of loop 'i' is not a scalar integer")


def test_a_loop_min_that_is_a_vector():
    A = _flat("A", 8)
    i = Var("i")
    body = For(i, Ramp(const(0), const(1), 4), const(8), "serial", BufferStore(A, const(1.0), (i,)))
    _refused(_func(body, [A]), "the min of loop 'i' is not a scalar integer")


def test_a_loop_variable_bound_twice_in_nested_loops():
    A = _flat("A", 64)
    i = Var("i")
    body = For(i, const(0), const(8), "serial", For(i, const(0), const(8), "serial",
                                                     BufferStore(A, const(1.0), (i,))))
    _refused(_func(body, [A]), "loop 'i' binds 'i', which an enclosing scope binds already")


def test_a_let_rebinding_a_size():
    n = Var("n")
    A = _flat("A", 8)
    body = LetStmt(n, const(3), BufferStore(A, const(1.0), (n,)))
    _refused(_func(body, [A], [n]), "let 'n' binds 'n', which an enclosing scope binds already")


def test_a_store_of_the_wrong_dtype():
    A = _flat("A", 8)
    _refused(_func(BufferStore(A, const(1.0, "float64"), (const(0),)), [A]),
             "a float64 value is stored to the float32 buffer 'A'")


def test_operands_of_two_dtypes():
    A, I = _flat("A", 8), _flat("I", 8, "int32")
    value = Binary("add", BufferLoad(A, (const(0),)), Binary("mul", const(1.0), const(2.0, "float64")))
    _refused(_func(BufferStore(A, value, (const(0),)), [A, I]), "operands of 'mul' have dtypes float32 and float64")


def test_vectors_of_different_lanes_combined():
    A = _flat("A", 64)
    value = Binary("add", BufferLoad(A, (Ramp(const(0), const(1), 8),)), BufferLoad(A, (Ramp(const(8), const(1), 4),)))
    _refused(_func(BufferStore(A, value, (Ramp(const(16), const(1), 8),)), [A]), "vectors of 4 and 8 lanes combined")


def test_a_vector_stored_at_a_scalar_index():
    A = _flat("A", 64)
    _refused(_func(BufferStore(A, Broadcast(const(1.0), 8), (const(0),)), [A]),
             "a vector of 8 lanes is stored at 1 index of 'A'")


def test_a_broadcast_of_a_vector():
    A = _flat("A", 64)
    value = Broadcast(BufferLoad(A, (Ramp(const(0), const(1), 4),)), 2)
    _refused(_func(BufferStore(A, value, (Ramp(const(0), const(1), 2),)), [A]), "a broadcast of a vector")


def test_a_condition_that_is_not_bool():
    A = _flat("A", 8)
    _refused(_func(IfThenElse(const(1), BufferStore(A, const(1.0), (const(0),))), [A]),
             "an if on a int64 condition")
    _refused(_func(BufferStore(A, Select(const(1), const(1.0), const(2.0)), (const(0),)), [A]),
             "a select on a int64 condition")
    _refused(_func(IfThenElse(Logical("and", const(1), const(True)), BufferStore(A, const(1.0), (const(0),))), [A]),
             "a logical 'and' of a non-bool operand")


def test_a_float_index():
    A = _flat("A", 8)
    _refused(_func(BufferStore(A, const(1.0), (const(0.5),)), [A]), "an index of 'A' is float32")


def test_indices_per_dimension_before_storage_flatten_and_one_after():
    A = Buffer("A", (const(4), const(8)), "float32")
    two = _func(BufferStore(A, const(1.0), (const(0), const(1))), [A])
    verify(two, "simplify", ())
    _refused(two, "buffer 'A' is accessed with 2 indices after storage_flatten")
    one = _func(BufferStore(A, const(1.0), (const(1),)), [A])
    _refused(one, "buffer 'A' of 2 dimensions is accessed with 1 indices", done=())


def test_an_allocation_without_strides_after_storage_flatten():
    A, T = _flat("A", 8), Buffer("T", (const(8),), "float32", "local")
    body = Allocate(T, const(8), BufferStore(A, const(0.0), (const(0),)))
    _refused(_func(body, [A]), "buffer 'T' has no strides after storage_flatten")


def test_a_dsl_node_left_in_the_loop_ir():
    X = lw.placeholder((8,), name="X")
    A = _flat("A", 8)
    _refused(_func(BufferStore(A, X[0], (const(0),)), [A]), "a DSL-only TensorLoad is left")


def test_a_kernel_reads_only_its_own_buffers_and_scalars():
    n = Var("n")
    A, T = _flat("A", 8), _flat("T", 8)
    i = Var("i")
    inner = For(i, const(0), const(8), "thread", BufferStore(A, BufferLoad(T, (i,)), (i,)), (("thread", "threadIdx.x"),))
    launch = KernelLaunch("k", (const(1),) * 3, (const(8), const(1), const(1)), (A,), (), inner)
    _refused(_func(Allocate(T, const(8), launch), [A], [n]), "buffer 'T' is accessed but is neither an argument nor "
                                                             "allocated in an enclosing scope of the kernel")
    m = Var("m")
    body = LetStmt(m, const(3), KernelLaunch("k", (const(1),) * 3, (const(8), const(1), const(1)), (A,), (),
                                             For(i, const(0), const(8), "thread",
                                                 BufferStore(A, const(1.0), (m,)), (("thread", "threadIdx.x"),))))
    _refused(_func(body, [A]), "reads m, bound by no enclosing loop")


def test_what_each_pass_guarantees():
    A = _flat("A", 8)
    i = Var("i")
    store = BufferStore(A, const(1.0), (i,))
    vector_loop = _func(For(i, const(0), const(8), "vectorized", store), [A])
    verify(vector_loop, "unroll", ("storage_flatten",))
    _refused(vector_loop, "a vectorized loop 'i' is left", after="vectorize")
    _refused(_func(For(i, const(0), const(4), "unrolled", store), [A]), "an unrolled loop 'i' is left", after="unroll")
    _refused(_func(For(i, const(0), const(0), "serial", store), [A]), "loop 'i' of extent 0 is left",
             after="remove_noops")
    _refused(_func(IfThenElse(const(True), BufferStore(A, const(1.0), (const(0),))), [A]),
             "an if on the constant True is left", after="simplify_flat")
    checked = BufferStore(A, const(1.0), (CheckedIndex(const(3), const(8), "dimension 0 of 'A'"),))
    verify(_func(checked, [A]), "simplify", ("storage_flatten",))
    _refused(_func(For(i, const(0), const(8), "serial", store), [A]), "loop 'i' runs on the host",
             after="split_host_device")
    warp = Buffer("W", (const(16), const(8)), "float32", "warp", strides=(const(8), const(1)))
    _refused(_func(Allocate(warp, const(128), Evaluate(const(0))), [A]), "the warp buffer 'W' is left",
             after="distribute_warp_tiles")


def test_a_memo_kept_from_pass_to_pass_still_checks_where_each_expression_stands():
    """The checks after each pass of one lowering share a VerifyMemo, and a pass keeps the nodes it does
    not change: the same expression moved out of the loop that binds its variable, out of the
    allocation of the buffer it loads, under a let that is now a vector, or left with two indices
    after storage_flatten, is refused as it is without the memo."""
    A, B, T = _flat("A", 64), _flat("B", 64), _flat("T", 8, scope="local")
    i, x = Var("i"), Var("x", "float32")
    load = BufferStore(B, BufferLoad(A, (i,)), (i,))
    memo = VerifyMemo()
    verify(_func(For(i, const(0), const(8), "serial", load), [A, B]), "p", ("storage_flatten",), memo)
    _refused(_func(load, [A, B]), "reads i, bound by no enclosing loop", memo=memo)

    from_t = BufferStore(A, BufferLoad(T, (const(0),)), (const(0),))
    verify(_func(Allocate(T, const(8), seq(BufferStore(T, const(0.0), (const(0),)), from_t)), [A]), "p",
           ("storage_flatten",), memo)
    _refused(_func(from_t, [A]), "buffer 'T' is accessed but is neither", memo=memo)

    plus_x = BufferStore(A, Binary("add", x, const(2.0)), (const(0),))
    verify(_func(LetStmt(x, const(1.0), plus_x), [A]), "p", ("storage_flatten",), memo)
    _refused(_func(LetStmt(x, Broadcast(const(1.0), 8), plus_x), [A]),
             "a vector of 8 lanes is stored at 1 index of 'A'", memo=memo)

    C = Buffer("C", (const(4), const(8)), "float32")
    two = BufferStore(A, BufferLoad(C, (const(0), const(1))), (const(0),))
    verify(_func(two, [A, C]), "simplify", (), memo)
    _refused(_func(two, [A, C]), "buffer 'C' is accessed with 2 indices after storage_flatten", memo=memo)


def test_lower_verifies_after_every_pass_when_enabled(monkeypatch):
    """A pass that breaks the IR is named by lower (the suite runs every lowering so)."""
    from loopweave.lowering import lower as lower_module
    assert verify_enabled()        # tests/conftest.py turns it on

    def broken(stmt, ctx):          # a store's value of the wrong dtype
        return seq(stmt, BufferStore(ctx.broken_buffer, const(1.0, "float64"), (const(0),)))
    A = lw.placeholder((8,), name="A")
    C = lw.compute((8,), lambda i: A[i] + 1.0, name="C")
    s = lw.create_schedule(C)
    passes = lower_module.PASSES + (("broken_pass", broken),)
    monkeypatch.setattr(lower_module, "PASSES", passes)
    monkeypatch.setattr(lower_module.PassContext, "broken_buffer", None, raising=False)
    original = lower_module.PassContext.__init__

    def init(self, *args, **kwargs):
        original(self, *args, **kwargs)
        self.broken_buffer = params[0]
    params = []
    monkeypatch.setattr(lower_module.PassContext, "__init__", init)
    real = lower_module.schedule_to_loops

    def to_loops(schedule, args):
        body, ps, sizes = real(schedule, args)
        params[:] = ps
        return body, ps, sizes
    monkeypatch.setattr(lower_module, "schedule_to_loops", to_loops)
    with pytest.raises(InternalError, match="after pass 'broken_pass'.*float64 value is stored"):
        lw.lower(s, [A, C])
    with verifying(False):
        lw.lower(s, [A, C])           # production: nothing checked
