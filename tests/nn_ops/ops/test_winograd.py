"""Winograd F(2x2, 3x3) in the blocked layout (nn_ops/ops/winograd.py): against numpy, fused
epilogues, where choose_conv_layout picks it, and its errors."""
import dataclasses

import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops import winograd
from loopweave.target import host_target
from loopweave.target_info import CPU_CORES

from .test_conv2d import conv2d_ref
from .test_nchwc import _blocked, _plain, _shape


def _run(x, w, bias=None, pad=1, block=16, in_block=16, residual=None):
    n, c = x.shape[:2]
    oc = w.shape[0]
    u = winograd.winograd_weight(w, block, in_block)
    xb = _blocked(x, in_block)
    X, U = lw.placeholder(xb.shape, name="X"), lw.placeholder(u.shape, name="U")
    args, arrays = [X, U], [xb, u]
    B = None
    if bias is not None:
        B = lw.placeholder((oc,), name="b")
        args.append(B)
        arrays.append(bias)
    Y = winograd.conv2d_winograd_blocked(X, U, B, pad if isinstance(pad, tuple) else (pad,) * 4)
    if residual is not None:
        R = lw.placeholder(_shape(Y), name="R")
        Y = nn_ops.relu(nn_ops.add(Y, R))
        args.append(R)
        arrays.append(_blocked(residual, block))
    y = np.empty(_shape(Y), "float32")
    lw.build(nn_ops.schedule(Y), args + [Y])(*arrays, y)
    return _plain(y)


@pytest.fixture(params=["fused", "per stage"])
def form(request, monkeypatch):
    """Every default schedule: the stages computed per row of tiles, and each stage at root."""
    monkeypatch.setattr(winograd, "FUSED_ROWS_PER_THREAD", 10 ** 6 if request.param == "per stage" else 0)
    return request.param


@pytest.mark.parametrize("n,c,oc,size,pad,in_block", [
    (1, 16, 32, 8, 1, 16),
    (2, 32, 16, 6, 1, 16),       # batch 2, fewer output channels than input
    (1, 24, 16, 10, 1, 8),       # input channel block 8
    (1, 16, 16, 12, 2, 16),      # padding 2: a 14x14 output from a 12x12 input
    (1, 16, 32, 7, 1, 16),       # odd: the last row and column of tiles are half outside
    (2, 16, 16, 9, 0, 16),       # odd, no padding: a 7x7 output
    (1, 16, 16, 6, (1, 1, 2, 1), 16),  # uneven padding: 7 rows of 6 columns
])
def test_winograd_matches_numpy(n, c, oc, size, pad, in_block, form):
    rng = np.random.default_rng(c * oc + size)
    x = rng.standard_normal((n, c, size, size)).astype("float32")
    w = rng.standard_normal((oc, c, 3, 3)).astype("float32")
    pads = pad if isinstance(pad, tuple) else (pad,) * 4
    got = _run(x, w, pad=pads, in_block=in_block)
    ref = conv2d_ref(x, w, 1, pads, 1, 1)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_winograd_with_bias_and_fused_residual_relu(form):
    rng = np.random.default_rng(1)
    x = rng.standard_normal((1, 32, 8, 8)).astype("float32")
    w = rng.standard_normal((32, 32, 3, 3)).astype("float32")
    bias = rng.standard_normal(32).astype("float32")
    res = rng.standard_normal((1, 32, 8, 8)).astype("float32")
    got = _run(x, w, bias=bias, residual=res)
    ref = np.maximum(conv2d_ref(x, w, 1, (1, 1, 1, 1), 1, 1) + bias[None, :, None, None] + res, 0)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_the_fused_form_computes_the_transform_and_matmuls_inside_the_output_rows():
    """At 56x56 on 2 threads the default computes the input transform and the matmuls per row
    of tiles, inside the parallel output loop (not at root, where they round-trip 3 MB each)."""
    X = lw.placeholder((1, 4, 56, 56, 16), name="X")
    U = lw.placeholder((16, 4, 4, 16, 16), name="U")
    Y = winograd.conv2d_winograd_blocked(X, U)
    s = nn_ops.schedule(Y, dataclasses.replace(host_target(), num_threads=2))
    attach = {st.op.name: st.attach_type for st in s.stages}
    assert winograd.fuses_rows(1, 28, 2)                            # 56x56: whole rows
    assert not winograd.fuses_rows(1, 7, 2)                         # 14x14: per stage, each weight read once
    assert attach["conv2d.wino_in"] == "scope" and attach["conv2d.wino_gemm"] == "scope", attach


