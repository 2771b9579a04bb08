"""The op library's generic schedules (``nn_ops/ops/registry.py``)."""
import re

import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops.shape import transpose


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


def test_static_injective_kernels_fuse_every_outer_axis():
    X = lw.placeholder((2, 7, 4, 64), name="X")
    Y = transpose(X, (0, 2, 3, 1), name="Y")
    s = nn_ops.schedule(Y, "llvm")
    lowered = str(lw.lower(s, [X, Y]))
    assert lowered.count("for ") == 1 and "parallel" in lowered      # one fused parallel loop
