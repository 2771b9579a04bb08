"""Winograd on maps of symbolic size (``ops/winograd_rows.py``): the same results as the direct blocked
convolution at every size, partial tiles and blocks of tiles included, their accumulators in registers."""
import re

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
    Z = _relu_of(conv2d_winograd_rows(X, U, tile_block=7, whole_blocks=True))
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


def _run_time_unrolled(lowered: str) -> list:
    """Lines of the lowered code that unroll a loop of run-time extent (a register block's loop
    that ``pad_tail_tiles`` did not pad: its accumulators would live in memory)."""
    return [line for line in lowered.splitlines()
            if "# unrolled" in line and not re.search(r"in range\((\d+, )?\d+\):", line) and ".c" in line]


def test_a_partial_last_block_of_tiles_keeps_its_accumulators_in_registers(weight):
    """A row of tiles that blocks of 7 do not divide: the last block is padded to 7 tiles (reads of
    the row's transformed input clamped to its last tile, only whole tiles stored), not a loop of
    run-time extent."""
    X = lw.placeholder((1, C // 16, lw.var("H"), lw.var("W"), 16), name="X")
    U = lw.placeholder((16, C // 16, C // 16, 16, 16), name="U")
    Z = _relu_of(conv2d_winograd_rows(X, U, tile_block=7))
    mod = lw.build(schedule([Z], "llvm"), [X, U, Z])
    assert _run_time_unrolled(mod.get_source("lowered")) == []
    for h, w in ((3, 3), (14, 14), (9, 31), (16, 30), (5, 58)):
        x = np.random.default_rng(h + w).standard_normal((1, C // 16, h, w, 16)).astype(np.float32)
        out = np.zeros_like(x)
        mod(x, winograd.winograd_weight(weight, 16, 16), out)
        np.testing.assert_allclose(out, _direct(x, weight), rtol=1e-4, atol=1e-4)


def test_many_output_channels_run_in_two_parts_with_the_same_results():
    """256 output channels (16 blocks, ``TWO_PARTS_FROM_BLOCKS``): each parallel iteration computes a
    pair of rows for half of them, transforming the row's input again."""
    from loopweave.nn_ops.ops.winograd_rows import TWO_PARTS_FROM_BLOCKS, _channel_parts
    assert _channel_parts(16, 2) == 2 and _channel_parts(4, 2) == 1 and TWO_PARTS_FROM_BLOCKS == 16
    rng = np.random.default_rng(3)
    weight = (rng.standard_normal((256, 16, 3, 3)) * 0.1).astype(np.float32)
    X = lw.placeholder((1, 1, lw.var("H"), lw.var("W"), 16), name="X")
    U = lw.placeholder((16, 16, 1, 16, 16), name="U")
    Z = conv2d_winograd_rows(X, U, tile_block=5)
    mod = lw.build(schedule([Z], "llvm"), [X, U, Z])
    Wd = lw.placeholder((16, 1, 3, 3, 16, 16), name="Wd")
    Xd = lw.placeholder((1, 1, lw.var("H"), lw.var("W"), 16), name="Xd")
    Zd = nchwc.conv2d_blocked(Xd, Wd, padding=(1, 1, 1, 1))
    direct = lw.build(schedule([Zd], "llvm"), [Xd, Wd, Zd])
    for h, w in ((6, 10), (7, 13)):
        x = rng.standard_normal((1, 1, h, w, 16)).astype(np.float32)
        out, ref = np.zeros((1, 16, h, w, 16), np.float32), np.zeros((1, 16, h, w, 16), np.float32)
        mod(x, winograd.winograd_weight(weight, 16, 16), out)
        direct(x, nchwc.pack_blocked_weight(weight, 16, 16), ref)
        np.testing.assert_allclose(out, ref, rtol=1e-4, atol=1e-4)


def test_rows_of_at_least_a_block_end_in_an_overlapping_whole_block(weight):
    """A width known to give at least 7 tiles a row (a size var + 13): the row's last block of 7
    starts at ``tiles - 7``, overlapping the one before, so the code has no guard and no partial
    block; odd widths and tile counts 7 doesn't divide come out right."""
    V = lw.var("V")
    X = lw.placeholder((1, C // 16, lw.var("H"), V + 13, 16), name="X")
    U = lw.placeholder((16, C // 16, C // 16, 16, 16), name="U")
    Z = _relu_of(conv2d_winograd_rows(X, U, tile_block=7))
    width = lw.placeholder((V,), name="width")          # binds V (the kernel reads no element)
    mod = lw.build(schedule([Z], "llvm"), [width, X, U, Z])
    lowered = mod.get_source("lowered")
    assert "if " not in lowered
    assert "min(V // 2, tx.outer * 7)" in lowered
    assert _run_time_unrolled(lowered) == []
    for h, w in ((3, 14), (9, 31), (16, 30), (5, 58), (7, 15), (2, 27)):
        x = np.random.default_rng(h + w).standard_normal((1, C // 16, h, w, 16)).astype(np.float32)
        out = np.zeros_like(x)
        mod(np.zeros(w - 13, np.float32), x, winograd.winograd_weight(weight, 16, 16), out)
        np.testing.assert_allclose(out, _direct(x, weight), rtol=1e-4, atol=1e-4)
