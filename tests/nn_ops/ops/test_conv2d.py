"""conv2d with its default CPU schedule, against a numpy reference and onnxruntime."""
import re

import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.ops.conv2d import _channel_rows, conv2d_weight_blocks


def _pair(v):
    return (v, v) if isinstance(v, int) else tuple(v)


def conv2d_ref(x, w, stride=1, padding=0, dilation=1, groups=1):
    """Direct numpy convolution (cross-correlation), NCHW / OIHW, as ONNX Conv."""
    sh, sw = _pair(stride)
    dh, dw = _pair(dilation)
    if isinstance(padding, int):
        padding = (padding, padding)
    if len(padding) == 2:
        padding = (padding[0], padding[1], padding[0], padding[1])
    pt, pl, pb, pr = padding
    x = np.pad(x.astype(np.float64), ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c, h, wd = x.shape
    oc, cg, kh, kw = w.shape
    oh = (h - (kh - 1) * dh - 1) // sh + 1
    ow = (wd - (kw - 1) * dw - 1) // sw + 1
    out = np.zeros((n, oc, oh, ow))
    ocg = oc // groups
    for o in range(oc):
        g = o // ocg
        xs = x[:, g * cg:(g + 1) * cg]
        for ry in range(kh):
            for rx in range(kw):
                patch = xs[:, :, ry * dh: ry * dh + sh * (oh - 1) + 1: sh, rx * dw: rx * dw + sw * (ow - 1) + 1: sw]
                out[:, o] += np.einsum("nchw,c->nhw", patch, w[o, :, ry, rx].astype(np.float64))
    return out


def _build(x_shape, w_shape, **kw):
    X = lw.placeholder(x_shape, name="X")
    W = lw.placeholder(w_shape, name="W")
    Y = nn_ops.conv2d(X, W, **kw)
    f = lw.build(nn_ops.schedule(Y), [X, W, Y])
    return f, tuple(int(d.value) for d in Y.shape)


def _check(x_shape, w_shape, seed=0, **kw):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    f, y_shape = _build(x_shape, w_shape, **kw)
    y = np.empty(y_shape, np.float32)
    f(x, w, y)
    ref = conv2d_ref(x, w, **kw)
    assert y.shape == ref.shape
    k = w_shape[1] * w_shape[2] * w_shape[3]
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4 * np.sqrt(k))


