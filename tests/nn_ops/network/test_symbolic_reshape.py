"""symbolic_reshape: reshapes between sympy shapes as runs of equal products, taken apart by constants
only, and the kernel that reads them equals numpy's reshape at several bindings."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.nn_ops.network import symbolic as S
from loopweave.nn_ops.network.symbolic_reshape import reshape_over_sizes, reshape_runs

B, T = S.symbol("batch"), S.symbol("seq")


@pytest.mark.parametrize("src,dst,runs", [
    ((B, 4, T, 64), (4 * B, T, 64), [([0], [0, 1]), ([1], [2]), ([2], [3])]),      # a head merge
    ((4 * B, T, 64), (B, 4, T, 64), [([0, 1], [0]), ([2], [1]), ([3], [2])]),      # a head split
    ((B * T, 256), (B * T, 4, 64), [([0], [0]), ([1, 2], [1])]),
    ((1, B, T), (B, 1, T), [([0], [1]), ([2], [2])]),                            # unit axes dropped
])
def test_runs_take_indices_apart_by_constants(src, dst, runs):
    assert reshape_runs(src, dst) == runs


@pytest.mark.parametrize("src,dst", [
    ((B * T, 256), (B, T, 256)),        # the row index divided by seq
    ((B, T), (T, B)),                   # no runs of equal products
    ((2 * B, 3), (3, 2 * B)),
])
def test_a_run_that_divides_by_a_run_time_size_has_no_runs(src, dst):
    assert reshape_runs(src, dst) is None


def test_the_kernel_reads_the_reshape():
    """[batch, 2, seq, 3] read as [2*batch, seq, 3], scaled: one size var per symbol."""
    names = S.dsl_variables(["batch", "seq"])
    by_symbol = {B: names["batch"], T: names["seq"]}

    def extent(d):
        c, m = S.dim(d).as_coeff_Mul()
        return int(d) if S.is_static(d) else int(c) * by_symbol[m]
    src, dst = (B, 2, T, 3), (2 * B, T, 3)
    x = lw.placeholder(tuple(extent(d) for d in src), name="x")
    y = reshape_over_sizes(x, src, dst, extent)
    z = lw.compute(y.shape, lambda *i: y[i] * 2.0, name="z")
    s = lw.create_schedule(z)
    s[y].compute_inline()
    f = lw.build(s, [x, z])
    for batch, seq in ((1, 1), (3, 5)):
        a = np.random.default_rng(batch).random((batch, 2, seq, 3), dtype=np.float32)
        out = np.empty((2 * batch, seq, 3), np.float32)
        f(a, out)
        np.testing.assert_array_equal(out, a.reshape(2 * batch, seq, 3) * 2)
