"""The op library's generic schedules (``nn_ops/ops/registry.py``)."""
import re

import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops.shape import transpose
from loopweave.target import resolve_target


@pytest.mark.parametrize("perm", [(0, 2, 3, 1), (0, 2, 1, 3), (1, 0, 2, 3)])
def test_injective_kernels_of_symbolic_extents_divide_only_by_constants(perm):
    """A fused parallel index is taken apart by division: only axes whose extents are constants join
    it (a division by a run-time size per element made the encoder's K transpose 16x slower), and
    every binding still gives numpy's result."""
    b, s = lw.var("b"), lw.var("s")
    X = lw.placeholder((b, s, 4, 64), name="X")
    Y = transpose(X, perm, name="Y")
    f = lw.build(nn_ops.schedule(Y, "llvm"), [X, Y])
    lowered = f.get_source("lowered")
    assert not re.search(r"(//|%) [bs]\b", lowered), lowered
    for bs in ((1, 1), (2, 7), (1, 33)):
        x = np.random.default_rng(sum(bs)).standard_normal((*bs, 4, 64)).astype(np.float32)
        y = np.empty(tuple(x.shape[p] for p in perm), np.float32)
        f(x, y)
        np.testing.assert_array_equal(y, x.transpose(perm))


def test_rows_shorter_than_a_vector_are_fused_and_vectorized(x86_level):
    """ShuffleNetV2's channel shuffle, a transpose of [1, 2, 116, 14, 14] that keeps the last two
    axes: on 16 lanes they run as rows of 196 in whole vectors and one partial vector (57 -> 4 us),
    where every element was copied on its own with a division per index.  Rows two pixels short of
    a vector, at each width."""
    lanes = x86_level.lanes("float32")
    width = lanes - 2
    X = lw.placeholder((1, 2, 116, width, width), name="X")
    Y = transpose(X, (0, 2, 1, 3, 4), name="Y")
    f = lw.build(nn_ops.schedule(Y, x86_level), [X, Y], target=x86_level)
    lowered = f.get_source("lowered")
    assert re.search(rf"Y\[ramp\([^\]]*, 1, {lanes}\)\] = X\[ramp\(", lowered), lowered
    assert "not_vectorized" not in lowered and f"// {width}" not in lowered, lowered
    if x86_level.runs_here():
        x = np.random.default_rng(0).standard_normal((1, 2, 116, width, width)).astype(np.float32)
        y = np.empty((1, 116, 2, width, width), np.float32)
        f(x, y)
        np.testing.assert_array_equal(y, x.transpose(0, 2, 1, 3, 4))


def test_static_injective_kernels_fuse_every_outer_axis():
    X = lw.placeholder((2, 7, 4, 64), name="X")
    Y = transpose(X, (0, 2, 1, 3), name="Y")
    s = nn_ops.schedule(Y, "llvm")
    lowered = str(lw.lower(s, [X, Y]))
    assert lowered.count("for ") == 1 and "parallel" in lowered      # one fused parallel loop


@pytest.mark.parametrize("shape, perm", [((1, 196, 768), (0, 2, 1)), ((1, 20, 36), (0, 2, 1)),
                                         ((1, 14, 14, 96), (0, 3, 1, 2)), ((2, 96, 9, 9), (0, 2, 3, 1)),
                                         ((1, 4, 12, 64), (0, 1, 3, 2)), ((3, 5, 6), (2, 1, 0))])
@pytest.mark.parametrize("epilogue", [False, True])
def test_a_transpose_moves_tiles_through_registers(shape, perm, epilogue):
    """A transpose whose last output axis is not the input's last runs in tiles of up to 16 x 16
    (at least 4 x 4) transposed in registers: no gathers, numpy's result, with an elementwise
    epilogue too (ConvNeXt's transpose back to NCHW with the residual add)."""
    X = lw.placeholder(shape, name="X")
    Y = transpose(X, perm, name="Y")
    out_shape = tuple(shape[p] for p in perm)
    args = [X]
    if epilogue:
        R = lw.placeholder(out_shape, name="R")
        T = Y
        Y = lw.compute(out_shape, lambda *i: T[i] + R[i], name="Z", tag="elemwise")
        args.append(R)
    s = nn_ops.schedule(Y, "llvm")
    f = lw.build(s, args + [Y])
    rng = np.random.default_rng(len(shape))
    x = rng.standard_normal(shape).astype(np.float32)
    r = rng.standard_normal(out_shape).astype(np.float32)
    y = np.empty(out_shape, np.float32)
    f(*([x, r] if epilogue else [x]), y)
    np.testing.assert_array_equal(y, x.transpose(perm) + r if epilogue else x.transpose(perm))
    tiled = min(out_shape[-1], out_shape[list(perm).index(len(shape) - 1)]) >= 4
    assert ("pragma" in str(s.trace) and "transpose" in str(s.trace)) == tiled
    if tiled:
        assert "masked.gather" not in f.get_source("ll")


