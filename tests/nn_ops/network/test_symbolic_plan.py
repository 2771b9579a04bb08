"""The symbolic memory plan (``network/symbolic_plan.py``): slots by liveness with symbolic sizes,
laid out per binding; views share their source's slot; the arena grows and is reused."""
import numpy as np
import sympy

from loopweave.nn_ops.network import symbolic as S
from loopweave.nn_ops.network.symbolic_plan import ALIGN, SymbolicPlan

N, SEQ = S.symbol("N"), S.symbol("seq")


def chain_plan():
    # a -> b -> c -> d (each step reads the previous value); d is the output, v a view of b
    values = {"a": ((N, SEQ, 4), "float32"), "b": ((N, SEQ, 8), "float32"), "v": ((N * SEQ, 8), "float32"),
              "c": ((N, 2), "float64"), "d": ((N, SEQ, 4), "float32")}
    steps = [([], ["a"]), (["a"], ["b"]), (["v"], ["c"]), (["c"], ["d"])]
    return SymbolicPlan(values, steps, views={"v": "b"}, keep=["d"])


def test_values_whose_lifetimes_do_not_overlap_share_a_slot():
    plan = chain_plan()
    assert plan.slot_of["v"] == plan.slot_of["b"]
    assert plan.slot_of["a"] != plan.slot_of["b"]           # b is written while a is read
    assert plan.slot_of["c"] == plan.slot_of["a"]           # a is dead once b exists
    assert plan.slot_of["d"] == plan.slot_of["b"]           # b (and its view) die at c's step
    assert len(plan.slot_sizes) == 2
    # a's slot holds 16*N*seq bytes or c's 16*N: the larger, whatever the binding
    assert S.evaluate(plan.slot_sizes[plan.slot_of["a"]], {"N": 3, "seq": 1}) == 48
    assert S.evaluate(plan.slot_sizes[plan.slot_of["a"]], {"N": 3, "seq": 5}) == 240


def test_layout_and_views_at_a_binding():
    plan = chain_plan()
    offsets, total = plan.layout({"N": 2, "seq": 3})
    assert offsets == [0, 128] and total == 128 + 192 and all(o % ALIGN == 0 for o in offsets)
    arrays = plan.arrays({"N": 2, "seq": 3})
    assert arrays["b"].shape == (2, 3, 8) and arrays["v"].shape == (6, 8) and arrays["c"].dtype == np.float64
    arrays["b"][...] = np.arange(48).reshape(2, 3, 8)
    np.testing.assert_array_equal(arrays["v"], np.arange(48).reshape(6, 8))
    assert all(a.ctypes.data % ALIGN == 0 for a in arrays.values())
    # no two values alive at the same step overlap
    assert not np.may_share_memory(arrays["a"], arrays["b"]) and not np.may_share_memory(arrays["c"], arrays["d"])


def test_arena_grows_only_for_larger_bindings():
    plan = chain_plan()
    plan.arrays({"N": 2, "seq": 50})
    grown, size = plan.grown, plan.arena_bytes
    plan.arrays({"N": 1, "seq": 3})
    plan.arrays({"N": 2, "seq": 50})
    assert (plan.grown, plan.arena_bytes) == (grown, size)
    plan.arrays({"N": 2, "seq": 51})
    assert plan.grown == grown + 1


def test_the_arena_always_has_room_to_align_its_start():
    """A binding that needs up to ALIGN bytes more than the last one grows the arena too: its start is
    aligned within it, so the last values would otherwise run past its end (a TopK's (3, 3) result
    was cut to 4 elements)."""
    plan = chain_plan()
    for seq in (3, 4, 5, 8, 9, 16, 17):
        arrays = plan.arrays({"N": 1, "seq": seq})
        assert plan.arena_bytes >= plan.layout({"N": 1, "seq": seq})[1] + ALIGN
        assert all(a.shape == tuple(S.evaluate(d, {"N": 1, "seq": seq}) for d in plan.values[n][0])
                   for n, a in arrays.items())


def test_a_slot_provably_large_enough_is_preferred():
    values = {"big": ((N, 64), "float32"), "x": ((N, 2), "float32"), "small": ((N, 2), "float32"),
              "y": ((N, 64), "float32"), "z": ((N, 2), "float32")}
    steps = [([], ["big"]), ([], ["small"]), (["big", "small"], ["x"]), (["x"], ["y"]), (["y"], ["z"])]
    plan = SymbolicPlan(values, steps, views={}, keep=["z"])
    # at y's step both big's and small's slots are free; only big's is provably >= 256*N bytes
    assert plan.slot_of["y"] == plan.slot_of["big"]
    assert all(not isinstance(s, sympy.Max) for s in plan.slot_sizes[:1])


def test_views_of_a_recent_binding_are_reused_until_the_arena_grows():
    plan = chain_plan()
    first = plan.arrays({"N": 1, "seq": 3})
    assert plan.arrays({"seq": 3, "N": 1}) is first                 # no size evaluated again
    plan.arrays({"N": 4, "seq": 40})                                # grows: the old views are stale
    again = plan.arrays({"N": 1, "seq": 3})
    assert again is not first
    assert all(np.shares_memory(a, plan._arena) for a in again.values())
    assert not any(np.shares_memory(a, plan._arena) for a in first.values())


def test_a_view_at_an_offset_lies_inside_its_source():
    """A concat's two parts [N, 16] written in place: the second at 64 * N bytes into the concat."""
    values = {"p": ((N, 16), "float32"), "q": ((N, 16), "float32"), "cat": ((2 * N, 16), "float32"),
              "y": ((2 * N, 16), "float32")}
    steps = [([], ["p"]), ([], ["q"]), (["cat"], ["y"])]
    plan = SymbolicPlan(values, steps, views={"p": "cat", "q": "cat"}, keep=["y"], offsets={"q": 64 * N})
    assert plan.slot_of["p"] == plan.slot_of["q"] == plan.slot_of["cat"] != plan.slot_of["y"]
    for n in (1, 3):
        arrays = plan.arrays({"N": n, "seq": 1})
        arrays["p"][...], arrays["q"][...] = 1.0, 2.0
        np.testing.assert_array_equal(arrays["cat"], np.repeat([1.0, 2.0], 16 * n).reshape(2 * n, 16))