@pytest.mark.parametrize("x_shape,w_shape,kw", [
    # dense convolutions: channel-blocked path (> 64 output pixels), else im2col (weights at run time)
    ((1, 3, 9, 9), (16, 3, 3, 3), dict(padding=1)),
    ((2, 5, 11, 13), (32, 5, 3, 3), dict(stride=2, padding=1)),   # im2col, 42 pixels, batch 2
    ((1, 8, 15, 15), (16, 8, 7, 7), dict(stride=2, padding=3)),   # im2col, 64 pixels
    ((1, 3, 17, 17), (8, 3, 7, 7), dict(stride=2, padding=3)),
    ((1, 6, 13, 11), (24, 6, 3, 3), dict(padding=2, dilation=2)),
    ((2, 4, 10, 10), (12, 4, 3, 3), dict(stride=(1, 2), padding=(1, 0))),   # im2col, 40 pixels
    ((1, 4, 9, 9), (8, 4, 3, 3), dict(padding=(2, 1, 0, 2), dilation=2)),     # im2col, 7x8, dilated
    ((1, 9, 4, 4), (24, 9, 3, 3), dict(padding=1)),                            # im2col, one vector
    ((1, 4, 9, 12), (16, 4, 3, 3), dict(padding=(0, 1, 2, 1))),
    ((1, 7, 12, 12), (5, 7, 3, 3), dict(padding=1)),           # output channels not a multiple of a block
    ((1, 32, 9, 9), (64, 32, 3, 3), dict(padding=1)),
    # few taps (C*KH*KW <= 32), rows of >= 16 pixels: vector-rows path
    ((1, 3, 40, 40), (32, 3, 3, 3), dict(stride=2, padding=1)),  # a stem: 20 pixels, one shifted vector
    ((2, 3, 36, 70), (12, 3, 3, 3), dict(padding=(0, 1, 2, 1))),  # two vectors, shifted tile, 6-row block
    ((1, 2, 30, 40), (8, 2, 3, 3), dict(padding=2, dilation=2)),
    ((1, 1, 20, 33), (5, 1, 5, 5), dict(stride=(1, 2), padding=2)),
    # 1x1
    ((1, 16, 12, 12), (24, 16, 1, 1), dict()),                  # pixels path (144 pixels, shifted last tile)
    ((2, 8, 16, 16), (48, 8, 1, 1), dict()),                    # pixels path, batch 2
    ((1, 12, 5, 7), (32, 12, 1, 1), dict()),                    # pixels path, 35 pixels: two shifted tiles
    ((1, 12, 5, 5), (32, 12, 1, 1), dict()),                    # few pixels: im2col (a copy)
    ((1, 16, 13, 13), (32, 16, 1, 1), dict(stride=2)),           # strided pixels path, 7x7
    ((1, 16, 9, 9), (32, 16, 1, 1), dict(stride=2)),             # strided, few pixels: im2col
    ((1, 16, 36, 33), (24, 16, 1, 1), dict(stride=2)),          # strided pixels path (18x17, subsampled)
    ((2, 8, 16, 40), (40, 8, 1, 1), dict(stride=(1, 2))),       # strided pixels path, batch 2, 16x20
    ((1, 58, 28, 28), (58, 58, 1, 1), dict()),                  # 58 = 2 x 29 channels: blocks of 12, shifted
    ((1, 24, 14, 14), (116, 24, 1, 1), dict()),                 # 116 = 4 x 29: blocks of 13, shifted
    # grouped and depthwise
    ((1, 8, 10, 10), (16, 4, 3, 3), dict(padding=1, groups=2)),
    ((2, 6, 9, 9), (6, 3, 1, 1), dict(groups=2)),
    ((1, 16, 14, 14), (16, 1, 3, 3), dict(padding=1, groups=16)),
    ((2, 8, 15, 15), (8, 1, 3, 3), dict(stride=2, padding=1, groups=8)),
    ((1, 4, 11, 11), (4, 1, 5, 5), dict(padding=2, dilation=2, groups=4)),
    ((1, 4, 8, 8), (8, 1, 3, 3), dict(padding=1, groups=4)),    # depth multiplier 2
    ((1, 3, 40, 40), (3, 1, 3, 3), dict(padding=1, groups=3)),   # vector rows with a guarded tail
    ((1, 3, 41, 41), (3, 1, 3, 3), dict(stride=2, padding=1, groups=3)),   # stride-2 vector loads
])
def test_conv2d_matches_numpy(x_shape, w_shape, kw):
    _check(x_shape, w_shape, **kw)


@pytest.mark.parametrize("channels,limit,want", [(58, 14, (12, "shift")), (116, 14, (13, "shift")),
                                                  (64, 14, (8, "guard")), (58, 16, (15, "shift")),
                                                  (13, 14, (13, "guard")), (24, 14, (12, "guard"))])
def test_the_pixels_matmul_takes_even_shifted_channel_blocks_where_divisors_are_small(channels, limit, want):
    """ShuffleNetV2's 58 channels had blocks of 2 (its largest divisor up to 14): 62 GFLOPS."""
    assert _channel_rows(channels, limit) == want


def test_strided_1x1_takes_the_pixels_path():
    X = lw.placeholder((1, 64, 56, 56), name="X")
    Y = nn_ops.conv2d(X, lw.placeholder((128, 64, 1, 1), name="W"), stride=2)
    assert Y.op.tag == "conv2d_1x1"
    sub = Y.op.input_tensors[0].op.input_tensors[0]
    assert sub.op.tag == "conv2d.subsample" and [int(d.value) for d in sub.shape] == [1, 64, 28, 28]


