"""Winograd on maps of symbolic size (``ops/winograd_rows.py``): the same results as the direct blocked
convolution at every size, partial tiles included, and whole tiles without guards or tails."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.expr import binary, const
from loopweave.nn_ops.ops import nchwc, winograd
from loopweave.nn_ops.ops.registry import schedule
from loopweave.nn_ops.ops.winograd_rows import conv2d_winograd_rows

C = 32


def _relu_of(Y):
    return lw.compute(Y.shape, lambda *i: binary("max", Y[i], const(0.0)), name="relu", tag="elemwise")


def _direct(x, weight):
    X = lw.placeholder(x.shape, name="X")
    Wp = lw.placeholder((C // 16, C // 16, 3, 3, 16, 16), name="Wp")
    Z = _relu_of(nchwc.conv2d_blocked(X, Wp, padding=(1, 1, 1, 1)))
    out = np.zeros(x.shape, np.float32)
    lw.build(schedule([Z], "llvm"), [X, Wp, Z])(x, nchwc.pack_blocked_weight(weight, 16, 16), out)
    return out


@pytest.fixture(scope="module")
def weight():
    return (np.random.default_rng(0).standard_normal((C, C, 3, 3)) * 0.1).astype(np.float32)


@pytest.fixture(scope="module")
def any_size():
    """Height and width plain size vars: odd sizes end in a partial tile."""
    X = lw.placeholder((lw.var("N"), C // 16, lw.var("H"), lw.var("W"), 16), name="X")
    U = lw.placeholder((16, C // 16, C // 16, 16, 16), name="U")
    Z = _relu_of(conv2d_winograd_rows(X, U, tile_block=4))
    return lw.build(schedule([Z], "llvm"), [X, U, Z])


@pytest.mark.parametrize("n, h, w", [(1, 8, 8), (2, 5, 7), (1, 1, 1), (1, 2, 9), (1, 13, 4)])
def test_any_size_matches_the_direct_convolution(any_size, weight, n, h, w):
    x = np.random.default_rng(h * 31 + w).standard_normal((n, C // 16, h, w, 16)).astype(np.float32)
    out = np.zeros_like(x)
    any_size(x, winograd.winograd_weight(weight, 16, 16), out)
    np.testing.assert_allclose(out, _direct(x, weight), rtol=1e-4, atol=1e-4)


def test_whole_tiles_by_construction_run_without_guards(weight):
    """Height 2 x TH and width 2 x 7 x TW: every tile and register block is whole, so the lowered
    code has no guard and the matmuls' register block has constant extents."""
    TH, TW = lw.var("TH"), lw.var("TW")
    X = lw.placeholder((1, C // 16, TH * 2, TW * 14, 16), name="X")
    U = lw.placeholder((16, C // 16, C // 16, 16, 16), name="U")
    Z = _relu_of(conv2d_winograd_rows(X, U, tile_block=7))
    mod = lw.build(schedule([Z], "llvm"), [X, U, Z])
    lowered = mod.get_source("lowered")
    gemm = lowered[lowered.index("conv2d.wino_gemm.local = allocate"):]
    assert "select(" not in gemm.split("for ax1.inner")[0] and "extent" not in gemm.split("for ax1.inner")[0]
    for th, tw in ((1, 1), (3, 2)):
        x = np.random.default_rng(th + tw).standard_normal((1, C // 16, 2 * th, 14 * tw, 16)).astype(np.float32)
        out = np.zeros_like(x)
        mod(x, winograd.winograd_weight(weight, 16, 16), out)       # TH and TW bound from the shapes
        np.testing.assert_allclose(out, _direct(x, weight), rtol=1e-4, atol=1e-4)
    with pytest.raises(lw.ArgumentError, match="14"):
        mod(np.zeros((1, C // 16, 2, 15, 16), np.float32), winograd.winograd_weight(weight, 16, 16),
            np.zeros((1, C // 16, 2, 15, 16), np.float32))