def test_a_transpose_over_a_symbolic_row_takes_whole_tiles_and_one_masked_tail():
    """The polymorphic encoder's K transpose [b, s, 4, 64] -> [b, 4, 64, s]: whole 16 x 16 tiles
    transposed in registers, the last tile of each row one masked vector; numpy's result at every s."""
    b, s = lw.var("b"), lw.var("s")
    X = lw.placeholder((b, s, 4, 64), name="X")
    Y = transpose(X, (0, 2, 3, 1), name="Y")
    sch = nn_ops.schedule(Y, "llvm")
    assert "'transpose'" in str(sch.trace) and "'pad_tails'" in str(sch.trace)
    f = lw.build(sch, [X, Y])
    assert "its extent is not a constant" not in f.get_source("lowered")
    for bs in ((1, 1), (2, 7), (1, 16), (1, 37)):
        x = np.random.default_rng(sum(bs)).standard_normal((*bs, 4, 64)).astype(np.float32)
        y = np.full((bs[0], 4, 64, bs[1]), np.nan, np.float32)
        f(x, y)
        np.testing.assert_array_equal(y, x.transpose(0, 2, 3, 1))


def test_an_elementwise_kernel_over_a_symbolic_row_takes_whole_vectors_and_one_masked_tail():
    """A row of run-time width (an NCHW map of symbolic size) is vectors, the last one masked, not a
    scalar per element; widths under one vector, at a whole number of them and past it all give
    numpy's result, and nothing past the row is written."""
    h, w = lw.var("h"), lw.var("w")
    X = lw.placeholder((2, h, w), name="X")
    Y = lw.compute((2, h, w), lambda n, i, j: lw.sigmoid(X[n, i, j]) * 2.0, name="Y", tag="elemwise")
    f = lw.build(nn_ops.schedule(Y, "llvm"), [X, Y])
    lowered = f.get_source("lowered")
    assert "pad_tails" in lowered and "ramp(" in lowered, lowered
    for hw in ((1, 1), (3, 16), (2, 37)):
        x = np.random.default_rng(sum(hw)).standard_normal((2, *hw)).astype(np.float32)
        out = np.full((2 * hw[0] * hw[1] + 16,), 7.0, np.float32)
        f(x, out[:-16].reshape(2, *hw))
        np.testing.assert_allclose(out[:-16].reshape(2, *hw), 2.0 / (1.0 + np.exp(-x)), rtol=1e-6, atol=1e-6)
        assert (out[-16:] == 7.0).all()


@pytest.mark.parametrize("shape, parallel", [((1, 128), False), ((2, 1023), False), ((4, 512), True),
                                             ((64, 64), True)])
def test_injective_kernels_with_little_work_stay_on_one_thread(shape, parallel):
    """Under ``SERIAL_WORK`` (an elementwise value counted as ``ELEMENT_WORK``) a kernel is not split
    across threads: waking the pool costs more than the work (an LSTM cell of 1 x 64 units)."""
    from loopweave.nn_ops.ops.registry import ELEMENT_WORK, SERIAL_WORK
    assert (shape[0] * shape[1] * ELEMENT_WORK >= SERIAL_WORK) == parallel
    X = lw.placeholder(shape, name="X")
    Y = nn_ops.sigmoid(X)
    f = lw.build(nn_ops.schedule(Y, "llvm"), [X, Y])
    assert ("# parallel" in f.get_source("lowered")) == parallel
    x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
    y = np.empty(shape, np.float32)
    f(x, y)
    np.testing.assert_allclose(y, 1 / (1 + np.exp(-x)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("m, n, k, parallel", [(1, 256, 64, False), (1, 512, 64, True), (16, 64, 64, True)])
def test_matmuls_with_little_work_stay_on_one_thread(m, n, k, parallel):
    X = lw.placeholder((m, k), name="X")
    W = lw.placeholder((n, k), name="W")
    Y = nn_ops.dense(X, W)
    f = lw.build(nn_ops.schedule(Y, "llvm"), [X, W, Y])
    assert ("# parallel" in f.get_source("lowered")) == parallel
    rng = np.random.default_rng(0)
    x, w = rng.standard_normal((m, k)).astype(np.float32), rng.standard_normal((n, k)).astype(np.float32)
    y = np.empty((m, n), np.float32)
    f(x, w, y)
    np.testing.assert_allclose(y, x @ w.T, rtol=1e-4, atol=1e-4)


def test_an_injective_loop_of_run_time_extent_and_little_work_an_iteration_runs_serially_below_serial_work():
    """One token's head transpose over a symbolic batch: each parallel iteration copies one vector, so the
    loop runs on the calling thread below SERIAL_WORK / (lanes * ELEMENT_WORK) iterations; right both ways."""
    from loopweave.nn_ops.ops.registry import ELEMENT_WORK, SERIAL_WORK
    lanes = resolve_target("llvm").lanes("float32")
    b = lw.var("b")
    A = lw.placeholder((b, 1, 4, 64), name="A")
    T = transpose(A, (0, 2, 1, 3))
    s = nn_ops.schedule([T])
    assert f"serial_below={SERIAL_WORK // (lanes * ELEMENT_WORK)}" in str(lw.lower(s, [A, T]))
    f = lw.build(s, [A, T])
    for batch in (1, SERIAL_WORK // (lanes * ELEMENT_WORK)):
        a = np.random.default_rng(batch).random((batch, 1, 4, 64), dtype=np.float32)
        t = np.empty((batch, 4, 1, 64), np.float32)
        f(a, t)
        np.testing.assert_array_equal(t, a.transpose(0, 2, 1, 3))
