"""Run-time index checks in generated kernels: ``dsl.expr.checked_index`` and
``lw.build(..., checks="bounds")``.  A bad index raises ArgumentError naming the tensor and the
index, after the call, whatever the schedule (scalar, vectorized, parallel); it never reads
outside the buffer and is never clamped."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.expr import CheckedIndex, checked_index
from loopweave.dsl.visitor import post_order_visit
from loopweave.errors import BuildError, DTypeError, LoweringError


def _gather(n=8, m=64, wrap=True):
    A = lw.placeholder((n,), name="A", dtype="float32")
    idx = lw.placeholder((m,), name="idx", dtype="int64")
    C = lw.compute((m,), lambda i: A[checked_index(idx[i], n, "axis 0 of 'A'", wrap=wrap)], name="C")
    return A, idx, C


def _schedules(C):
    plain = lw.create_schedule(C)
    vec = lw.create_schedule(C)
    vec[C].vectorize(C.op.axis[0]) if C.shape[0].value <= 16 else None
    if C.shape[0].value > 16:
        _, inner = vec[C].split(C.op.axis[0], factor=8)
        vec[C].vectorize(inner)
    par = lw.create_schedule(C)
    outer, inner = par[C].split(C.op.axis[0], factor=8)
    par[C].parallel(outer)
    par[C].vectorize(inner)
    return {"serial": plain, "vectorized": vec, "parallel": par}


@pytest.mark.parametrize("kind", ["serial", "vectorized", "parallel"])
def test_checked_gather_runs_good_indices_and_refuses_bad_ones(kind):
    A, idx, C = _gather()
    f = lw.build(_schedules(C)[kind], [A, idx, C])
    a = np.arange(8, dtype="float32") * 10
    good = np.random.default_rng(0).integers(-8, 8, 64)
    c = np.zeros(64, "float32")
    f(a, good, c)
    np.testing.assert_array_equal(c, a[good])
    for bad_value in (8, -9, 40000, 10**12, -2**63):
        bad = good.copy()
        bad[37] = bad_value
        with pytest.raises(lw.ArgumentError, match=rf"index {bad_value} is out of range for axis 0 of 'A', of size 8 "
                                                   rf"\(valid: -8 to 7"):
            f(a, bad, c)
    f(a, good, c)       # the error slot was cleared: the next call runs
    np.testing.assert_array_equal(c, a[good])


def test_without_wrap_a_negative_index_is_out_of_range():
    A, idx, C = _gather(wrap=False)
    f = lw.build(lw.create_schedule(C), [A, idx, C])
    with pytest.raises(lw.IndexOutOfRangeError, match=r"index -1 is out of range .* \(valid: 0 to 7\)") as info:
        f(np.zeros(8, "float32"), np.full(64, -1), np.zeros(64, "float32"))
    assert (info.value.index, info.value.extent, info.value.what, info.value.node) == (-1, 8, "axis 0 of 'A'", "")


def test_the_first_bad_index_of_a_serial_kernel_is_reported():
    A, idx, C = _gather()
    f = lw.build(lw.create_schedule(C), [A, idx, C])
    bad = np.zeros(64, np.int64)
    bad[[5, 9]] = [100, 200]
    with pytest.raises(lw.ArgumentError, match="index 100 "):
        f(np.zeros(8, "float32"), bad, np.zeros(64, "float32"))


def test_many_parallel_failures_report_one_of_them():
    """Every chunk of the thread pool may fail at once: one compare-and-swap keeps the first."""
    A, idx, C = _gather(m=4096)
    f = lw.build(_schedules(C)["parallel"], [A, idx, C])
    bad = np.arange(4096, dtype=np.int64) + 1000
    with pytest.raises(lw.ArgumentError, match=r"index (\d+) is out of range") as info:
        f(np.zeros(8, "float32"), bad, np.zeros(4096, "float32"))
    reported = int(str(info.value).split("index ")[1].split(" ")[0])
    assert 1000 <= reported < 5096


def test_lanes_a_masked_select_does_not_use_are_not_checked():
    """select(i < 3, A[idx[i]], 0) vectorized: lane 3's index is garbage but never used."""
    A = lw.placeholder((8,), name="A", dtype="float32")
    idx = lw.placeholder((4,), name="idx", dtype="int64")
    C = lw.compute((4,), lambda i: lw.if_then_else(i < 3, A[checked_index(idx[i], 8, "A")], 0.0), name="C")
    s = lw.create_schedule(C)
    s[C].vectorize(C.op.axis[0])
    f = lw.build(s, [A, idx, C])
    c = np.zeros(4, "float32")
    f(np.arange(8, dtype="float32"), np.array([1, 2, 3, 99]), c)
    np.testing.assert_array_equal(c, [1, 2, 3, 0])


def test_checked_index_needs_an_integer():
    x = lw.placeholder((4,), name="x", dtype="float32")
    with pytest.raises(DTypeError, match="must be an integer"):
        checked_index(x[0], 4, "x")


def _checked_nodes(func):
    found = []
    post_order_visit(func.body, lambda n: found.append(n) if isinstance(n, CheckedIndex) else None)
    return found