def test_an_odd_map_of_several_images_keeps_its_last_tile_row_apart():
    """Inception-v3's 35x35 convs at batch 2: the last row of tiles computes 12 of the 16 positions.
    With the images outside the parallel rows that row is split off with constant loops; fused with
    them, every row's position count was a run-time value and the layer took twice as long."""
    X = lw.placeholder((2, 2, 35, 35, 16), name="X")
    U = lw.placeholder((16, 2, 2, 16, 16), name="U")
    Y = winograd.conv2d_winograd_blocked(X, U)
    text = str(lw.lower(nn_ops.schedule(Y, dataclasses.replace(host_target(), num_threads=2)), [X, U, Y]))
    assert ".extent = select(" not in text and "for e in range(12)" in text, text[:3000]
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 32, 35, 35)).astype("float32")
    w = rng.standard_normal((32, 32, 3, 3)).astype("float32")
    got = _run(x, w)
    ref = conv2d_ref(x, w, 1, (1, 1, 1, 1), 1, 1)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_the_three_stages_agree_on_the_form_when_input_and_output_channels_differ():
    """DenseNet's 128 -> 32 channel 3x3 at 14x14 (2 threads): 7 rows of tiles are too few to share, so
    every stage runs at root, the input transform in parallel.  (The input transform
    once counted its own 8 input channel blocks, chose the fused form alone and was left
    unscheduled: DenseNet ran 1.25x slower.)"""
    X = lw.placeholder((1, 8, 14, 14, 16), name="X")
    U = lw.placeholder((16, 2, 8, 16, 16), name="U")
    Y = winograd.conv2d_winograd_blocked(X, U)
    s = nn_ops.schedule(Y, dataclasses.replace(host_target(), num_threads=2))
    text = str(lw.lower(s, [X, U, Y]))
    first_write = text.index("conv2d.wino_in[")
    loop = text.rindex("for ", 0, first_write)
    assert "# parallel" in text[text.rindex("for ", 0, loop - 1):first_write], text[:first_write]


def test_weight_transform_is_exact_for_a_delta_filter():
    """A centre tap of 1 is the identity convolution: Winograd must give the input back."""
    w = np.zeros((16, 16, 3, 3), "float32")
    w[np.arange(16), np.arange(16), 1, 1] = 1.0
    x = np.random.default_rng(2).standard_normal((1, 16, 6, 6)).astype("float32")
    np.testing.assert_allclose(_run(x, w), x, rtol=1e-6, atol=1e-6)


@pytest.mark.parametrize("kernel,stride,dilation,out_hw,expected", [
    ((3, 3), (1, 1), (1, 1), (56, 56), True),
    ((3, 3), (1, 1), (1, 1), (14, 14), True),
    ((3, 3), (1, 1), (1, 1), (7, 7), False),      # few tiles
    ((3, 3), (1, 1), (1, 1), (55, 55), True),     # odd: SqueezeNet's fire modules (1.32x there)
    ((3, 3), (1, 1), (1, 1), (13, 13), False),    # 1.04-1.08x slower in SqueezeNet's run (49 tiles)
    ((3, 3), (2, 2), (1, 1), (28, 28), False),
    ((3, 3), (1, 1), (2, 2), (28, 28), False),
    ((1, 1), (1, 1), (1, 1), (28, 28), False),
    ((3, 3), (1, 1), (1, 1), (12, 12), False),    # few tiles: the direct kernel
])
def test_winograd_pays(kernel, stride, dilation, out_hw, expected):
    assert winograd.winograd_pays(kernel, stride, dilation, out_hw, 64, 64, "llvm -mcpu=znver4") is expected


@pytest.mark.parametrize("cpu, bits, limit", [
    ("rocketlake", 512, 16 * 16),     # one 512-bit FMA per cycle, 512 KiB L2: lost at 28x28 and 56x56
    ("znver4", 512, 56 * 56),         # one (two 256-bit halves), 1 MiB: won to 56x56
    ("znver3", 256, 56 * 56),         # two 256-bit, 512 KiB: ResNet-18 1.39x with Winograd
    ("znver5", 512, 256 * 256),       # two 512-bit, 1 MiB: U-Net's 256x256 1.29x
    ("znver5", 256, 256 * 256),       # the same core running AVX2 code
])
def test_the_map_limit_from_the_facts_reproduces_the_measured_cpus(cpu, bits, limit):
    facts = CPU_CORES[cpu]
    assert winograd.winograd_map_limit(facts.fma_instructions(bits), facts.cache("L2")) == limit


