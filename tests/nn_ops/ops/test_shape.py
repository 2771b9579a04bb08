"""The reduce op's schedules: few long reductions split across threads and vector lanes."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops.shape import reduce

NUMPY = {"sum": np.sum, "mean": np.mean, "max": np.max, "min": np.min, "prod": np.prod}


@pytest.mark.parametrize("kind,dtype", [(kind, dtype) for kind in sorted(NUMPY) for dtype in ("float32", "int32")
                                        if (kind, dtype) != ("mean", "int32")])   # an integer mean: no reciprocal
@pytest.mark.parametrize("shape,axes", [((128, 768), (0, 1)), ((4097,), (0,)), ((3, 5001), (1,)),
                                        ((2, 3, 2048), (0, 2))])
def test_few_long_reductions_match_numpy(kind, shape, axes, dtype):
    """Whole tensors and few rows, with shares and lane blocks that do not divide the length (guarded)."""
    rng = np.random.default_rng(len(shape))
    if kind == "prod":      # products of values near 1 (floats) or of mostly ones (ints) stay finite
        x = (rng.uniform(0.999, 1.001, shape) if dtype == "float32" else rng.choice([1, 1, 1, -1], shape))
    else:
        x = rng.standard_normal(shape) * 100
    x = x.astype(dtype)
    X = lw.placeholder(shape, name="X", dtype=dtype)
    R = reduce(X, list(axes), kind, keepdims=False)
    s = nn_ops.schedule(R, "llvm")
    text = str(lw.lower(s, [X, R]))
    assert "parallel" in text and "ramp(" in text, text
    f = lw.build(s, [X, R])
    out = np.zeros(tuple(d for a, d in enumerate(shape) if a not in axes), dtype)
    f(x, out)
    want = NUMPY[kind](x.astype(np.float64), axis=axes)
    if dtype == "int32":
        np.testing.assert_array_equal(out, want.astype(np.int64).astype(np.int32))
    else:
        np.testing.assert_allclose(out, want, rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("kind", ["max", "sum"])
@pytest.mark.parametrize("shape,axes", [((64, 4096), (1,)), ((5, 7, 40), (1, 2)), ((9, 33), (1,)),
                                        ((2, 3, 4, 50), (3,))])
def test_many_rows_reduce_in_vector_lanes_each(kind, shape, axes):
    """Trailing reduced axes (contiguous values): each output's values in vector partials, the rows
    in parallel; tails of the lane split guarded."""
    x = np.random.default_rng(len(shape)).standard_normal(shape).astype(np.float32)
    X = lw.placeholder(shape, name="X")
    R = reduce(X, list(axes), kind, keepdims=True)
    s = nn_ops.schedule(R, "llvm")
    text = str(lw.lower(s, [X, R]))
    assert ".rf" in text and "ramp(" in text and "parallel" in text, text
    f = lw.build(s, [X, R])
    out = np.zeros(NUMPY[kind](x, axis=axes, keepdims=True).shape, np.float32)
    f(x, out)
    np.testing.assert_allclose(out, NUMPY[kind](x.astype(np.float64), axis=axes, keepdims=True), rtol=1e-5, atol=1e-4)


def test_reductions_over_leading_axes_keep_one_output_per_iteration():
    """Values strided in memory (a column sum) are not gathered into vectors."""
    X = lw.placeholder((4096, 64), name="X")
    R = reduce(X, [0], "max", keepdims=False)
    text = str(lw.lower(nn_ops.schedule(R, "llvm"), [X, R]))
    assert ".rf" not in text, text


@pytest.mark.parametrize("shape", [(300,), (6, 50)])
def test_a_medium_whole_tensor_reduction_to_a_scalar(shape):
    """Fewer values than the split across threads wants, more than two vectors: vector partials at
    the root (there is no output loop to put them in)."""
    x = np.random.default_rng(1).standard_normal(shape).astype(np.float32)
    X = lw.placeholder(shape, name="X")
    R = reduce(X, list(range(len(shape))), "min", keepdims=False)
    f = lw.build(nn_ops.schedule(R, "llvm"), [X, R])
    out = np.zeros((), np.float32)
    f(x, out)
    assert out == x.min()


@pytest.mark.parametrize("src,dst,runs", [((1, 3, 64, 197), (3, 64, 197), [([0], [1]), ([1], [2]), ([2], [3])]),
                                          ((128, 256), (1, 128, 4, 64), [([1], [0]), ([2, 3], [1])]),
                                          ((6, 4), (4, 6), [([0, 1], [0, 1])]),
                                          ((2, 3, 4), (24,), [([0], [0, 1, 2])]), ((1,), (1, 1), [])])
def test_reshape_matches_axes_in_runs_of_equal_size(src, dst, runs):
    """Only a run that splits a source axis's index takes a flat index apart: a reshape that adds or drops
    unit axes is plain indexing (no division), whatever its index (a packed panel's shifted start)."""
    from loopweave.dsl.expr import Binary
    from loopweave.dsl.visitor import post_order_visit
    from loopweave.nn_ops.ops.shape import _axis_runs, reshape
    assert _axis_runs(src, dst) == runs
    X = lw.placeholder(src, name="X")
    Y = reshape(X, dst)
    divisions = []
    post_order_visit(Y.op.body[0], lambda n: divisions.append(n)
                     if isinstance(n, Binary) and n.op in ("floordiv", "floormod") else None)
    assert bool(divisions) == any(len(i) > 1 for _, i in runs)      # (merged axes need no division)
    x = np.random.default_rng(971).random(src).astype("float32")
    y = np.empty(dst, "float32")
    lw.build(nn_ops.schedule(Y), [X, Y])(x, y)
    np.testing.assert_array_equal(y, x.reshape(dst))


def test_an_empty_reshape_is_one_run():
    """No elements: no runs of equal products to find (ONNX's reshape_allowzero case, [0, 3, 4] -> [3, 4, 0])."""
    from loopweave.nn_ops.ops.shape import _axis_runs, reshape
    assert _axis_runs((0, 3, 4), (3, 4, 0)) == [([0, 1, 2], [0, 1, 2])]
    assert tuple(int(d.value) for d in reshape(lw.placeholder((0, 3, 4), name="X"), (3, 4, 0)).shape) == (3, 4, 0)
