"""conv2d_transpose with its default CPU schedule: against a numpy scatter reference, as the adjoint
of conv2d, fused with a bias/relu epilogue, through the ONNX importer (1-d and 2-d), and its errors."""
import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

import loopweave as lw
from loopweave import nn_ops
from loopweave.nn_ops.network.op_table import OPS


def conv2d_transpose_ref(x, w, stride=(1, 1), padding=(0, 0, 0, 0), output_padding=(0, 0), dilation=(1, 1),
                         groups=1):
    """Scatter form: each input pixel adds ``x * w[c, o]`` to a (stride-spaced, dilated) window of the
    full output, which is then cropped by the padding (a negative pad keeps zero rows instead)."""
    n, c, h, wd = x.shape
    _, ocg, kh, kw = w.shape
    (sh, sw), (dh, dw), (pt, pl, pb, pr) = stride, dilation, padding
    fh = (h - 1) * sh + (kh - 1) * dh + 1 + output_padding[0]
    fw = (wd - 1) * sw + (kw - 1) * dw + 1 + output_padding[1]
    top, left = max(0, -pt), max(0, -pl)
    full = np.zeros((n, ocg * groups, fh + top + max(0, -pb), fw + left + max(0, -pr)))
    cg = c // groups
    for cc in range(c):
        g = cc // cg
        for ky in range(kh):
            for kx in range(kw):
                y0, x0 = top + ky * dh, left + kx * dw
                full[:, g * ocg:(g + 1) * ocg, y0:y0 + (h - 1) * sh + 1:sh, x0:x0 + (wd - 1) * sw + 1:sw] += \
                    np.einsum("nij,o->noij", x[:, cc].astype(np.float64), w[cc, :, ky, kx].astype(np.float64))
    oh, ow = fh - pt - pb, fw - pl - pr
    return full[:, :, max(0, pt):max(0, pt) + oh, max(0, pl):max(0, pl) + ow]


def _run(x, w, bias=None, relu=False, **kw):
    X = lw.placeholder(x.shape, name="X")
    W = lw.placeholder(w.shape, name="W")
    args = [X, W]
    attrs = {"stride": kw.get("stride", (1, 1)), "padding": kw.get("padding", (0, 0, 0, 0)),
             "output_padding": kw.get("output_padding", (0, 0)), "dilation": kw.get("dilation", (1, 1)),
             "groups": kw.get("groups", 1)}
    if bias is not None:
        B = lw.placeholder(bias.shape, name="B")
        args.append(B)
        Y = OPS["conv2d_transpose"].build([X, W, B], attrs)     # the graph op adds the bias per channel
    else:
        Y = nn_ops.conv2d_transpose(X, W, **kw)
    if relu:
        Y = nn_ops.relu(Y)
    f = lw.build(nn_ops.schedule(Y), args + [Y])
    y = np.full(tuple(int(d.value) for d in Y.shape), np.nan, np.float32)   # an unwritten element shows
    f(*[a for a in (x, w, bias) if a is not None], y)
    return y


def _check(x_shape, w_shape, seed=0, bias=False, relu=False, **kw):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal(x_shape, dtype=np.float32)
    w = rng.standard_normal(w_shape, dtype=np.float32)
    b = rng.standard_normal(w_shape[1] * kw.get("groups", 1), dtype=np.float32) if bias else None
    want = conv2d_transpose_ref(x, w, **kw)
    if b is not None:
        want = want + b.reshape(1, -1, 1, 1)
    if relu:
        want = np.maximum(want, 0)
    got = _run(x, w, b, relu, **kw)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.sqrt(x_shape[1] * w_shape[2] * w_shape[3]))


