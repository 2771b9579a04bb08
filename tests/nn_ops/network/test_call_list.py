"""The call tables (``network/call_list.py``) run by the native call-list loop
(``backends/llvm/call_list_runner.py``): kernels run in order with their sizes,
pointers of the feed patched per run, and the list stops after a kernel that reports an error."""
import numpy as np
import sympy

import loopweave as lw
from loopweave.backends.llvm.call_list_runner import call_list_object, call_list_runner
from loopweave.nn_ops.network import call_list
from loopweave.nn_ops.network import symbolic as S


def kernels():
    n = lw.var("v0")
    A = lw.placeholder((n,), name="A", dtype="float32")
    B = lw.compute((n,), lambda i: A[i] + 1.0, name="B")
    plus_one = lw.build(lw.create_schedule(B), [A, B])
    m = lw.var("v0")
    idx = lw.placeholder((m,), name="idx", dtype="int64")
    src = lw.placeholder((4,), name="src", dtype="float32")
    G = lw.compute((m,), lambda i: src[idx[i]], name="G")
    gather = lw.build(lw.create_schedule(G), [idx, src, G], checks="bounds")
    return plus_one, gather


def test_calls_run_in_order_with_their_sizes_and_the_feed_patched_per_run():
    plus_one, _ = kernels()
    N = S.symbol("N")
    arrays = {"mid": np.zeros(6, np.float32), "out": np.zeros(6, np.float32)}
    calls = [(plus_one, ("x", "mid"), {"v0": 2 * N}), (plus_one, ("mid", "out"), {"v0": 2 * N})]
    table = call_list.CallTable(calls, arrays, {"N": 3}, patched={"x": (0, 0)})
    run = call_list_runner(call_list_object(plus_one.target))
    for start in (0.0, 10.0):
        x = np.arange(6, dtype=np.float32) + start
        assert table.run(run, [x]) == 0
        np.testing.assert_array_equal(arrays["out"], x + 2)


def test_patched_arguments_point_into_the_arrays_given_per_run_at_their_offsets():
    """An argument patched as (position, byte offset) reads or writes the array at that position of
    each run's list from that offset: an output written into a new array, a part of it in place."""
    plus_one, _ = kernels()
    N = S.symbol("N")
    arrays = {"mid": np.zeros(2, np.float32)}
    calls = [(plus_one, ("x", "mid"), {"v0": N}), (plus_one, ("mid", "out.tail"), {"v0": N})]
    table = call_list.CallTable(calls, arrays, {"N": 2}, patched={"x": (0, 0), "out.tail": (1, 8)})
    run = call_list_runner(call_list_object(plus_one.target))
    for start in (0.0, 5.0):
        x, out = np.arange(2, dtype=np.float32) + start, np.full(4, -1, np.float32)
        assert table.run(run, [x, out]) == 0
        np.testing.assert_array_equal(out, [-1.0, -1.0, start + 2, start + 3])


def test_the_list_stops_after_a_kernel_that_reports_an_error():
    plus_one, gather = kernels()
    arrays = {"src": np.arange(4, dtype=np.float32), "g": np.zeros(2, np.float32), "out": np.full(2, -1, np.float32)}
    two = {"v0": sympy.Integer(2)}
    calls = [(gather, ("idx", "src", "g"), two), (plus_one, ("g", "out"), two)]
    table = call_list.CallTable(calls, arrays, {}, patched={"idx": (0, 0)})
    run = call_list_runner(call_list_object(plus_one.target))
    assert table.run(run, [np.array([1, 3], np.int64)]) == 0
    np.testing.assert_array_equal(arrays["out"], [2.0, 4.0])
    arrays["out"][:] = -1
    assert table.run(run, [np.array([1, 9], np.int64)]) != 0
    np.testing.assert_array_equal(arrays["out"], [-1.0, -1.0])        # the second kernel never ran