def _data_dependent():
    A = lw.placeholder((8, 5), name="A", dtype="float32")
    idx = lw.placeholder((6,), name="idx", dtype="int32")
    C = lw.compute((6, 5), lambda i, j: A[idx[i], j], name="C")
    return A, idx, C


def test_checks_bounds_checks_data_dependent_loads_only():
    A, idx, C = _data_dependent()
    s = lw.create_schedule(C)
    assert not _checked_nodes(lw.lower(s, [A, idx, C]))           # default: only stated checks
    checked = _checked_nodes(lw.lower(s, [A, idx, C], checks="bounds"))
    assert len(checked) == 1 and "dimension 0 of 'A'" in checked[0].what   # j is affine: proven at compile time
    assert "checked(" in str(lw.lower(s, [A, idx, C], checks="bounds"))


@pytest.mark.parametrize("vectorize", [False, True])
def test_checks_bounds_raises_naming_the_tensor_and_index(vectorize):
    A, idx, C = _data_dependent()
    s = lw.create_schedule(C)
    if vectorize:
        s[C].vectorize(C.op.axis[1])
    a = np.arange(40, dtype="float32").reshape(8, 5)
    c = np.zeros((6, 5), "float32")
    f = lw.build(s, [A, idx, C], checks="bounds")
    f(a, np.array([0, 7, 3, 3, 1, 2], np.int32), c)
    np.testing.assert_array_equal(c, a[[0, 7, 3, 3, 1, 2]])
    with pytest.raises(lw.ArgumentError, match=r"index 8 is out of range for dimension 0 of 'A' "
                                               r"\(read as A\[int64\(idx\[i\]\), j\] in 'main'\), of size 8 \(valid: 0 to 7\)"):
        f(a, np.array([0, 8, 3, 3, 1, 2], np.int32), c)
    with pytest.raises(lw.ArgumentError, match="index -1 is out of range"):
        f(a, np.array([0, 1, 3, 3, 1, -1], np.int32), c)


@pytest.mark.parametrize("bad", ["bound", "all", True, 1])
def test_a_bad_checks_value_is_refused(bad):
    A, idx, C = _data_dependent()
    s = lw.create_schedule(C)
    with pytest.raises(BuildError, match=r"checks=.* is not a kind of run-time check; use checks=None .* "
                                         r"or checks='bounds'"):
        lw.build(s, [A, idx, C], checks=bad)
    with pytest.raises(LoweringError, match="is not a kind of run-time check"):
        lw.lower(s, [A, idx, C], checks=bad)


def test_cuda_lowering_keeps_checked_indices_for_the_kernel():
    """CUDA kernels check too (their device error slot: tests/backends/cuda/test_index_checks.py): the
    check reaches the kernel, not a clamp."""
    A, idx, C = _gather()
    s = lw.create_schedule(C)
    outer, inner = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(outer, lw.thread_axis("blockIdx.x"))
    s[C].bind(inner, lw.thread_axis("threadIdx.x"))
    func = lw.lower(s, [A, idx, C], target="cuda")
    assert len(_checked_nodes(func)) == 1
    assert "min(max(" not in str(func)


def test_a_checked_loop_is_still_vectorized_by_llvm():
    """The body ORs failures into a flag without branching (the report comes from a replay), so
    LLVM's loop vectorizer still turns a scalar gather loop into vector code: the check costs
    one compare, not the vectorization (benchmarks/index_check_overhead.py times it)."""
    A, idx, C = _gather(n=4096, m=4096)
    f = lw.build(lw.create_schedule(C), [A, idx, C])
    optimized = f.get_source("ll-opt")
    assert any(f"<{w} x i64>" in optimized for w in (2, 4, 8, 16)), "the checked gather loop was not vectorized"


def test_a_failure_beside_an_intermediate_buffer_is_reported():
    """The replay that reports runs the whole body again, intermediate buffers included
    (here one of 256 KiB, from the per-call workspace)."""
    n, m = 8, 65536
    A = lw.placeholder((n,), name="A", dtype="float32")
    idx = lw.placeholder((m,), name="idx", dtype="int64")
    B = lw.compute((m,), lambda i: A[checked_index(idx[i], n, "axis 0 of 'A'", wrap=True)], name="B")
    C = lw.compute((m,), lambda i: B[m - 1 - i] + 1.0, name="C")
    f = lw.build(lw.create_schedule(C), [A, idx, C])
    a = np.arange(8, dtype="float32")
    good = np.arange(m, dtype=np.int64) % 8
    c = np.zeros(m, "float32")
    f(a, good, c)
    np.testing.assert_array_equal(c, a[good][::-1] + 1)
    good[60000] = 12
    with pytest.raises(lw.ArgumentError, match="index 12 is out of range"):
        f(a, good, c)


def test_checks_bounds_is_accepted_for_cuda():
    A, idx, C = _data_dependent()
    s = lw.create_schedule(C)
    i, j = C.op.axis
    s[C].bind(i, lw.thread_axis("blockIdx.x"))
    s[C].bind(j, lw.thread_axis("threadIdx.x"))
    assert not _checked_nodes(lw.lower(s, [A, idx, C], target="cuda"))
    checked = _checked_nodes(lw.lower(s, [A, idx, C], target="cuda", checks="bounds"))
    assert len(checked) == 1 and "dimension 0 of 'A'" in checked[0].what