@pytest.mark.parametrize("x_shape,w_shape,kw", [
    ((1, 1, 3, 3), (1, 2, 3, 3), {}),
    ((2, 3, 5, 7), (3, 4, 3, 3), {"stride": (2, 2)}),
    ((1, 4, 4, 6), (4, 2, 3, 3), {"stride": (3, 3), "padding": (1, 1, 1, 1)}),
    ((1, 3, 5, 5), (3, 5, 4, 4), {"stride": (2, 2), "padding": (1, 1, 1, 1), "output_padding": (1, 1)}),
    ((1, 2, 4, 9), (2, 3, 3, 2), {"stride": (3, 2), "padding": (0, 2, 1, 0), "output_padding": (2, 1)}),
    ((1, 2, 5, 6), (2, 3, 3, 3), {"dilation": (2, 2)}),
    ((1, 2, 4, 5), (2, 2, 3, 3), {"stride": (2, 1), "dilation": (1, 3), "padding": (2, 1, 0, 3)}),
    ((1, 4, 5, 5), (4, 3, 3, 3), {"groups": 2, "stride": (2, 2)}),
    ((2, 6, 3, 17), (6, 1, 3, 3), {"groups": 6, "stride": (1, 2), "padding": (1, 1, 1, 1)}),   # depthwise
    ((1, 2, 3, 3), (2, 2, 3, 3), {"padding": (-1, 0, -2, -1)}),           # ONNX output_shape larger than natural
    ((1, 3, 1, 20), (3, 2, 1, 5), {"stride": (1, 3), "padding": (0, 1, 0, 2)}),   # a 1-d one as rows
])
def test_against_numpy(x_shape, w_shape, kw):
    _check(x_shape, w_shape, **kw)


@pytest.mark.parametrize("out_width", [2, 7, 16, 19])      # scalar rows, a shifted last vector, whole vectors
def test_fused_bias_relu_epilogue(out_width):
    _check((2, 4, 3, out_width), (4, 6, 1, 1), bias=True, relu=True)
    _check((1, 4, 3, out_width - 1), (4, 3, 2, 2), bias=True, relu=True, stride=(2, 1), groups=2)


def test_bias_without_epilogue_fusion_target():
    _check((1, 2, 3, 3), (2, 3, 3, 3), bias=True, stride=(2, 2), padding=(1, 1, 1, 1), output_padding=(1, 1))


@settings(max_examples=20, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.data())
def test_random_configurations_match_numpy(data):
    groups = data.draw(st.sampled_from([1, 2, 3]))
    cg, ocg = data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3))
    h, wd = data.draw(st.integers(1, 5)), data.draw(st.integers(1, 9))
    kh, kw = data.draw(st.integers(1, 4)), data.draw(st.integers(1, 4))
    stride = (data.draw(st.integers(1, 3)), data.draw(st.integers(1, 3)))
    dilation = (data.draw(st.integers(1, 2)), data.draw(st.integers(1, 2)))
    output_padding = (data.draw(st.integers(0, 2)), data.draw(st.integers(0, 2)))
    full = [(h - 1) * stride[0] + (kh - 1) * dilation[0] + 1 + output_padding[0],
            (wd - 1) * stride[1] + (kw - 1) * dilation[1] + 1 + output_padding[1]]
    pt, pb = data.draw(st.integers(-2, (full[0] - 1) // 2)), data.draw(st.integers(-2, (full[0] - 1) // 2))
    pl, pr = data.draw(st.integers(-2, (full[1] - 1) // 2)), data.draw(st.integers(-2, (full[1] - 1) // 2))
    _check((data.draw(st.integers(1, 2)), cg * groups, h, wd), (cg * groups, ocg, kh, kw),
           seed=data.draw(st.integers(0, 99)), bias=data.draw(st.booleans()), stride=stride,
           padding=(pt, pl, pb, pr), output_padding=output_padding, dilation=dilation, groups=groups)


def test_is_the_adjoint_of_conv2d():
    """<conv2d_transpose(x), z> == <x, conv2d(z)> with the same weight, stride, padding, dilation, groups."""
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 4, 5, 6), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3, 3), dtype=np.float32)
    kw = {"stride": (2, 2), "padding": (1, 0, 1, 2), "dilation": (1, 2), "groups": 2}
    y = _run(x, w, **kw)
    z = rng.standard_normal(y.shape, dtype=np.float32)
    Z, Wc = lw.placeholder(z.shape, name="Z"), lw.placeholder(w.shape, name="Wc")
    C = nn_ops.conv2d(Z, Wc, **kw)
    cz = np.full(x.shape, np.nan, np.float32)
    lw.build(nn_ops.schedule(C), [Z, Wc, C])(z, w, cz)
    np.testing.assert_allclose(np.vdot(y.astype(np.float64), z), np.vdot(x.astype(np.float64), cz), rtol=1e-4)


# ------------------------------------------------------------------ through the ONNX importer

def _onnx_model(x_shape, y_shape, w, bias=None, **attrs):
    pytest.importorskip("onnx")
    from onnx import TensorProto, helper, numpy_helper
    inits = [numpy_helper.from_array(w, "W")] + ([numpy_helper.from_array(bias, "B")] if bias is not None else [])
    node = helper.make_node("ConvTranspose", ["X", "W"] + (["B"] if bias is not None else []), ["Y"], **attrs)
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)],
                              [helper.make_tensor_value_info("Y", TensorProto.FLOAT, y_shape)], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def _run_onnx(model, x):
    return lw.compile(lw.from_onnx(model), target="llvm").run({"X": x})[0]


