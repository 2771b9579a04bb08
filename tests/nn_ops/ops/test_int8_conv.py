"""The direct int8 convolution with its requantization (``ops/int8_conv``) against an exact integer
reference (numpy int64, the requantization in float64 as ONNX's reference defines it)."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.errors import ExprError
from loopweave.nn_ops.ops.int8_conv import conv2d_u8s8, conv2d_u8s8_blocked, pack_conv_words
from loopweave.nn_ops.ops.nchwc import blocked_shape


def _reference(x, w, bias, multiplier, stride, padding, x_zp, y_zp, out_dtype):
    """QLinearConv in int64: (x - x_zp) conv w + bias, requantized in float64 (half to even, saturated)."""
    xs = x.astype(np.int64) - x_zp
    pt, pl, pb, pr = padding
    xs = np.pad(xs, ((0, 0), (0, 0), (pt, pb), (pl, pr)))
    n, c, h, width = xs.shape
    oc, _, kh, kw = w.shape
    sh, sw = stride
    oh, ow = (h - kh) // sh + 1, (width - kw) // sw + 1
    acc = np.zeros((n, oc, oh, ow), np.int64)
    for ky in range(kh):
        for kx in range(kw):
            patch = xs[:, :, ky:ky + sh * oh:sh, kx:kx + sw * ow:sw]
            acc += np.einsum("nchw,oc->nohw", patch, w[:, :, ky, kx].astype(np.int64))
    acc += bias.reshape(1, -1, 1, 1)
    info = np.iinfo(out_dtype)
    y = np.round(acc.astype(np.float64) * multiplier.reshape(1, -1, 1, 1) + y_zp)
    return np.clip(y, info.min, info.max).astype(out_dtype)


def _operands(rng, x_dtype, c, oc, k, x_zp, per_channel):
    x = rng.integers(0, 256, (1, c, 9, 10)).astype(np.uint8).view(x_dtype)
    w = rng.integers(-128, 128, (oc, c, k, k)).astype(np.int8)
    w[0] = -128                       # the largest products
    x[0, :, 0] = np.iinfo(x_dtype).max
    bias = rng.integers(-5000, 5000, oc).astype(np.int32)
    scale = rng.uniform(0.0005, 0.002, oc if per_channel else 1) * np.ones(oc)
    return x, w, bias, scale.astype(np.float64)


def _folded_bias(w, bias, x_zp, x_dtype):
    """The importer's bias: the input's zero point (and an int8 input's + 128) taken off as a constant."""
    alpha = x_zp + (128 if x_dtype == "int8" else 0)
    return (bias.astype(np.int64) - alpha * w.astype(np.int64).sum(axis=(1, 2, 3))).astype(np.int32)


CASES = [("uint8", 3, 1, (1, 1, 1, 1), 128, True), ("int8", 3, 2, (1, 1, 1, 1), -3, False),
         ("uint8", 1, 1, (0, 0, 0, 0), 0, True), ("uint8", 3, 2, (1, 0, 1, 0), 7, False)]


@pytest.mark.parametrize("x_dtype,k,stride,padding,x_zp,per_channel,int32_range",
                         [case + (False,) for case in CASES] + [case + (True,) for case in CASES[:2]])
@pytest.mark.parametrize("pairs", [False, True])
def test_blocked_int8_conv_equals_the_integer_reference(x_dtype, k, stride, padding, x_zp, per_channel, int32_range,
                                                        pairs):
    """u8 and s8 inputs, per-tensor and per-channel scales, stride 1 and 2, padding by the zero point;
    words of four bytes (``vpdpbusd`` with VNNI) and int16 pairs (``pmaddwd``); saturated in float64 or,
    with ``int32_range``, after the rounding in int32."""
    rng = np.random.default_rng(k * 10 + stride)
    c, oc, cb, b = 16, 32, 8, 16
    x, w, bias, multiplier = _operands(rng, x_dtype, c, oc, k, x_zp, per_channel)
    y_zp = 3
    want = _reference(x, w, bias, multiplier, (stride, stride), padding, x_zp, y_zp, "uint8")
    xb = np.ascontiguousarray(x.reshape(1, c // cb, cb, 9, 10).transpose(0, 1, 3, 4, 2))
    words = pack_conv_words(w, cb, b, pairs=pairs)
    X = lw.placeholder(xb.shape, name="X", dtype=x_dtype)
    W = lw.placeholder(words.shape, name="W", dtype="int32")
    B = lw.placeholder((oc,), name="B", dtype="int32")
    M = lw.placeholder((oc,), name="M", dtype="float64")
    Y = conv2d_u8s8_blocked(X, W, B, M, (stride, stride), padding, pad_value=x_zp, y_zero_point=y_zp, pairs=pairs,
                            int32_range=int32_range)
    f = lw.build(nn_ops.schedule(Y, "llvm"), [X, W, B, M, Y])
    out = np.zeros([int(d.value) for d in Y.shape], np.uint8)
    f(xb, words, _folded_bias(w, bias, x_zp, x_dtype), multiplier, out)
    n, obn, oh, ow, _ = out.shape
    np.testing.assert_array_equal(out.transpose(0, 1, 4, 2, 3).reshape(n, oc, oh, ow), want)
    assert ((want == 0) | (want == 255)).any() and ((want > 0) & (want < 255)).any()     # saturated and not


@pytest.mark.parametrize("pairs", [False, True])
@pytest.mark.parametrize("int32_range", [False, True])
def test_a_float32_multiplier_requantizes_in_float32_within_a_step(pairs, int32_range):
    """A float32 multiplier (a QDQ conv's): the epilogue has no float64, every value within one step of the
    float64 reference and all but a few equal to it."""
    rng = np.random.default_rng(21)
    c, oc, cb, b = 16, 32, 8, 16
    x, w, bias, multiplier = _operands(rng, "uint8", c, oc, 3, 9, True)
    want = _reference(x, w, bias, multiplier.astype(np.float32).astype(np.float64), (1, 1), (1, 1, 1, 1), 9, 3,
                      "uint8")
    xb = np.ascontiguousarray(x.reshape(1, c // cb, cb, 9, 10).transpose(0, 1, 3, 4, 2))
    words = pack_conv_words(w, cb, b, pairs=pairs)
    X = lw.placeholder(xb.shape, name="X", dtype="uint8")
    W = lw.placeholder(words.shape, name="W", dtype="int32")
    B = lw.placeholder((oc,), name="B", dtype="int32")
    M = lw.placeholder((oc,), name="M", dtype="float32")
    Y = conv2d_u8s8_blocked(X, W, B, M, (1, 1), (1, 1, 1, 1), pad_value=9, y_zero_point=3, pairs=pairs,
                            int32_range=int32_range)
    s = nn_ops.schedule(Y, "llvm")
    assert "float64" not in str(lw.lower(s, [X, W, B, M, Y]))
    f = lw.build(s, [X, W, B, M, Y])
    out = np.zeros([int(d.value) for d in Y.shape], np.uint8)
    f(xb, words, _folded_bias(w, bias, 9, "uint8"), multiplier.astype(np.float32), out)
    n, obn, oh, ow, _ = out.shape
    got = out.transpose(0, 1, 4, 2, 3).reshape(n, oc, oh, ow).astype(int)
    assert np.abs(got - want).max() <= 1 and (got != want).mean() < 0.01
    assert ((want == 0) | (want == 255)).any() and ((want > 0) & (want < 255)).any()     # saturated and not


@pytest.mark.parametrize("x_dtype,k,stride,padding,x_zp,per_channel", CASES[:2])
def test_plain_int8_conv_equals_the_integer_reference(x_dtype, k, stride, padding, x_zp, per_channel):
    rng = np.random.default_rng(5)
    x, w, bias, multiplier = _operands(rng, x_dtype, 8, 8, k, x_zp, per_channel)
    want = _reference(x, w, bias, multiplier, (stride, stride), padding, x_zp, -2, "int8")
    X = lw.placeholder(x.shape, name="X", dtype=x_dtype)
    W = lw.placeholder(w.shape, name="W", dtype="int8")
    B = lw.placeholder((8,), name="B", dtype="int32")
    M = lw.placeholder((8,), name="M", dtype="float64")
    Y = conv2d_u8s8(X, W, B, M, (stride, stride), padding, pad_value=x_zp, y_zero_point=-2, out_dtype="int8")
    f = lw.build(nn_ops.schedule(Y, "llvm"), [X, W, B, M, Y])
    out = np.zeros(want.shape, np.int8)
    f(x, w, _folded_bias(w, bias, x_zp, x_dtype), multiplier, out)
    np.testing.assert_array_equal(out, want)


def _build_blocked_for(target, x_shape, w_shape, oc, **conv_args):
    """A stride-1, pad-1 3x3 blocked int8 conv built for ``target``: the kernel and its lowered IR's text."""
    from loopweave.target import compiling_for
    with compiling_for(target):
        X = lw.placeholder(x_shape, name="X", dtype="uint8")
        W = lw.placeholder(w_shape, name="W", dtype="int32")
        B = lw.placeholder((oc,), name="B", dtype="int32")
        M = lw.placeholder((oc,), name="M", dtype="float64")
        Y = conv2d_u8s8_blocked(X, W, B, M, (1, 1), (1, 1, 1, 1), **conv_args)
        s = nn_ops.schedule(Y, target)
        return lw.build(s, [X, W, B, M, Y], target=target), str(lw.lower(s, [X, W, B, M, Y]))


@pytest.mark.vector_width
@pytest.mark.parametrize("cpu,pairs,instruction", [("x86-64-v3", True, "vpmaddwd"), ("znver5", False, "vpdpbusd"),
                                                   ("alderlake", False, "vpdpbusd")])
def test_each_level_runs_the_blocked_conv_on_its_dot_product_instruction(cpu, pairs, instruction):
    """AVX2 through ``pmaddwd`` over int16 pairs (never the saturating ``vpmaddubsw``), VNNI (AVX-512 and
    AVX-VNNI) through ``vpdpbusd``; exact where this CPU runs the code."""
    from loopweave.target import parse_target
    target = parse_target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    rng = np.random.default_rng(3)
    c, oc, b = 16, 32, target.lanes("int32")
    x, w, bias, multiplier = _operands(rng, "uint8", c, oc, 3, 9, True)
    want = _reference(x, w, bias, multiplier, (1, 1), (1, 1, 1, 1), 9, 0, "uint8")
    xb = np.ascontiguousarray(x.reshape(1, 1, c, 9, 10).transpose(0, 1, 3, 4, 2))
    words = pack_conv_words(w, c, b, pairs=pairs)
    f, _ = _build_blocked_for(target, xb.shape, words.shape, oc, pad_value=9, pairs=pairs)
    asm = f.get_source("asm")
    assert instruction in asm and "pmaddubsw" not in asm and "pmulld" not in asm
    if not target.runs_here():
        pytest.skip(f"this CPU cannot run {cpu} code (its instructions were checked)")
    out = np.zeros((1, oc // b, 9, 10, b), np.uint8)
    f(xb, words, _folded_bias(w, bias, 9, "uint8"), multiplier, out)
    np.testing.assert_array_equal(out.transpose(0, 1, 4, 2, 3).reshape(1, oc, 9, 10), want)


def test_pack_conv_words_puts_four_input_channels_in_a_word():
    w = np.arange(2 * 8 * 3 * 3, dtype=np.int64).reshape(2, 8, 3, 3).astype(np.int8)
    words = pack_conv_words(w, 8, 2)
    assert words.shape == (1, 1, 3, 3, 2, 2) and words.dtype == np.int32
    assert list(words[0, 0, 1, 2, 1, 0].tobytes()) == list(w[0, 4:8, 1, 2].view(np.uint8))
    pairs = pack_conv_words(w, 8, 2, pairs=True).view(np.int16).reshape(1, 1, 3, 3, 4, 2, 2)
    np.testing.assert_array_equal(pairs[0, 0, 2, 0, 3, 1], w[1, 6:8, 2, 0])


def test_the_int8_convs_name_what_is_wrong_with_their_operands():
    X = lw.placeholder((1, 2, 5, 5, 8), name="X", dtype="uint8")
    B = lw.placeholder((16,), name="B", dtype="int32")
    M = lw.placeholder((16,), name="M", dtype="float64")
    with pytest.raises(ExprError, match="weight.s 2 blocks of 1 words of 4 channels do not match the input.s 2 "
                                        "blocks of 8"):
        conv2d_u8s8_blocked(X, lw.placeholder((1, 2, 3, 3, 1, 16), name="W", dtype="int32"), B, M)
    with pytest.raises(ExprError, match="M must be float64 or float32 of shape"):
        conv2d_u8s8_blocked(X, lw.placeholder((1, 2, 3, 3, 2, 16), name="W", dtype="int32"), B,
                            lw.placeholder((16,), name="M", dtype="int32"))
    with pytest.raises(ExprError, match="not whole words of four"):
        pack_conv_words(np.zeros((16, 6, 1, 1), np.int8), 6, 16)
    with pytest.raises(ExprError, match="the input has 3 channels, the weight 4"):
        conv2d_u8s8(lw.placeholder((1, 3, 5, 5), name="X", dtype="uint8"),
                    lw.placeholder((16, 4, 1, 1), name="W", dtype="int8"), B, M)


def _depthwise_reference(x, w, bias, multiplier, stride, padding, x_zp, y_zp, out_dtype):
    c = x.shape[1]
    return np.concatenate([_reference(x[:, k:k + 1], w[k:k + 1], bias[k:k + 1], multiplier[k:k + 1], stride, padding,
                                      x_zp, y_zp, out_dtype) for k in range(c)], axis=1)


@pytest.mark.parametrize("x_dtype,stride,padding,x_zp", [("uint8", 1, (1, 1, 1, 1), 131), ("int8", 2, (1, 0, 1, 0), -7)])
@pytest.mark.parametrize("blocked", [True, False])
@pytest.mark.parametrize("int32_range", [False, True])
def test_int8_depthwise_conv_equals_the_integer_reference(x_dtype, stride, padding, x_zp, blocked, int32_range):
    """The blocked kernel sums the centred values in float32, exactly; the plain one in int32; saturated
    in float64 or after the rounding in int32."""
    from loopweave.nn_ops.ops.int8_conv import depthwise_u8s8, depthwise_u8s8_blocked
    from loopweave.nn_ops.ops.nchwc import pack_depthwise_weight
    rng = np.random.default_rng(stride)
    c, b = 32, 16
    x = rng.integers(0, 256, (1, c, 9, 10)).astype(np.uint8).view(x_dtype)
    w = rng.integers(-128, 128, (c, 1, 3, 3)).astype(np.int8)
    w[0], x[0, :, :3] = -128, np.iinfo(x_dtype).min           # the largest products
    bias = rng.integers(-5000, 5000, c).astype(np.int32)
    multiplier = rng.uniform(0.002, 0.02, c)
    want = _depthwise_reference(x, w, bias, multiplier, (stride, stride), padding, x_zp, 5, "uint8")
    assert ((want == 0) | (want == 255)).any() and ((want > 0) & (want < 255)).any()
    B = lw.placeholder((c,), name="B", dtype="int32")
    M = lw.placeholder((c,), name="M", dtype="float64")
    if blocked:
        xb = np.ascontiguousarray(x.reshape(1, c // b, b, 9, 10).transpose(0, 1, 3, 4, 2))
        wd = pack_depthwise_weight(w.astype(np.float32), b)
        X = lw.placeholder(xb.shape, name="X", dtype=x_dtype)
        W = lw.placeholder(wd.shape, name="W", dtype="float32")
        Y = depthwise_u8s8_blocked(X, W, B, M, (stride, stride), padding, x_zero_point=x_zp, y_zero_point=5,
                                   int32_range=int32_range)
        args = [xb, wd]
    else:
        X = lw.placeholder(x.shape, name="X", dtype=x_dtype)
        W = lw.placeholder(w.shape, name="W", dtype="int8")
        Y = depthwise_u8s8(X, W, B, M, (stride, stride), padding, pad_value=x_zp, y_zero_point=5,
                           int32_range=int32_range)
        args = [x, w]
    f = lw.build(nn_ops.schedule(Y, "llvm"), [X, W, B, M, Y])
    out = np.zeros([int(d.value) for d in Y.shape], np.uint8)
    f(*args, bias, multiplier, out)
    if blocked:
        n, _, oh, ow, _ = out.shape
        out = out.transpose(0, 1, 4, 2, 3).reshape(n, c, oh, ow)
    np.testing.assert_array_equal(out, want)


def test_the_blocked_int8_depthwise_conv_requantizes_a_float32_multiplier_in_float32_within_a_step():
    from loopweave.nn_ops.ops.int8_conv import depthwise_u8s8_blocked
    from loopweave.nn_ops.ops.nchwc import pack_depthwise_weight
    rng = np.random.default_rng(4)
    c, b = 32, 16
    x = rng.integers(0, 256, (1, c, 9, 10)).astype(np.uint8)
    w = rng.integers(-128, 128, (c, 1, 3, 3)).astype(np.int8)
    bias = rng.integers(-5000, 5000, c).astype(np.int32)
    multiplier = rng.uniform(0.002, 0.02, c).astype(np.float32)
    want = _depthwise_reference(x, w, bias, multiplier.astype(np.float64), (1, 1), (1, 1, 1, 1), 120, 5, "uint8")
    assert ((want == 0) | (want == 255)).any() and ((want > 0) & (want < 255)).any()
    xb = np.ascontiguousarray(x.reshape(1, c // b, b, 9, 10).transpose(0, 1, 3, 4, 2))
    wd = pack_depthwise_weight(w.astype(np.float32), b)
    X = lw.placeholder(xb.shape, name="X", dtype="uint8")
    W = lw.placeholder(wd.shape, name="W", dtype="float32")
    B = lw.placeholder((c,), name="B", dtype="int32")
    M = lw.placeholder((c,), name="M", dtype="float32")
    Y = depthwise_u8s8_blocked(X, W, B, M, (1, 1), (1, 1, 1, 1), x_zero_point=120, y_zero_point=5, int32_range=True)
    s = nn_ops.schedule(Y, "llvm")
    assert "float64" not in str(lw.lower(s, [X, W, B, M, Y]))
    f = lw.build(s, [X, W, B, M, Y])
    out = np.zeros([int(d.value) for d in Y.shape], np.uint8)
    f(xb, wd, bias, multiplier, out)
    got = out.transpose(0, 1, 4, 2, 3).reshape(want.shape).astype(int)
    assert np.abs(got - want).max() <= 1 and (got != want).mean() < 0.01


@pytest.mark.parametrize("cpu", ["x86-64-v2", "x86-64-v3"])
def test_a_small_map_over_int16_pairs_accumulates_each_row_block_in_registers(cpu):
    """A 7x7 map over ``pmaddwd`` pairs: register blocks of a row (not the whole map's accumulators in
    memory, as the float conv keeps them while its weights stream by), exact where this CPU runs it."""
    import re
    from loopweave.target import parse_target
    target = parse_target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    rng = np.random.default_rng(11)
    c, oc, b = 16, 128, target.lanes("int32")     # channel-block pairs enough for the threads: rows inside
    x = rng.integers(0, 256, (1, c, 7, 7)).astype(np.uint8)
    w = rng.integers(-128, 128, (oc, c, 3, 3)).astype(np.int8)
    w[0] = -128
    bias = rng.integers(-5000, 5000, oc).astype(np.int32)
    multiplier = rng.uniform(0.0005, 0.002, oc)
    want = _reference(x, w, bias, multiplier, (1, 1), (1, 1, 1, 1), 5, 2, "uint8")
    xb = np.ascontiguousarray(x.reshape(1, 1, c, 7, 7).transpose(0, 1, 3, 4, 2))
    words = pack_conv_words(w, c, b, pairs=True)
    f, text = _build_blocked_for(target, xb.shape, words.shape, oc, pad_value=5, y_zero_point=2, pairs=True)
    accumulators = [tuple(int(d) for d in dims.split(", ")) for dims in
                    re.findall(r"allocate\(\(([\d, ]+)\), int32, 'local'\)", text)]
    assert accumulators and all(a[2] == 1 and a[3] < 7 for a in accumulators), accumulators
    if not target.runs_here():
        pytest.skip(f"this CPU cannot run {cpu} code (the schedule was checked)")
    out = np.zeros((1, oc // b, 7, 7, b), np.uint8)
    f(xb, words, _folded_bias(w, bias, 5, "uint8"), multiplier, out)
    np.testing.assert_array_equal(out.transpose(0, 1, 4, 2, 3).reshape(1, oc, 7, 7), want)


def test_rounds_in_int32_holds_for_multipliers_below_a_half():
    from loopweave.nn_ops.ops.int8_conv import rounds_in_int32
    assert rounds_in_int32(np.array([3e-4, 0.02, 0.499]), 255)
    assert not rounds_in_int32(np.array([3e-4, 0.5]), 0)
    assert not rounds_in_int32(np.array([0.4999999]), 255)