@pytest.mark.parametrize("fma_per_cycle, l2, limit", [
    (1, 256 << 10, 16 * 16), (2, 256 << 10, 56 * 56), (1, 2 << 20, 56 * 56), (4, 2 << 20, 256 * 256),
    (None, 1 << 20, 56 * 56), (2, None, 56 * 56),       # facts not known: the middle limit
])
def test_a_cpu_nobody_measured_gets_a_limit_from_its_facts(fma_per_cycle, l2, limit):
    assert winograd.winograd_map_limit(fma_per_cycle, l2) == limit


@pytest.mark.parametrize("target, out_hw, expected", [
    ("llvm -mcpu=znver4", (56, 56), True), ("llvm -mcpu=znver4", (64, 64), False),
    ("llvm -mcpu=znver3", (28, 28), True), ("llvm -mcpu=haswell", (56, 56), True),
    ("znver5", (256, 256), True), ("znver5", (512, 512), False),
])
def test_winograd_pays_reads_the_targets_facts(target, out_hw, expected):
    """A target string or an LLVM CPU name (the table's facts where that CPU does not run here)."""
    assert winograd.winograd_pays((3, 3), (1, 1), (1, 1), out_hw, 64, 64, target) is expected


def test_errors_name_the_problem():
    U = lw.placeholder((16, 1, 1, 16, 16), name="U")
    X8 = lw.placeholder((1, 2, 8, 8, 8), name="X8")
    with pytest.raises(lw.ExprError, match="make it with winograd_weight"):
        winograd.conv2d_winograd_blocked(X8, U)
    with pytest.raises(lw.ExprError, match=r"\[OC, C, 3, 3\]"):
        winograd.winograd_weight(np.zeros((16, 16, 5, 5), "float32"), 16, 16)


@pytest.mark.parametrize("size, batch", [(14, 1), (15, 1), (34, 2)])
def test_network_layer_runs_as_winograd_and_matches_onnxruntime(size, batch):
    """At 14x14 and at an odd 15x15 (half-outside last tiles), both 3x3s run as Winograd; at 34x34
    (17 tiles a row: no register block divides it) in the rows form, two images."""
    pytest.importorskip("onnxruntime")
    from loopweave.nn_ops.network.passes import optimize
    from loopweave.nn_ops.testing.model_zoo import OnnxBuilder

    from ..network.test_network import _check_against_onnxruntime
    b = OnnxBuilder(seed=3)
    x = "input"
    h = b.conv(x, 16, 32, 3, pad=1)
    h = b.node("Relu", [h])
    h = b.conv(h, 32, 32, 3, pad=1)
    h = b.node("Add", [h, b.conv(x, 16, 32, 1)])
    model = b.model((batch, 16, size, size), b.node("Relu", [h]), (batch, 32, size, size))
    counts = optimize(lw.from_onnx(model)).op_counts()
    # the plain NCHW input is blocked once (to_blocked) for the first 3x3, then both 3x3s are
    # Winograd; the 1x1 shortcut reads that same blocked copy
    assert counts.get("to_blocked") == 1 and counts.get("conv2d_winograd_blocked") == 2 \
        and counts.get("conv2d_blocked") == 1, counts
    _check_against_onnxruntime(model, lw.compile(lw.from_onnx(model), progress=False))


@pytest.mark.parametrize("width, form", [(56, "conv2d_winograd"), (57, "conv2d_winograd_rows"),
                                         (34, "conv2d_winograd_rows"), (15, "conv2d_winograd")])
def test_rows_of_tiles_without_a_register_block_divisor_take_the_rows_form(width, form):
    """29 (or 17) tiles a row: the flat form's register block would be one tile (57x57 ran at 450
    GFLOPS, 860 at 56x56); the rows form takes blocks of 7 and a shorter last one."""
    from loopweave.nn_ops.network.op_table import OPS
    X = lw.placeholder((1, 4, width, width, 16), name="X")
    U = lw.placeholder((16, 4, 4, 16, 16), name="U")
    assert OPS["conv2d_winograd_blocked"].build([X, U], {"padding": (1, 1, 1, 1)}).op.tag == form
