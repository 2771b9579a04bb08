"""Each supported ONNX op, imported, compiled and run against onnxruntime on small shapes."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder

ort = pytest.importorskip("onnxruntime")


def _model(b, out, in_shape, extra_inputs=()):
    model = b.model(in_shape, out, None)
    for name, shape in extra_inputs:
        model.graph.input.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
    inferred = onnx.shape_inference.infer_shapes(model)
    for vi in inferred.graph.value_info:
        if vi.name == out:
            model.graph.output[0].type.CopyFrom(vi.type)
    return model


def _check(model, seed=0):
    g = lw.from_onnx(model)
    exe = lw.compile(g, progress=False)
    rng = np.random.default_rng(seed)
    feed = {name: rng.standard_normal(shape).astype(dtype) for name, shape, dtype in exe.inputs}
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    got = exe.run(feed)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-5 * max(1.0, float(np.abs(b).max())))
    return g


UNARY = [("Sigmoid", {}), ("Tanh", {}), ("HardSwish", {}), ("HardSigmoid", {"alpha": 0.3, "beta": 0.4}),
         ("LeakyRelu", {"alpha": 0.2}), ("Relu", {}), ("Exp", {}), ("Neg", {}), ("Identity", {})]


@pytest.mark.parametrize("op,attrs", UNARY, ids=[u[0] for u in UNARY])
def test_unary(op, attrs):
    b = OnnxBuilder(opset=14)
    _check(_model(b, b.node(op, ["input"], **attrs), (2, 3, 5)))


@pytest.mark.parametrize("op", ["Add", "Sub", "Mul", "Div", "Max", "Min"])
@pytest.mark.parametrize("other", [(2, 3, 4, 5), (3, 1, 1), (5,), (1,), ()], ids=str)
def test_binary_broadcast_with_a_constant(op, other):
    b = OnnxBuilder()
    c = np.random.default_rng(1).uniform(0.5, 2.0, other).astype(np.float32)
    _check(_model(b, b.node(op, ["input", b.init("c", c)]), (2, 3, 4, 5)))


def test_binary_broadcast_between_inputs():
    b = OnnxBuilder()
    _check(_model(b, b.node("Mul", ["input", "other"]), (2, 1, 4), extra_inputs=[("other", (3, 1))]))


@pytest.mark.parametrize("attrs", [
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1]),
    dict(kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1], count_include_pad=1),
    dict(kernel_shape=[2, 3], strides=[1, 2]),
    dict(kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1),
    dict(kernel_shape=[3, 3], auto_pad="SAME_UPPER"),
], ids=["pad", "count_pad", "rect", "ceil", "same"])
@pytest.mark.parametrize("op", ["MaxPool", "AveragePool"])
def test_pools(op, attrs):
    if op == "MaxPool" and "count_include_pad" in attrs:
        attrs = {k: v for k, v in attrs.items() if k != "count_include_pad"}
    b = OnnxBuilder()
    _check(_model(b, b.node(op, ["input"], **attrs), (1, 3, 9, 10)))


@pytest.mark.parametrize("op", ["GlobalAveragePool", "GlobalMaxPool"])
def test_global_pools(op):
    b = OnnxBuilder()
    _check(_model(b, b.node(op, ["input"]), (2, 5, 6, 7)))


@pytest.mark.parametrize("k,stride,pad,groups,dil", [(3, 1, 1, 1, 1), (3, 2, 1, 1, 1), (1, 1, 0, 1, 1),
                                                     (3, 1, 1, 8, 1), (3, 2, 1, 8, 1), (3, 1, 2, 1, 2),
                                                     (3, 1, 1, 2, 1)])
def test_conv_bn_relu(k, stride, pad, groups, dil):
    b = OnnxBuilder()
    conv = b.conv("input", 8, 8 * (1 if groups == 8 else 2), k, stride=stride, pad=pad, groups=groups, bias=True)
    b.nodes[-1].attribute.append(helper.make_attribute("dilations", [dil, dil]))
    c = 8 * (1 if groups == 8 else 2)
    _check(_model(b, b.relu(b.bn(conv, c)), (1, 8, 9, 9)))


def test_standalone_batch_norm_and_clip():
    b = OnnxBuilder()
    x = b.node("Clip", [b.bn("input", 3), b.init("lo", np.float32(-0.5))])
    _check(_model(b, x, (2, 3, 4, 4)))


def test_softmax_transpose_concat_squeeze_unsqueeze():
    b = OnnxBuilder()
    t = b.node("Transpose", ["input"], perm=[0, 2, 1])
    s = b.node("Softmax", [t], axis=-1)
    u = b.node("Unsqueeze", [s, b.init("ax", np.array([1], np.int64))])
    c = b.node("Concat", [u, u], axis=1)
    q = b.node("Squeeze", [b.node("Relu", [c]), b.init("ax", np.array([0], np.int64))])
    _check(_model(b, q, (1, 4, 6)))


@pytest.mark.parametrize("trans_a,trans_b,alpha,beta,c_shape", [
    (0, 1, 1.0, 1.0, (7,)), (0, 0, 1.0, 1.0, (1, 7)), (1, 0, 0.5, 2.0, (3, 7)), (0, 1, 1.0, 0.0, None)])
def test_gemm(trans_a, trans_b, alpha, beta, c_shape):
    b = OnnxBuilder()
    rng = np.random.default_rng(3)
    a_shape = (5, 3) if trans_a else (3, 5)
    w = rng.standard_normal((7, 5) if trans_b else (5, 7)).astype(np.float32)
    inputs = ["input", b.init("w", w)]
    if c_shape is not None:
        inputs.append(b.init("c", rng.standard_normal(c_shape).astype(np.float32)))
    out = b.node("Gemm", inputs, transA=trans_a, transB=trans_b, alpha=alpha, beta=beta)
    _check(_model(b, out, a_shape))


@pytest.mark.parametrize("rows", [1, 20], ids=["streaming", "blocked"])
def test_dense_with_constant_weight_both_paths(rows):
    """Constant weights are transposed at compile time: few rows stream them, many rows use the blocked matmul."""
    b = OnnxBuilder()
    out = b.relu(b.gemm("input", 40, 70))
    g = _check(_model(b, out, (rows, 40)))
    assert "dense" in g.op_counts()


def test_matmul_constant_and_dynamic():
    b = OnnxBuilder()
    w = np.random.default_rng(4).standard_normal((6, 4)).astype(np.float32)
    x = b.node("MatMul", ["input", b.init("w", w)])
    y = b.node("MatMul", [x, "other"])
    _check(_model(b, y, (3, 6), extra_inputs=[("other", (4, 5))]))


def test_matmul_3d_by_constant():
    b = OnnxBuilder()
    w = np.random.default_rng(5).standard_normal((6, 4)).astype(np.float32)
    _check(_model(b, b.node("MatMul", ["input", b.init("w", w)]), (2, 3, 6)))


def test_pad_and_constant_node():
    b = OnnxBuilder()
    cst = b.node("Constant", [], value=helper.make_tensor("v", TensorProto.FLOAT, [1], [0.25]))
    p = b.node("Pad", ["input", b.init("pads", np.array([0, 0, 1, 2, 0, 0, 2, 1], np.int64)), cst])
    _check(_model(b, b.node("Add", [p, cst]), (1, 2, 3, 3)))


def test_reshape_with_zero_and_minus_one():
    b = OnnxBuilder()
    r = b.node("Reshape", ["input", b.init("shape", np.array([0, -1, 2], np.int64))])
    _check(_model(b, b.node("Relu", [r]), (2, 3, 4)))


@pytest.mark.parametrize("op", ["ReduceMean", "ReduceSum", "ReduceMax", "ReduceMin"])
@pytest.mark.parametrize("axes,keepdims", [([2, 3], 1), ([1], 0), ([-1], 1), (None, 0)], ids=str)
def test_reductions(op, axes, keepdims):
    b = OnnxBuilder(opset=13)
    if op == "ReduceSum":
        inputs = ["input"] + ([b.init("axes", np.array(axes, np.int64))] if axes is not None else [])
        out = b.node(op, inputs, keepdims=keepdims)
    else:
        out = b.node(op, ["input"], keepdims=keepdims, **({"axes": axes} if axes is not None else {}))
    _check(_model(b, out, (2, 3, 4, 5)))


def test_slice_split_cast_erf_pow():
    b = OnnxBuilder()
    i64 = lambda v: b.init("c", np.array(v, np.int64))  # noqa: E731
    s = b.node("Slice", ["input", i64([1, -1]), i64([10, 0]), i64([1, 3]), i64([2, -2])])
    parts = b.node("Split", [s, i64([1, 2])], n_out=2, axis=2)
    c = b.node("Cast", [parts[1]], to=TensorProto.FLOAT)
    e = b.node("Erf", [c])
    p = b.node("Pow", [b.node("Relu", [e]), b.init("two", np.float32(2.0))])
    q = b.node("Pow", [b.node("Sigmoid", [parts[0]]), b.node("Sigmoid", [parts[0]])])
    out = b.node("Concat", [p, q], axis=2)
    _check(_model(b, out, (2, 6, 3, 7)))
