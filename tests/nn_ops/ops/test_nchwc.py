"""The blocked (NCHW[b]c) layout: its kernels against numpy, and the choose_conv_layout pass
(transforms only at the edges of the blocked region, values unchanged)."""
import re

import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops import elementwise as ew
from loopweave.nn_ops.ops import nchwc
from loopweave.nn_ops.ops.conv_unblocked import UNBLOCKED_MIN_REGISTERS

from .test_conv2d import conv2d_ref

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from loopweave.nn_ops.network.passes import fuse_operators, optimize  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder, mobilenet_v2, resnet18  # noqa: E402
from loopweave.target import resolve_target  # noqa: E402

# schedules, layouts and instructions follow the host CPU: .ci/run runs these again as an AVX2 host
pytestmark = pytest.mark.vector_width


def _blocked(x, b):
    n, c, h, w = x.shape
    return np.ascontiguousarray(x.reshape(n, c // b, b, h, w).transpose(0, 1, 3, 4, 2))


def _plain(y):
    n, cb, h, w, b = y.shape
    return y.transpose(0, 1, 4, 2, 3).reshape(n, cb * b, h, w)


def _shape(t):
    return tuple(int(d.value) for d in t.shape)


@pytest.mark.parametrize("c,oc,size,k,stride,pad,blocked_in,epilogue", [
    (32, 64, 14, 3, 1, 1, True, False),
    (32, 64, 14, 3, 1, 1, True, True),
    (3, 32, 23, 7, 2, 3, False, True),       # the first layer reads NCHW
    (64, 128, 28, 1, 2, 0, True, False),     # 1x1 stride 2 (a downsample)
    (24, 16, 9, 3, 1, 1, True, True),        # input block 8 (24 channels)
    (16, 64, 30, 1, 1, 0, True, True),       # short reduction, wide rows: 4 channel vectors a block
    (3, 64, 58, 3, 2, 1, False, False),      # a first layer on a wide map: 4 channel vectors, rows of 29
    (16, 96, 28, 1, 1, 0, True, True),       # 6 output blocks, short reduction: 3 channel vectors
])
def test_blocked_conv_matches_numpy(c, oc, size, k, stride, pad, blocked_in, epilogue):
    rng = np.random.default_rng(c + oc)
    x = rng.standard_normal((1, c, size, size)).astype("float32")
    w = rng.standard_normal((oc, c, k, k)).astype("float32")
    bias = rng.standard_normal(oc).astype("float32")
    in_block = 8 if c % 16 else 16
    cb = in_block if blocked_in else c
    wp = nchwc.pack_blocked_weight(w, 16, cb)
    xin = _blocked(x, in_block) if blocked_in else x
    X, W, B = lw.placeholder(xin.shape, name="X"), lw.placeholder(wp.shape, name="W"), lw.placeholder((oc,), name="b")
    Y = nchwc.conv2d_blocked(X, W, B, (stride, stride), (pad,) * 4)
    if epilogue:
        Y = ew.relu(Y)
    y = np.empty(_shape(Y), "float32")
    lw.build(nn_ops.schedule(Y), [X, W, B, Y])(xin, wp, bias, y)
    ref = conv2d_ref(x, w, stride=stride, padding=pad) + bias[None, :, None, None]
    np.testing.assert_allclose(_plain(y), np.maximum(ref, 0) if epilogue else ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("op", ["conv", "depthwise"])
def test_a_row_of_symbolic_width_keeps_its_last_partial_block_in_registers(op):
    """On a map of symbolic size (a shape-polymorphic network) the last block of a row (13 pixels:
    one of 8 and a partial one) runs the whole block with its reads clamped, not a loop of run-time
    extent with its accumulators in memory (2x slower at ResNet-18's 15 x 13 maps); a stride of 2
    gives that block's extent as a select, read through its LetStmt."""
    c, oc = 32, 64 if op == "conv" else 32
    rng = np.random.default_rng(7)
    w = (rng.standard_normal((oc, c if op == "conv" else 1, 3, 3)) * 0.1).astype("float32")
    wp = nchwc.pack_blocked_weight(w, 16, 16) if op == "conv" else nchwc.pack_depthwise_weight(w, 16)
    X = lw.placeholder((1, c // 16, lw.var("H"), lw.var("W"), 16), name="X")
    Wt = lw.placeholder(wp.shape, name="W")
    Y = nchwc.conv2d_blocked(X, Wt, None, (2, 2), (1,) * 4) if op == "conv" else \
        nchwc.depthwise_blocked(X, Wt, None, (2, 2), (1,) * 4)
    mod = lw.build(nn_ops.schedule(Y), [X, Wt, Y])
    lowered = mod.get_source("lowered")
    assert [line for line in lowered.splitlines() if "# unrolled" in line and ".c in range(" in line
            and not re.search(r"in range\((\d+, )?\d+\):", line)] == []
    for h, width in ((5, 25), (9, 9), (3, 2)):
        x = rng.standard_normal((1, c, h, width)).astype("float32")
        y = np.zeros((1, oc // 16, (h + 1) // 2, (width + 1) // 2, 16), "float32")
        mod(_blocked(x, 16), wp, y)
        ref = conv2d_ref(x, w, stride=2, padding=1, groups=1 if op == "conv" else c)
        np.testing.assert_allclose(_plain(y), ref, rtol=1e-4, atol=1e-4)


def test_short_reductions_on_wide_maps_take_four_channel_vectors_a_block():
    def vectors(c, oc, size, k):
        X = lw.placeholder((1, c // 16, size, size, 16), name="X")
        W = lw.placeholder((oc // 16, c // 16, k, k, 16, 16), name="W")
        return nchwc._channel_vectors(nchwc.conv2d_blocked(X, W, padding=(k // 2,) * 4).op, oc // 16, size)
    assert vectors(16, 64, 55, 1) == 4 and vectors(32, 128, 27, 1) == 4
    assert vectors(64, 64, 56, 3) == 2 and vectors(16, 64, 13, 1) == 2 and vectors(16, 32, 55, 1) == 2
    assert vectors(16, 96, 112, 1) == 3 and vectors(128, 48, 56, 1) == 3 and vectors(128, 96, 56, 1) == 2


@pytest.mark.parametrize("c,size,stride,epilogue", [(32, 14, 1, False), (32, 15, 2, True), (16, 7, 1, True),
                                                     (24, 9, 1, False)])
def test_blocked_depthwise_matches_numpy(c, size, stride, epilogue):
    rng = np.random.default_rng(size)
    b = 8 if c % 16 else 16
    x = rng.standard_normal((1, c, size, size)).astype("float32")
    w = rng.standard_normal((c, 1, 3, 3)).astype("float32")
    wd = nchwc.pack_depthwise_weight(w, b)
    X, W = lw.placeholder(_blocked(x, b).shape, name="X"), lw.placeholder(wd.shape, name="W")
    Y = nchwc.depthwise_blocked(X, W, None, (stride, stride), (1, 1, 1, 1))
    if epilogue:
        Y = ew.clip(Y, 0.0, 6.0)
    y = np.empty(_shape(Y), "float32")
    lw.build(nn_ops.schedule(Y), [X, W, Y])(_blocked(x, b), wd, y)
    ref = conv2d_ref(x, w, stride=stride, padding=1, groups=c)
    np.testing.assert_allclose(_plain(y), np.clip(ref, 0, 6) if epilogue else ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("many", [True, False])
def test_a_symbolic_depthwise_runs_each_planes_rows_in_order_where_blocks_suffice(many):
    """On a map of symbolic size a depthwise conv with enough channel blocks for the threads runs
    (image, block) planes in parallel, each plane's rows in order inside; with few blocks (row,
    block) pairs stay the parallel loop.  Both match numpy at odd sizes and at a batch of 2."""
    from loopweave.nn_ops.ops.registry import PLANES_PER_THREAD
    lanes = resolve_target("llvm").lanes("float32")
    blocks = PLANES_PER_THREAD * max(1, resolve_target("llvm").num_threads) if many else 2
    c = blocks * lanes
    rng = np.random.default_rng(blocks)
    w = rng.standard_normal((c, 1, 3, 3)).astype("float32")
    wd = nchwc.pack_depthwise_weight(w, lanes)
    X = lw.placeholder((lw.var("N"), blocks, lw.var("H"), lw.var("W"), lanes), name="X")
    W = lw.placeholder(wd.shape, name="W")
    Y = ew.clip(nchwc.depthwise_blocked(X, W, None, (1, 1), (1, 1, 1, 1)), 0.0, 6.0)
    mod = lw.build(nn_ops.schedule(Y), [X, W, Y])
    parallel = [line.strip() for line in mod.get_source("lowered").splitlines() if "# parallel" in line]
    assert parallel == [f"for ax0.ax1.fused in range(N * {blocks}):  # parallel" if many else
                        f"for ax2.ax1.fused in range(H * {blocks}):  # parallel"]
    for n, h, width in ((1, 5, 9), (2, 3, 13)):
        x = rng.standard_normal((n, c, h, width)).astype("float32")
        y = np.empty((n, blocks, h, width, lanes), "float32")
        mod(_blocked(x, lanes), wd, y)
        ref = np.clip(conv2d_ref(x, w, stride=1, padding=1, groups=c), 0, 6)
        np.testing.assert_allclose(_plain(y), ref, rtol=1e-4, atol=1e-4)


def test_a_symbolic_blocked_pool_runs_each_planes_rows_in_order_where_blocks_suffice():
    """A max pool of symbolic size with enough channel blocks for the threads: (image, block) planes
    in parallel, the rows inside each; it matches numpy at odd sizes and a batch of 2."""
    from loopweave.nn_ops.ops.registry import PLANES_PER_THREAD
    lanes = resolve_target("llvm").lanes("float32")
    blocks = PLANES_PER_THREAD * max(1, resolve_target("llvm").num_threads)
    X = lw.placeholder((lw.var("N"), blocks, lw.var("H"), lw.var("W"), lanes), name="X")
    Y = nchwc.pool2d_blocked(X, (3, 3), (2, 2), (1, 1, 1, 1), pool_type="max")
    mod = lw.build(nn_ops.schedule(Y), [X, Y])
    parallel = [line.strip() for line in mod.get_source("lowered").splitlines() if "# parallel" in line]
    assert parallel == [f"for nn.cb.fused in range(N * {blocks}):  # parallel"]
    rng = np.random.default_rng(3)
    for n, h, w in ((1, 9, 7), (2, 6, 11)):
        x = rng.standard_normal((n, blocks * lanes, h, w)).astype("float32")
        y = np.empty((n, blocks, (h - 1) // 2 + 1, (w - 1) // 2 + 1, lanes), "float32")
        mod(_blocked(x, lanes), y)
        xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
        ref = np.max([xp[:, :, i:i + h:2, j:j + w:2] for i in range(3) for j in range(3)], axis=0)
        np.testing.assert_allclose(_plain(y), ref)


def test_blocked_pools_match_numpy():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 32, 9, 9)).astype("float32")
    X = lw.placeholder(_blocked(x, 16).shape, name="X")
    Y = nchwc.pool2d_blocked(X, (3, 3), (2, 2), (1, 1, 1, 1), pool_type="max")
    y = np.empty(_shape(Y), "float32")
    lw.build(nn_ops.schedule(Y), [X, Y])(_blocked(x, 16), y)
    xp = np.pad(x, ((0, 0), (0, 0), (1, 1), (1, 1)), constant_values=-np.inf)
    ref = np.max([xp[:, :, i:i + 9:2, j:j + 9:2] for i in range(3) for j in range(3)], axis=0)
    np.testing.assert_allclose(_plain(y), ref)
    G = nchwc.global_avg_pool_blocked(X)
    g = np.empty(_shape(G), "float32")
    lw.build(nn_ops.schedule(G), [X, G])(_blocked(x, 16), g)
    np.testing.assert_allclose(_plain(g)[:, :, 0, 0], x.mean((2, 3)), rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("kernel,stride,pad,ceil_mode,include_pad", [
    (3, 1, 1, False, False),     # Inception's branch pool: edge windows divide by their taps inside
    (3, 2, 1, True, False),      # a last window past the padding (ceil mode)
    (3, 2, 1, True, True),       # ... counting the padding, but not beyond it
    (2, 2, 0, False, False),     # no padding: every window whole
])
def test_blocked_average_pools_match_onnxruntime(kernel, stride, pad, ceil_mode, include_pad):
    """Average pools of every padding rule stay blocked; each window divides by what ONNX says."""
    b = OnnxBuilder(0)
    y = b.node("AveragePool", ["input"], kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=[pad] * 4,
               ceil_mode=int(ceil_mode), count_include_pad=int(include_pad))
    out_size = -(-(10 + 2 * pad - kernel) // stride) + 1 if ceil_mode else (10 + 2 * pad - kernel) // stride + 1
    model = b.model((1, 32, 10, 10), y, (1, 32, out_size, out_size))
    x = np.random.default_rng(1).standard_normal((1, 32, 10, 10)).astype("float32")
    X = lw.placeholder(_blocked(x, 16).shape, name="X")
    Y = nchwc.pool2d_blocked(X, (kernel,) * 2, (stride,) * 2, (pad,) * 4, pool_type="avg", ceil_mode=ceil_mode,
                             count_include_pad=include_pad)
    got = np.empty(_shape(Y), "float32")
    lw.build(nn_ops.schedule(Y), [X, Y])(_blocked(x, 16), got)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(_plain(got), want, rtol=1e-5, atol=1e-6)


def test_a_7x7_map_streams_each_weight_once_for_all_rows():
    """ResNet-18's last stage (here 256 -> 256 channels at 7x7, 2 threads): the accumulators of the
    whole map per channel-block pair, the reduction outermost, so each weight vector is loaded once
    (row by row, the first row fetched the pair's weights from memory in a burst)."""
    import dataclasses
    from loopweave.target import host_target
    lanes = host_target().lanes("float32")
    rng = np.random.default_rng(3)
    x = rng.standard_normal((1, 256, 7, 7)).astype("float32")
    w = (rng.standard_normal((256, 256, 3, 3)) * 0.05).astype("float32")
    wp = nchwc.pack_blocked_weight(w, lanes, lanes)
    X, W = lw.placeholder(_blocked(x, lanes).shape, name="X"), lw.placeholder(wp.shape, name="W")
    Y = ew.relu(nchwc.conv2d_blocked(X, W, None, (1, 1), (1,) * 4))
    f = lw.build(nn_ops.schedule(Y, dataclasses.replace(host_target(), num_threads=2)), [X, W, Y])
    lowered = f.get_source("lowered")
    reduction, rows = lowered.index(f"for rco in range({256 // lanes})"), lowered.index("for yy in range(7)")
    assert reduction < rows, lowered[:3000]
    y = np.empty(_shape(Y), "float32")
    f(_blocked(x, lanes), wp, y)
    np.testing.assert_allclose(_plain(y), np.maximum(conv2d_ref(x, w, padding=1), 0), rtol=1e-4, atol=1e-4)


def test_resnet18_is_blocked_end_to_end():
    from loopweave.nn_ops.ops.winograd import winograd_largest_map
    g = optimize(lw.from_onnx(resnet18()))
    counts = g.op_counts()
    # the 3x3 stride-1 convs at 56x56 (4), 28x28 (3) and 14x14 (3) run as Winograd F(2x2, 3x3) up to
    # the host's largest map (winograd_pays), the rest direct
    wino = sum(n for side, n in ((56, 4), (28, 3), (14, 3)) if side * side <= winograd_largest_map())
    assert counts.get("conv2d_winograd_blocked") == wino and counts.get("conv2d_blocked") == 20 - wino
    assert "conv2d" not in counts
    assert counts.get("from_blocked") == 1 and "to_blocked" not in counts     # one transform, after the pool


def test_mobilenet_v2_pads_24_channels_to_whole_vectors_and_stays_blocked():
    """Its 24-channel values (read by convs and residual adds) run in whole vectors: on a 16-lane CPU
    two blocks of 16, the last 8 channels padding; on an 8-lane one three blocks of 8."""
    lanes = lw.target.host_target().lanes("float32")
    g = optimize(lw.from_onnx(mobilenet_v2()))
    counts = g.op_counts()
    assert counts.get("depthwise_blocked") == 17 and counts.get("from_blocked") == 1
    blocked = [v.shape for v in g.values.values() if len(v.shape) == 5]
    assert {shape[-1] for shape in blocked} == {lanes}
    assert (1, -(-24 // lanes), 56, 56, lanes) in blocked


def test_plain_consumers_get_one_transform_and_values_match():
    """A blocked conv output read by a blocked conv and by two NCHW-only ops: one from_blocked."""
    b = OnnxBuilder()
    y = b.relu(b.conv("input", 3, 16, 3))
    z = b.conv(y, 16, 16, 3)
    t1 = b.node("Transpose", [y], perm=[0, 1, 3, 2])
    t2 = b.node("ReduceMean", [y], axes=[2], keepdims=1)
    out = b.node("Add", [b.node("Add", [z, t1]), t2])
    model = b.model((1, 3, 8, 8), out, (1, 16, 8, 8))
    g = optimize(lw.from_onnx(model))
    assert g.op_counts().get("from_blocked") == 2          # y for the transpose/mean, z for the add with them
    exe = lw.compile(lw.from_onnx(model), progress=False)
    x = np.random.default_rng(0).standard_normal((1, 3, 8, 8)).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want[0], rtol=1e-4, atol=1e-4)


def _classifier_head(c_out: int, then_conv: bool = False):
    """conv 32 -> 32 (blocked), conv 32 -> c_out, ReLU, global average pool: SqueezeNet's head; with
    ``then_conv``, a 1x1 conv c_out -> 16 between the ReLU and the pool."""
    b = OnnxBuilder()
    y = b.relu(b.conv(b.relu(b.conv("input", 32, 32, 3)), 32, c_out, 1, bias=True))
    out = b.node("GlobalAveragePool", [y])
    if then_conv:
        out = b.node("GlobalAveragePool", [b.conv(y, c_out, 16, 1)])
    return b.model((1, 32, 9, 9), out, (1, 16 if then_conv else c_out, 1, 1))


def test_a_conv_whose_channels_leave_a_partial_vector_is_padded_to_whole_vectors():
    """1000 channels in blocks of 16 (63, the last 8 channels of zero weights and bias) where only
    channel-local ops (ReLU, the global pool) read them; the from_blocked after the pool drops the
    padding.  On a 16-lane CPU the 8-wide blocks ran SqueezeNet's classifier conv 1.6x slower."""
    from loopweave.nn_ops.network.passes import choose_conv_layout
    g = choose_conv_layout(lw.from_onnx(_classifier_head(40)), lanes=16)
    shapes = {n.op_type: g.shape(n.outputs[0]) for n in g.nodes}
    assert shapes["conv2d_blocked"] == (1, 3, 9, 9, 16) and shapes["global_avg_pool_blocked"] == (1, 3, 1, 1, 16)
    (unblock,) = [n for n in g.nodes if n.op_type == "from_blocked"]
    assert unblock.attrs == {"channels": 40} and g.shape(unblock.outputs[0]) == (1, 40, 1, 1)
    weight = [g.initializers[n.inputs[1]] for n in g.nodes if n.op_type == "conv2d_blocked"][-1]
    assert weight.shape[0] == 3 and not weight[2, ..., 8:].any()     # output channels 40-47: zeros
    _check_against_onnxruntime(_classifier_head(40), (1, 32, 9, 9))


def test_padding_a_conv_reads_meets_zero_input_weights():
    from loopweave.nn_ops.network.passes import choose_conv_layout
    g = choose_conv_layout(lw.from_onnx(_classifier_head(40, then_conv=True)), lanes=16)
    convs = [n for n in g.nodes if n.op_type == "conv2d_blocked"]
    assert [g.shape(n.outputs[0]) for n in convs] == [(1, 2, 9, 9, 16), (1, 3, 9, 9, 16), (1, 1, 9, 9, 16)]
    weight = g.initializers[convs[-1].inputs[1]]        # [OC/16, C/16, 1, 1, 16 in, 16 out], C padded to 48
    assert weight.shape[1] == 3 and not weight[:, 2, :, :, 8:, :].any()
    _check_against_onnxruntime(_classifier_head(40, then_conv=True), (1, 32, 9, 9))


def test_padding_flows_through_an_op_whose_first_operand_is_a_scalar():
    """1 - y keeps y's padding (finite), and the conv after it reads it through zero weights."""
    from loopweave.nn_ops.network.passes import choose_conv_layout
    b = OnnxBuilder()
    y = b.conv(b.relu(b.conv("input", 32, 32, 3)), 32, 40, 1, bias=True)
    flipped = b.node("Sub", [b.init("one", np.ones((), np.float32)), y])
    out = b.node("GlobalAveragePool", [b.conv(flipped, 40, 16, 1)])
    model = b.model((1, 32, 9, 9), out, (1, 16, 1, 1))
    g = choose_conv_layout(lw.from_onnx(model), lanes=16)
    (sub,) = [n for n in g.nodes if n.op_type == "sub"]
    assert g.shape(sub.outputs[0]) == (1, 3, 9, 9, 16)
    _check_against_onnxruntime(model, (1, 32, 9, 9))


@pytest.mark.parametrize("reader", ["Concat", "Div"])
def test_padding_that_would_be_read_as_data_is_not_made(reader):
    """A concat would take padding channels for data; a division can make them inf (0/0) and a later
    conv's zero weights would not cancel that: the 40 channels keep blocks of 8."""
    from loopweave.nn_ops.network.passes import choose_conv_layout
    b = OnnxBuilder()
    x = b.relu(b.conv("input", 32, 32, 3))
    y, z = b.conv(x, 32, 40, 1, bias=True), b.conv(x, 32, 40, 1, bias=True)
    if reader == "Concat":
        joined = b.node("Concat", [y, z], axis=1)
    else:                               # y / (1 + sigmoid(z)): well conditioned for the comparison
        one = b.init("one", np.ones((), np.float32))
        joined = b.node("Div", [y, b.node("Add", [b.node("Sigmoid", [z]), one])])
    out = b.node("GlobalAveragePool", [joined])
    model = b.model((1, 32, 9, 9), out, (1, 80 if reader == "Concat" else 40, 1, 1))
    g = choose_conv_layout(lw.from_onnx(model), lanes=16)
    assert [g.shape(n.outputs[0])[-1] for n in g.nodes if n.op_type == "conv2d_blocked"][1:] == [8, 8]
    _check_against_onnxruntime(model, (1, 32, 9, 9))


def test_from_blocked_refuses_a_channel_count_its_blocks_do_not_hold():
    X = lw.placeholder((1, 3, 4, 4, 16), name="X")
    assert nchwc.from_blocked(X, 40).shape[1].value == 40
    for bad in (32, 49):
        with pytest.raises(lw.ExprError, match="from_blocked"):
            nchwc.from_blocked(X, bad)


def _check_against_onnxruntime(model, shape):
    exe = lw.compile(lw.from_onnx(model), progress=False)
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want[0], rtol=1e-4, atol=1e-4)


def test_depthwise_on_a_plain_value_that_feeds_a_conv_gets_one_to_blocked():
    b = OnnxBuilder()
    y = b.node("Relu", ["input"])                         # not a conv: stays NCHW
    z = b.conv(b.relu6(b.conv(y, 16, 16, 3, groups=16)), 16, 32, 1)
    model = b.model((1, 16, 10, 10), z, (1, 32, 10, 10))
    g = optimize(lw.from_onnx(model))
    assert g.op_counts().get("to_blocked") == 1 and g.op_counts().get("depthwise_blocked") == 1
    kernels = [tuple(n.op_type for n in grp.nodes) for grp in fuse_operators(g) if grp.kind != "alias"]
    if resolve_target("llvm").vector_registers >= UNBLOCKED_MIN_REGISTERS:
        assert ("conv2d_blocked", "from_blocked") in kernels      # the conv stores NCHW rows (conv_unblocked)
    else:                                                          # AVX2 code: the two kernels apart
        assert ("conv2d_blocked",) in kernels and ("from_blocked",) in kernels
    _check_against_onnxruntime(model, (1, 16, 10, 10))


@pytest.mark.parametrize("hw, stride, blocked", [(10, 1, False), (14, 2, True), (7, 1, True)])
def test_a_lone_depthwise_on_a_plain_value_stays_nchw_unless_its_rows_are_narrow(hw, stride, blocked):
    """Blocked, it pays a to_blocked and a from_blocked around one cheap kernel; worth it where its
    output rows are under 8 pixels (NCHW computes them in a vector of 4 and one of 3)."""
    b = OnnxBuilder()
    z = b.relu6(b.conv("input", 16, 16, 3, stride=stride, groups=16, bias=True))
    out = (hw - 1) // stride + 1
    model = b.model((1, 16, hw, hw), z, (1, 16, out, out))
    counts = optimize(lw.from_onnx(model)).op_counts()
    assert ("depthwise_blocked" in counts) == blocked and ("to_blocked" in counts) == blocked \
        and ("from_blocked" in counts) == blocked, counts
    _check_against_onnxruntime(model, (1, 16, hw, hw))


def test_a_lone_conv_on_a_plain_value_stays_nchw_and_one_that_reaches_a_conv_is_blocked():
    b = OnnxBuilder()
    z = b.relu(b.conv("input", 16, 32, 1, bias=True))
    model = b.model((1, 16, 12, 12), z, (1, 32, 12, 12))
    counts = optimize(lw.from_onnx(model)).op_counts()
    assert "conv2d_blocked" not in counts and "from_blocked" not in counts, counts
    _check_against_onnxruntime(model, (1, 16, 12, 12))
    b = OnnxBuilder()
    pooled = b.node("MaxPool", [b.relu(b.conv("input", 16, 32, 3))], kernel_shape=[2, 2], strides=[2, 2])
    z = b.conv(pooled, 32, 32, 1)
    model = b.model((1, 16, 12, 12), z, (1, 32, 6, 6))
    assert optimize(lw.from_onnx(model)).op_counts().get("conv2d_blocked") == 2   # through the pool
    _check_against_onnxruntime(model, (1, 16, 12, 12))


def test_a_lone_3x3_conv_on_a_plain_value_is_blocked_after_one_to_blocked():
    """A 3x3 conv's work dwarfs the two transforms (ResNet-18's 64->64 at 56x56 alone: 0.49 ms in
    NCHW, 0.29 ms blocked with both); its NCHW input of whole vectors is blocked once, not read as
    it lies (a plain-input conv cannot take the Winograd form), while a 3-channel image is read as
    it lies."""
    from loopweave.nn_ops.network.passes.choose_conv_layout import TO_BLOCKED_MIN_CHANNELS
    lanes = resolve_target("llvm").lanes("float32")
    c = -(-TO_BLOCKED_MIN_CHANNELS // lanes) * lanes      # whole vectors, enough to be worth blocking
    b = OnnxBuilder()
    z = b.relu(b.conv("input", c, 32, 3, bias=True))
    model = b.model((1, c, 12, 12), z, (1, 32, 12, 12))
    counts = optimize(lw.from_onnx(model)).op_counts()
    assert counts.get("to_blocked") == 1 and counts.get("from_blocked") == 1 and "conv2d" not in counts, counts
    _check_against_onnxruntime(model, (1, c, 12, 12))
    b = OnnxBuilder()
    model = b.model((1, 3, 12, 12), b.relu(b.conv("input", 3, 32, 3, bias=True)), (1, 32, 12, 12))
    counts = optimize(lw.from_onnx(model)).op_counts()
    assert "to_blocked" not in counts and counts.get("conv2d_blocked") == 1, counts
    _check_against_onnxruntime(model, (1, 3, 12, 12))


@pytest.mark.parametrize("c,oc,size,stride,clip,dw_bias,residual", [
    (32, 16, 16, 1, True, True, False),      # MobileNetV2's first block
    (48, 24, 15, 2, True, True, False),      # stride-2 depthwise, 24 outputs in blocks of 8
    (32, 32, 14, 1, False, False, True),     # no elementwise stage between: a cache_write accumulator
    (24, 16, 9, 1, True, False, True),       # input blocks of 8, a residual add epilogue
])
def test_depthwise_fused_into_the_pointwise_conv_matches_numpy(c, oc, size, stride, clip, dw_bias, residual):
    """depthwise (+ bias, clip) -> 1x1 conv (+ bias, + residual) in one kernel: the depthwise rows
    are computed inside the 1x1 convolution's rows, no depthwise result goes through memory."""
    rng = np.random.default_rng(c + size)
    b_in, b_out = (8 if c % 16 else 16), (8 if oc % 16 else 16)
    x = rng.standard_normal((1, c, size, size)).astype("float32")
    wd = rng.standard_normal((c, 1, 3, 3)).astype("float32")
    bd = rng.standard_normal(c).astype("float32")
    wp = rng.standard_normal((oc, c, 1, 1)).astype("float32")
    bp = rng.standard_normal(oc).astype("float32")
    X = lw.placeholder(_blocked(x, b_in).shape, name="X")
    Wd = lw.placeholder((c // b_in, 3, 3, b_in), name="Wd")
    Bd, Bp = lw.placeholder((c,), name="bd"), lw.placeholder((oc,), name="bp")
    Wp = lw.placeholder((oc // b_out, c // b_in, 1, 1, b_in, b_out), name="Wp")
    D = nchwc.depthwise_blocked(X, Wd, Bd if dw_bias else None, (stride, stride), (1, 1, 1, 1))
    if clip:
        D = ew.clip(D, 0.0, 6.0)
    Y = nchwc.conv2d_blocked(D, Wp, Bp)
    oh = _shape(Y)[2]
    r = rng.standard_normal((1, oc, oh, oh)).astype("float32")
    R = lw.placeholder(_blocked(r, b_out).shape, name="R")
    if residual:
        Y = ew.add(Y, R)
    s = nn_ops.schedule(Y)
    assert s[D.op].attach_type == "scope"        # computed inside the convolution's rows
    y = np.empty(_shape(Y), "float32")
    lw.build(s, [X, Wd, Bd, Wp, Bp, R, Y])(_blocked(x, b_in), nchwc.pack_depthwise_weight(wd, b_in), bd,
                                           nchwc.pack_blocked_weight(wp, b_out, b_in), bp, _blocked(r, b_out), y)
    d = conv2d_ref(x, wd, stride=stride, padding=1, groups=c) + (bd[None, :, None, None] if dw_bias else 0)
    if clip:
        d = np.clip(d, 0, 6)
    ref = conv2d_ref(d, wp) + bp[None, :, None, None] + (r if residual else 0)
    np.testing.assert_allclose(_plain(y), ref, rtol=1e-4, atol=1e-4)


def test_mobilenet_v2_fuses_depthwise_with_projection_where_rows_allow():
    g = optimize(lw.from_onnx(mobilenet_v2()))
    kernels = [grp for grp in fuse_operators(g) if grp.kind != "alias"]
    fused = [grp for grp in kernels if [n.op_type for n in grp.nodes][:3] ==
             ["depthwise_blocked", "clip", "conv2d_blocked"]]
    # every block but the four on 7x7 maps (too few rows to share between threads)
    assert len(fused) == 13
    assert all(g.shape(grp.output)[2] >= 14 for grp in fused)
    alone = [grp for grp in kernels if grp.nodes[0].op_type == "depthwise_blocked" and grp not in fused]
    assert len(alone) == 4 and all(g.shape(grp.output)[2] == 7 for grp in alone)


def test_depthwise_read_by_another_stage_too_stays_at_root():
    """A depthwise result that a second output also reads is computed whole, not row by row."""
    X = lw.placeholder((1, 2, 10, 10, 16), name="X")
    D = nchwc.depthwise_blocked(X, lw.placeholder((2, 3, 3, 16), name="Wd"), None, (1, 1), (1, 1, 1, 1))
    Y = nchwc.conv2d_blocked(D, lw.placeholder((1, 2, 1, 1, 16, 16), name="Wp"))
    s = nn_ops.schedule([Y, ew.relu(D)])
    assert nchwc.fused_depthwise(s, Y.op) is None and s[D.op].attach_type == "root"


@pytest.mark.parametrize("epilogue,height,width", [
    (False, 5, 7), (True, 5, 7), (False, 5, 14), (True, 5, 70), (False, 2, 32), (True, 3, 16), (False, 5, 3),
    (False, 1, 7), (True, 2, 3)])
def test_from_blocked_reads_whole_blocks_in_order(epilogue, height, width, x86_level):
    """NCHW[L]c -> NCHW (L the vector width) runs tiles of L pixels with the block's channels
    outside them: no division of a flat index per element (it was 287 us at 576x14x14 on 16 lanes).
    Each channel's pixels are one vector, read as rows of channels transposed in registers (no
    gathers): tiles of a row where rows split into whole tiles (or the plane is a row), else tiles
    of the plane (its rows fused: a 7-wide row took two tiles of 4); a plane of fewer than L pixels
    in rows, both loops unrolled."""
    from loopweave.nn_ops.ops.nchwc import from_blocked
    lanes = x86_level.lanes("float32")
    how = "rows" if height == 1 or width % lanes == 0 else "plane" if height * width >= lanes else "unrolled"
    X = lw.placeholder((1, 3, height, width, lanes), name="X")
    Y = from_blocked(X)
    if epilogue:
        Y = lw.compute(Y.shape, lambda n, c, y, x: Y[n, c, y, x] * 2.0, name="scaled", tag="elemwise")
    s = nn_ops.schedule(Y, x86_level)
    code = str(s.trace)
    if how == "plane":
        shifted = f"split(y_x_fused, factor={lanes}, tail='shift')"
        assert (shifted in code) == bool(height * width % lanes) and ".fuse(y, x)" in code \
            and "c_outer, y_x_fused_outer, c_inner, y_x_fused_inner)" in code \
            and ".vectorize(y_x_fused_inner)" in code and ".pragma(c_inner, 'transpose'" in code, code
    elif how == "rows":
        assert "fuse(y, x)" not in code and ".vectorize(x_inner)" in code, code
        assert ".pragma(c_inner, 'transpose'" in code, code
    else:
        assert ".unroll(c_inner)" in code and "transpose" not in code, code
    f = lw.build(s, [X, Y], target=x86_level)
    if how != "unrolled":
        assert "masked.gather" not in f.get_source("ll")
    if x86_level.runs_here():
        x = np.random.rand(1, 3, height, width, lanes).astype("float32")
        out = np.empty((1, 3 * lanes, height, width), "float32")
        f(x, out)
        want = x.transpose(0, 1, 4, 2, 3).reshape(1, 3 * lanes, height, width) * (2 if epilogue else 1)
        np.testing.assert_array_equal(out, want)


def test_from_blocked_of_symbolic_width_transposes_tiles_and_masks_the_last(x86_level):
    """A shape-polymorphic network's last layout transform: rows of run-time width in tiles of L
    pixels transposed in registers, the last one a masked vector (it was one pixel at a time, its
    16 channels stored one by one: 34 against 11 us static at 64x56x56 on 16 lanes; now 22-27)."""
    from loopweave.nn_ops.ops.nchwc import from_blocked
    lanes = x86_level.lanes("float32")
    X = lw.placeholder((1, 3, lw.var("H"), lw.var("W"), lanes), name="X")
    Y = from_blocked(X)
    s = nn_ops.schedule(Y, x86_level)
    code = str(s.trace)
    assert f"split(x, factor={lanes})" in code and ".pragma(c_inner, 'transpose'" in code \
        and ".pragma(x_outer, 'pad_tails'" in code, code
    f = lw.build(s, [X, Y], target=x86_level)
    if not x86_level.runs_here():
        return
    for h, width in ((2, 5), (3, 16), (2, 37)):
        x = np.random.rand(1, 3, h, width, lanes).astype("float32")
        out = np.full((1, 3 * lanes, h, width), np.nan, "float32")
        f(x, out)
        np.testing.assert_array_equal(out, x.transpose(0, 1, 4, 2, 3).reshape(1, 3 * lanes, h, width))


@pytest.mark.parametrize("height,width", [(3, 16), (3, 21), (3, 9), (2, 7), (1, 9), (2, 3)])
def test_to_blocked_transposes_tiles_of_pixels(height, width, x86_level):
    """NCHW -> NCHW[L]c: tiles of L pixels x L channels, read as L rows of pixels and transposed
    in registers (no gathers): tiles of a row where rows split into whole tiles, else tiles of the
    plane, its rows fused (a 14-wide row took two SLP tiles of 8 on 16 lanes: 576 channels at 14x14
    18 -> 9 us); a plane of fewer than L pixels keeps SLP's tiles."""
    from loopweave.nn_ops.ops.nchwc import to_blocked
    lanes = x86_level.lanes("float32")
    how = "rows" if width % lanes == 0 else "plane" if height * width >= lanes else "slp"
    X = lw.placeholder((1, 2 * lanes, height, width), name="X")
    Y = to_blocked(X, lanes)
    s = nn_ops.schedule(Y, x86_level)
    code = str(s.trace)
    assert ("pragma(x_inner, 'transpose'" in code) == (how == "rows"), code
    assert ("pragma(y_x_fused_inner, 'transpose'" in code) == (how == "plane"), code
    f = lw.build(s, [X, Y], target=x86_level)
    if how != "slp":
        assert "masked.gather" not in f.get_source("ll")
    if x86_level.runs_here():
        x = np.random.rand(1, 2 * lanes, height, width).astype("float32")
        out = np.empty((1, 2, height, width, lanes), "float32")
        f(x, out)
        np.testing.assert_array_equal(out, x.reshape(1, 2, lanes, height, width).transpose(0, 1, 3, 4, 2))


def test_a_register_block_fits_the_vector_registers(x86_level):
    """Accumulators (channel vectors x pixels), the weight vectors and one broadcast input fit the
    target's registers (32 with AVX-512, 16 with AVX2): ResNet-18's stem (4 channel vectors on
    112-pixel rows) took blocks of 7 pixels, spilled, and ran 1.19x slower than blocks of 4; with
    16 registers it takes 2 vectors (4 would leave blocks of 2) of 6 pixels, the last block shifted
    (2 x 4, its divisor, has no latency to spare: ``static_row_block``)."""
    from loopweave.nn_ops.ops.conv2d import pixels_per_block
    registers = x86_level.vector_registers
    assert registers == (32 if x86_level.lanes("float32") == 16 else 16)
    for nv in (1, 2, 3, 4):
        assert nv * pixels_per_block(nv, registers) + nv + 1 <= registers
    b = OnnxBuilder()
    model = b.model((1, 3, 224, 224), b.relu(b.conv("input", 3, 64, 7, stride=2, pad=3)), (1, 64, 112, 112))
    (task,) = [t for t in lw.extract_tasks(lw.from_onnx(model), x86_level) if t.name.startswith("conv2d_blocked")]
    trace = str(task.default_schedule().trace)
    # a lone conv: its from_blocked's channels split by the block's, the row of the epilogue stage in
    # blocks (``conv_unblocked``)
    vectors, pixels = (4, "4") if registers == 32 else (2, "6, tail='shift'")
    splits = (f"split(c, factor={vectors * x86_level.lanes('float32')})", f"split(ax3, factor={pixels})")
    assert all(split in trace for split in splits), trace


@pytest.mark.parametrize("groups, c, oc, k, stride, pad", [(2, 32, 64, 3, 1, 1), (4, 64, 64, 1, 1, 0),
                                                           (2, 32, 32, 3, 2, 1)])
def test_grouped_blocked_conv_matches_numpy(groups, c, oc, k, stride, pad):
    """Groups of whole channel blocks: each output block reads its own group's input blocks."""
    rng = np.random.default_rng(groups * c + k)
    x = rng.standard_normal((1, c, 9, 11)).astype("float32")
    w = rng.standard_normal((oc, c // groups, k, k)).astype("float32")
    xb, wp = _blocked(x, 16), nchwc.pack_blocked_weight(w, 16, 16)
    X, W = lw.placeholder(xb.shape, name="X"), lw.placeholder(wp.shape, name="W")
    Y = nchwc.conv2d_blocked(X, W, stride=(stride, stride), padding=(pad,) * 4, groups=groups)
    y = np.empty(_shape(Y), "float32")
    lw.build(nn_ops.schedule(Y), [X, W, Y])(xb, wp, y)
    ref = conv2d_ref(x, w, stride, (pad,) * 4, 1, groups)
    np.testing.assert_allclose(_plain(y), ref, rtol=1e-4, atol=1e-4 * np.abs(ref).max())


def test_grouped_blocked_conv_needs_whole_blocks_per_group():
    X = lw.placeholder((1, 2, 8, 8, 16), name="X")
    W = lw.placeholder((2, 1, 3, 3, 16, 16), name="W")
    with pytest.raises(lw.ExprError, match="3 groups need a blocked input and whole channel blocks per group"):
        nchwc.conv2d_blocked(X, W, groups=3)