def test_onnx_1d_with_bias_groups_and_output_shape():
    rng = np.random.default_rng(5)
    x = rng.standard_normal((2, 4, 7), dtype=np.float32)
    w = rng.standard_normal((4, 3, 3), dtype=np.float32)
    b = rng.standard_normal(6, dtype=np.float32)
    # natural length 2 * 6 + 2 * 2 + 1 = 17; output_shape 14 crops 3: 2 at the start, 1 at the end (spec)
    y = _run_onnx(_onnx_model(x.shape, (2, 6, 14), w, b, strides=[2], dilations=[2], group=2, output_shape=[14]), x)
    want = conv2d_transpose_ref(x[:, :, None], w[:, :, None], stride=(1, 2), dilation=(1, 2), groups=2,
                                padding=(0, 2, 0, 1))[:, :, 0] + b.reshape(1, -1, 1)
    assert y.shape == (2, 6, 14)
    np.testing.assert_allclose(y, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("auto_pad,pads", [("SAME_UPPER", (0, 0, 1, 1)), ("SAME_LOWER", (1, 1, 0, 0))])
def test_onnx_auto_pad_same_gives_input_times_stride(auto_pad, pads):
    rng = np.random.default_rng(6)
    x = rng.standard_normal((1, 2, 3, 4), dtype=np.float32)
    w = rng.standard_normal((2, 2, 3, 3), dtype=np.float32)
    y = _run_onnx(_onnx_model(x.shape, (1, 2, 6, 8), w, strides=[2, 2], auto_pad=auto_pad), x)
    assert y.shape == (1, 2, 6, 8)
    np.testing.assert_allclose(y, conv2d_transpose_ref(x, w, stride=(2, 2), padding=pads), rtol=1e-4, atol=1e-4)


def test_onnx_3d_is_rejected_naming_the_rank():
    w = np.ones((1, 1, 2, 2, 2), np.float32)
    with pytest.raises(lw.errors.OnnxImportError, match=r"ConvTranspose.*3-d ConvTranspose \(input of rank 5"):
        lw.from_onnx(_onnx_model((1, 1, 3, 3, 3), (1, 1, 4, 4, 4), w))


# ------------------------------------------------------------------ errors

@pytest.mark.parametrize("x_shape,w_shape,kw,message", [
    ((1, 3, 4, 4), (2, 2, 3, 3), {}, r"W has 2 input channels but X has C=3"),
    ((1, 3, 4, 4), (3, 2, 3, 3), {"groups": 2}, r"groups=2 does not divide the input channels C=3"),
    ((1, 1, 2, 2), (1, 1, 2, 2), {"padding": (2, 0, 2, 0)}, r"leaves an output of -1x3"),
    ((1, 1, 2, 2), (1, 1, 2, 2), {"stride": 0}, r"stride must be at least 1"),
    ((1, 1, 2, 2), (1, 1, 2, 2), {"output_padding": (1, -1)}, r"output_padding must be at least 0"),
    ((1, 1, 2), (1, 1, 2, 2), {}, r"must be 4-d"),
])
def test_errors_name_the_problem(x_shape, w_shape, kw, message):
    X, W = lw.placeholder(x_shape, name="X"), lw.placeholder(w_shape, name="W")
    with pytest.raises(lw.ExprError, match=r"conv2d_transpose: .*" + message):
        nn_ops.conv2d_transpose(X, W, **kw)


def test_dtype_mismatch_is_an_error():
    X, W = lw.placeholder((1, 1, 2, 2), name="X"), lw.placeholder((1, 1, 2, 2), name="W", dtype="float64")
    with pytest.raises(lw.ExprError, match="conv2d_transpose of float32 and float64"):
        nn_ops.conv2d_transpose(X, W)