@pytest.mark.vector_width
def test_few_pixels_with_run_time_weights_take_the_im2col_path():
    """7x7 outputs read W as it is (patches copied instead); a prepacked W keeps the blocked path,
    and so do larger outputs."""
    X = lw.placeholder((1, 512, 7, 7), name="X")
    Y = nn_ops.conv2d(X, lw.placeholder((512, 512, 3, 3), name="W"), padding=1)
    assert Y.op.tag == "conv2d_im2col"
    cols = Y.op.input_tensors[0].op.input_tensors[0]
    assert cols.op.tag == "conv2d.im2col" and [int(d.value) for d in cols.shape] == [1, 512, 3, 3, 49]
    bn, cb = conv2d_weight_blocks((1, 512, 7, 7), (512, 512, 3, 3), (1, 1), (1, 1, 1, 1), 1)  # the host's width
    packed = lw.placeholder((512 // bn, 512 // cb, 3, 3, cb, bn), name="Wp")
    assert nn_ops.conv2d(X, packed, padding=1).op.tag == "conv2d"
    wide = nn_ops.conv2d(lw.placeholder((1, 256, 14, 14), name="X"), lw.placeholder((256, 256, 3, 3), name="W"),
                         padding=1)
    assert wide.op.tag == "conv2d"


def test_few_taps_take_the_rows_path():
    X = lw.placeholder((1, 3, 224, 224), name="X")
    Y = nn_ops.conv2d(X, lw.placeholder((32, 3, 3, 3), name="W"), stride=2, padding=1)
    assert Y.op.tag == "conv2d_rows"
    narrow = nn_ops.conv2d(lw.placeholder((1, 3, 9, 9), name="X"), lw.placeholder((16, 3, 3, 3), name="W"))
    assert narrow.op.tag == "conv2d_im2col"     # rows of 7: not vector rows; 49 pixels: im2col
    dilated = nn_ops.conv2d(lw.placeholder((1, 2, 18, 18), name="X"), lw.placeholder((8, 2, 3, 3), name="W"),
                            dilation=3)     # 12 output pixels a row, though 18 - 3 + 1 = 16
    assert dilated.op.tag == "conv2d"


def test_few_output_channels_take_the_rows_path_whatever_their_taps():
    """An image out (32 -> 3, 9x9: 2592 taps) or 21 classes would be blocks of one channel in the
    blocked path (scalar code); rows of pixels are vectors instead, with the same values."""
    rng = np.random.default_rng(0)
    for oc, k in ((3, 9), (21, 3)):
        X = lw.placeholder((1, 32, 20, 37), name="X")
        W = lw.placeholder((oc, 32, k, k), name="W")
        Y = nn_ops.conv2d(X, W, padding=k // 2)
        assert Y.op.tag == "conv2d_rows"
        f = lw.build(nn_ops.schedule(Y), [X, W, Y])
        x, w = rng.standard_normal((1, 32, 20, 37), dtype=np.float32), rng.standard_normal((oc, 32, k, k), dtype=np.float32)
        y = np.empty((1, oc, 20, 37), np.float32)
        f(x, w, y)
        np.testing.assert_allclose(y, conv2d_ref(x, w, padding=k // 2), rtol=1e-4, atol=1e-3)


@pytest.mark.parametrize("size,stride", [(40, 2), (57, 1)])
def test_rows_path_with_fused_relu_epilogue(size, stride):
    """The network form: the rows conv's register block computed inside the relu's tile."""
    from loopweave.nn_ops.ops import elementwise as ew
    rng = np.random.default_rng(size)
    x = rng.standard_normal((1, 3, size, size), dtype=np.float32)
    w = rng.standard_normal((24, 3, 3, 3), dtype=np.float32)
    X, W = lw.placeholder(x.shape, name="X"), lw.placeholder(w.shape, name="W")
    conv = nn_ops.conv2d(X, W, stride=stride, padding=1)
    assert conv.op.tag == "conv2d_rows"
    Y = ew.relu(conv)
    s = nn_ops.schedule(Y)
    y = np.empty(tuple(int(d.value) for d in Y.shape), np.float32)
    lw.build(s, [X, W, Y])(x, w, y)
    np.testing.assert_allclose(y, np.maximum(conv2d_ref(x, w, stride=stride, padding=1), 0), rtol=1e-4, atol=1e-4)


def test_conv2d_realistic_layers():
    _check((1, 64, 56, 56), (64, 64, 3, 3), padding=1)
    _check((1, 96, 28, 28), (24, 96, 1, 1))
    _check((1, 64, 56, 56), (128, 64, 1, 1), stride=2)
    _check((1, 3, 224, 224), (32, 3, 3, 3), stride=2, padding=1)


def test_conv2d_errors_name_the_problem():
    X = lw.placeholder((1, 4, 8, 8), name="X")
    with pytest.raises(lw.ExprError, match="layout"):
        nn_ops.conv2d(X, lw.placeholder((8, 4, 3, 3), name="W"), layout="NHWC")
    with pytest.raises(lw.ExprError, match="groups=3 does not divide"):
        nn_ops.conv2d(X, lw.placeholder((6, 1, 3, 3), name="W"), groups=3)
    with pytest.raises(lw.ExprError, match="input channels per group"):
        nn_ops.conv2d(X, lw.placeholder((8, 3, 3, 3), name="W"))
    with pytest.raises(lw.ExprError, match="stride"):
        nn_ops.conv2d(X, lw.placeholder((8, 4, 3, 3), name="W"), stride=0)
    with pytest.raises(lw.ExprError, match="larger than the padded input"):
        nn_ops.conv2d(X, lw.placeholder((8, 4, 9, 9), name="W"))
    with pytest.raises(lw.ExprError, match="4-d"):
        nn_ops.conv2d(lw.placeholder((4, 8, 8), name="X3"), lw.placeholder((8, 4, 3, 3), name="W"))


@pytest.mark.parametrize("x_shape,w_shape,stride,pad,groups", [
    ((1, 16, 28, 28), (32, 16, 3, 3), 2, 1, 1),
    ((1, 24, 14, 14), (24, 1, 3, 3), 1, 1, 24),
])
def test_conv2d_matches_onnxruntime(x_shape, w_shape, stride, pad, groups):
    ort = pytest.importorskip("onnxruntime")
    from onnx import TensorProto, helper
    X = helper.make_tensor_value_info("X", TensorProto.FLOAT, list(x_shape))
    W = helper.make_tensor_value_info("W", TensorProto.FLOAT, list(w_shape))
    Y = helper.make_tensor_value_info("Y", TensorProto.FLOAT, None)
    node = helper.make_node("Conv", ["X", "W"], ["Y"], strides=[stride] * 2, pads=[pad] * 4, group=groups,
                            kernel_shape=list(w_shape[2:]))
    model = helper.make_model(helper.make_graph([node], "conv", [X, W], [Y]),
                              opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = min(model.ir_version, 8)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    rng = np.random.default_rng(3)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    expected = sess.run(None, {"X": x, "W": w})[0]
    f, y_shape = _build(x_shape, w_shape, stride=stride, padding=pad, groups=groups)
    y = np.empty(y_shape, np.float32)
    f(x, w, y)
    np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-3)


def test_prepacked_weight_gives_the_same_result():
    """A weight packed once with pack_conv2d_weight (what the network compiler does for constants)."""
    import loopweave as lw
    from loopweave import nn_ops
    from loopweave.nn_ops.ops.conv2d import conv2d_weight_blocks, pack_conv2d_weight
    rng = np.random.default_rng(5)
    x = rng.standard_normal((1, 16, 12, 12), dtype=np.float32)
    w = rng.standard_normal((32, 16, 3, 3), dtype=np.float32)
    blocks = conv2d_weight_blocks(x.shape, w.shape, (1, 1), (1, 1, 1, 1), 1)
    assert blocks is not None
    wp = pack_conv2d_weight(w, blocks)
    outs = []
    for weight in (w, wp):
        X = lw.placeholder(x.shape, name="X")
        W = lw.placeholder(weight.shape, name="W")
        Y = nn_ops.conv2d(X, W, padding=1)
        y = np.full((1, 32, 12, 12), np.nan, np.float32)
        lw.build(nn_ops.schedule(Y), [X, W, Y])(x, weight, y)
        outs.append(y)
    expected = conv2d_ref(x, w, padding=1)
    for y in outs:
        np.testing.assert_allclose(y, expected, rtol=1e-4, atol=1e-4)
    bad = pack_conv2d_weight(w, (blocks[0] // 2, blocks[1])) if blocks[0] > 1 else None
    if bad is not None:
        with pytest.raises(lw.ExprError, match="pack_conv2d_weight"):
            nn_ops.conv2d(lw.placeholder(x.shape, name="X"), lw.placeholder(bad.shape, name="W"), padding=1)


@pytest.mark.parametrize("size,stride", [(40, 1), (41, 2), (112, 2), (14, 1), (7, 1), (14, 2), (3, 1)])
def test_depthwise_with_fused_clip_epilogue(size, stride):
    """The network form: depthwise conv + clip, the conv's vector block computed inside the clip's tile
    (whose last tile is shifted inwards when the row is not a multiple of the vector width)."""
    import loopweave as lw
    from loopweave import nn_ops
    from loopweave.nn_ops.ops import elementwise as ew
    rng = np.random.default_rng(size)
    x = rng.standard_normal((1, 4, size, size), dtype=np.float32)
    w = rng.standard_normal((4, 1, 3, 3), dtype=np.float32)
    X, W = lw.placeholder(x.shape, name="X"), lw.placeholder(w.shape, name="W")
    Y = ew.clip(nn_ops.conv2d(X, W, stride=stride, padding=1, groups=4), 0.0, 6.0)
    s = nn_ops.schedule(Y)
    assert "ramp(" in str(lw.lower(s, [X, W, Y])) or size < 16
    out_size = (size + 2 - 3) // stride + 1
    y = np.empty((1, 4, out_size, out_size), np.float32)
    lw.build(s, [X, W, Y])(x, w, y)
    ref = np.clip(conv2d_ref(x, w, stride=stride, padding=1, groups=4), 0, 6)
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("width", [23, 29, 28])
def test_the_nchw_conv_takes_shifted_register_blocks_on_rows_of_prime_width(width):
    """The general NCHW conv's register block is a divisor of the row only where that costs little:
    a row of 23 or 29 pixels takes blocks of several pixels with the last one shifted inwards (it
    had one-pixel blocks: the 32-channel 3x3 at 23x23 ran at 115 GFLOPS, 283 with these), a row of
    28 its divisor 14; the results match numpy either way."""
    X = lw.placeholder((1, 32, width, width), name="X")
    W = lw.placeholder((32, 32, 3, 3), name="W")
    Y = nn_ops.conv2d(X, W, padding=1)
    assert Y.op.tag == "conv2d"
    s = nn_ops.schedule(Y)
    code = str(s.trace)
    split = re.search(r"split\(xx, factor=(\d+)(, tail='shift')?\)", code)
    assert split is not None, code
    pixels, shifted = int(split.group(1)), bool(split.group(2))
    assert pixels > 1 and shifted == bool(width % pixels), code
    _check((1, 32, width, width), (32, 32, 3, 3), padding=1)


@pytest.mark.parametrize("width, limit, vectors, want", [
    (28, 6, 2, (6, "shift")),     # AVX2: the divisor block 2 x 4 has only MIN_ACCUMULATORS; 2 x 6 shifted
    (14, 6, 2, (5, "shift")),     # 2 x 2 leaves FMA units idle; 2 x 6 would recompute 4 of 18 pixels
    (28, 14, 2, (14, "guard")),   # AVX-512: the divisor has accumulators to spare
    (111, 6, 4, (3, "guard")),    # 4 x 3 has 12: a shifted 4 x 6 must save a quarter (it spilled)
    (23, 14, 2, (12, "shift")),   # a prime row: one-pixel blocks
])
def test_register_blocks_weigh_a_divisor_against_shifted_blocks(width, limit, vectors, want):
    from loopweave.nn_ops.ops.conv2d import static_row_block
    assert static_row_block(width, limit, vectors=vectors) == want


@pytest.mark.parametrize("c, oc, k", [(32, 16, 1), (3, 32, 3)])
def test_the_pixels_matmul_and_the_rows_block_fit_the_vector_registers(x86_level, c, oc, k):
    """The 1x1 pixels matmul (32 -> 16) and the vector rows (an RGB 3x3): the register block's
    accumulators (channel rows x pixel vectors), its pixel vectors and one broadcast weight fit the
    target's registers (16 with AVX2: 8 x 2 blocks spilled, MobileNetV2's lone 1x1 layers ran 1.8-4.2x
    slower), and the results match numpy."""
    lanes, registers = x86_level.lanes("float32"), x86_level.vector_registers
    X = lw.placeholder((1, c, 56, 56), name="X")
    W = lw.placeholder((oc, c, k, k), name="W")
    Y = nn_ops.conv2d(X, W, padding=k // 2)
    s = nn_ops.schedule(Y, x86_level)
    text = str(lw.lower(s, [X, W, Y]))
    rows, pixels = re.search(r"conv2d\.(?:pixels\.acc|local) = allocate\(\(1, (\d+), (?:1, )?(\d+)\)", text).groups()
    vectors = int(pixels) // lanes
    assert vectors == 2 and int(rows) * vectors + vectors + 1 <= registers, text[:800]
    assert int(rows) == (4 if registers == 16 else 8)
    if x86_level.runs_here():
        rng = np.random.default_rng(k)
        x = rng.standard_normal((1, c, 56, 56)).astype("float32")
        w = rng.standard_normal((oc, c, k, k)).astype("float32")
        y = np.empty((1, oc, 56, 56), "float32")
        lw.build(s, [X, W, Y], target=x86_level)(x, w, y)
        np.testing.assert_allclose(y, conv2d_ref(x, w, padding=k // 2), rtol=1e-4, atol=1e-4)


def test_the_im2col_block_spans_the_patches_only_where_the_registers_allow(x86_level):
    """Run-time weights on a 7x7 map (im2col): with 32 registers a block spans all 49 pixels (4
    vectors, each weight read once); AVX2's 16 cannot (7 vectors leave one channel row, or spill 4):
    3 pixel vectors x 4 channel rows, the fewest loads per FMA.  The results match numpy."""
    from loopweave.nn_ops.ops.conv2d import im2col_pixel_vectors
    lanes, registers = x86_level.lanes("float32"), x86_level.vector_registers
    assert im2col_pixel_vectors(-(-49 // lanes), registers) == (4 if registers == 32 else 3)
    X = lw.placeholder((1, 64, 7, 7), name="X")
    W = lw.placeholder((64, 64, 3, 3), name="W")
    Y = nn_ops.conv2d(X, W, padding=1)
    assert Y.op.tag == "conv2d_im2col"
    s = nn_ops.schedule(Y, x86_level)
    trace = str(s.trace)
    pixels = int(re.search(r"split\(yy_xx_fused, factor=(\d+)", trace).group(1))
    rows = int(re.search(r"split\(o, factor=(\d+)", trace).group(1))
    vectors = pixels // lanes
    assert (rows, vectors) == ((4, 4) if registers == 32 else (4, 3)), trace
    assert rows * vectors + vectors + 1 <= registers
    if x86_level.runs_here():
        rng = np.random.default_rng(7)
        x = rng.standard_normal((1, 64, 7, 7)).astype("float32")
        w = rng.standard_normal((64, 64, 3, 3)).astype("float32")
        y = np.empty((1, 64, 7, 7), "float32")
        lw.build(s, [X, W, Y], target=x86_level)(x, w, y)
        np.testing.assert_allclose(y, conv2d_ref(x, w, padding=1), rtol=1e-4, atol=1e-3)
