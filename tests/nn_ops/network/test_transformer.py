"""The BERT-style encoder and its pieces: LayerNormalization, GELU, broadcasting MatMul,
and the graph passes that make its kernels fuse (fuse_gelu, sink_reshapes)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402
from loopweave import nn_ops  # noqa: E402
from loopweave.nn_ops.network.passes import fuse_operators, optimize  # noqa: E402
from loopweave.nn_ops.ops.norm import gelu, layer_norm  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder, transformer_encoder  # noqa: E402


def _ort(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


@pytest.mark.parametrize("shape,axis", [((128, 256), -1), ((2, 3, 4, 5), 1), ((3, 7), 0), ((1, 5, 33), -1)])
def test_layer_norm_kernel_matches_numpy(shape, axis):
    X = lw.placeholder(shape, name="X")
    inner = shape[axis % len(shape):]
    G, B = lw.placeholder(inner, name="G"), lw.placeholder(inner, name="B")
    Y = layer_norm(X, G, B, axis, 1e-5)
    f = lw.build(nn_ops.schedule(Y), [X, G, B, Y])
    rng = np.random.default_rng(0)
    x = (rng.standard_normal(shape) * 3 + 10).astype("float32")      # a large mean: two-pass variance
    g, b = rng.standard_normal(inner).astype("float32"), rng.standard_normal(inner).astype("float32")
    y = np.empty(shape, "float32")
    f(x, g, b, y)
    ax = tuple(range(axis % len(shape), len(shape)))
    x64 = x.astype(np.float64)
    ref = (x64 - x64.mean(ax, keepdims=True)) / np.sqrt(x64.var(ax, keepdims=True) + 1e-5) * g + b
    np.testing.assert_allclose(y, ref, rtol=1e-4, atol=1e-4)


def test_layer_norm_schedule_is_parallel_and_vectorized():
    X = lw.placeholder((64, 256), name="X")
    G = lw.placeholder((256,), name="G")
    Y = layer_norm(X, G, None)
    text = str(lw.lower(nn_ops.schedule(Y), [X, G, Y]))
    assert text.count("# parallel") == 1 and "ramp(" in text


@pytest.mark.parametrize("approximate", ["none", "tanh"])
def test_gelu_matches_formula(approximate):
    X = lw.placeholder((1000,), name="X")
    Y = gelu(X, approximate)
    f = lw.build(nn_ops.schedule(Y), [X, Y])
    x = np.linspace(-6, 6, 1000).astype("float32")
    y = np.empty_like(x)
    f(x, y)
    from math import erf, pi, sqrt
    if approximate == "none":
        ref = np.array([v * 0.5 * (1 + erf(v / sqrt(2))) for v in x.astype(float)])
    else:
        ref = 0.5 * x * (1 + np.tanh(sqrt(2 / pi) * (x + 0.044715 * x.astype(float) ** 3)))
    np.testing.assert_allclose(y, ref, rtol=1e-5, atol=1e-6)


@pytest.mark.parametrize("sa,sb,const_b", [
    ((2, 3, 5, 4), (2, 3, 4, 6), False),     # 4-d batches
    ((3, 5, 4), (4, 6), False),              # 2-d B broadcast over the batch
    ((1, 5, 4), (3, 4, 6), False),           # A's batch of 1 stretched
    ((2, 1, 5, 4), (1, 3, 4, 6), False),     # both stretched
    ((4,), (2, 4, 6), False),                # 1-d A
    ((2, 5, 4), (4,), False),                # 1-d B
    ((2, 7, 4), (4, 6), True),               # constant weight: a dense over the rows
])
def test_broadcasting_matmul_matches_onnxruntime(sa, sb, const_b):
    b = OnnxBuilder()
    rng = np.random.default_rng(1)
    bval = rng.standard_normal(sb).astype(np.float32)
    from onnx import TensorProto, helper
    inputs = [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(sa))]
    if const_b:
        B = b.init("B", bval)
    else:
        B = "B"
        inputs.append(helper.make_tensor_value_info("B", TensorProto.FLOAT, list(sb)))
    out = b.node("MatMul", ["input", B])
    graph = helper.make_graph(b.nodes, "mm", inputs, [helper.make_tensor_value_info(out, TensorProto.FLOAT, [])],
                              initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    exe = lw.compile(lw.from_onnx(model), progress=False)
    feed = {"input": rng.standard_normal(sa).astype(np.float32)}
    if not const_b:
        feed["B"] = bval
    got, = exe.run(feed)
    want, = _ort(model, feed)
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_matmul_with_mismatched_inner_sizes_is_an_import_error():
    from onnx import TensorProto, helper
    node = helper.make_node("MatMul", ["a", "b"], ["c"])
    graph = helper.make_graph([node], "bad", [helper.make_tensor_value_info("a", TensorProto.FLOAT, [2, 3]),
                                              helper.make_tensor_value_info("b", TensorProto.FLOAT, [4, 5])],
                              [helper.make_tensor_value_info("c", TensorProto.FLOAT, [])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    with pytest.raises(OnnxImportError, match="MatMul"):
        lw.from_onnx(model)


@pytest.fixture(scope="module")
def encoder():
    model = transformer_encoder(layers=4)
    return model, lw.compile(lw.from_onnx(model), progress=False)


def test_encoder_matches_onnxruntime(encoder):
    model, exe = encoder
    x = np.random.default_rng(3).standard_normal((1, 128, 256)).astype(np.float32)
    got, = exe.run({"input": x})
    want, = _ort(model, {"input": x})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_encoder_kernels_are_fused():
    """Per layer: 3 projections, 2 attention matmuls (the scale fused, and the head splits of Q, K and V
    read through their transposes: no copies), softmax, the heads' merge transpose, output projection +
    residual, 2 layer norms, FFN1 + GELU, FFN2 + residual."""
    g = optimize(lw.from_onnx(transformer_encoder(layers=1)))
    kernels = [grp for grp in fuse_operators(g) if grp.kind != "alias"]
    names = sorted(tuple(n.op_type for n in grp.nodes) for grp in kernels)
    assert ("dense_kn", "gelu") in names
    assert names.count(("dense_kn", "add")) == 2
    head_split = ("reshape", "transpose", "reshape")
    assert head_split * 2 + ("matmul", "div") in names and head_split + ("matmul",) in names, names
    assert names.count(("transpose",)) == 1, names
    assert not any(n == ("add",) or n == ("div",) or "erf" in n for n in names), names
    assert len(kernels) == 12


def test_fuse_gelu_recognises_both_exported_forms():
    for form in ("x_first", "half_first"):
        b = OnnxBuilder(opset=17)
        x = b.node("Relu", ["input"])
        erf = b.node("Erf", [b.node("Div", [x, b.const(np.sqrt(2.0))])])
        one_plus = b.node("Add", [erf, b.const(1.0)])
        if form == "x_first":
            out = b.node("Mul", [b.node("Mul", [x, one_plus]), b.const(0.5)])
        else:
            out = b.node("Mul", [b.node("Mul", [x, b.const(0.5)]), one_plus])
        model = b.model((4, 8), out, (4, 8))
        g = optimize(lw.from_onnx(model))
        assert g.op_counts() == {"relu": 1, "gelu": 1}, (form, g.op_counts())
        exe = lw.compile(lw.from_onnx(model), progress=False)
        x_in = np.random.default_rng(0).standard_normal((4, 8)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"input": x_in})[0], _ort(model, {"input": x_in})[0], rtol=1e-5,
                                   atol=1e-6)


def test_gelu_pattern_with_another_reader_is_left_alone():
    b = OnnxBuilder(opset=17)
    x = b.node("Relu", ["input"])
    d = b.node("Div", [x, b.const(np.sqrt(2.0))])
    erf = b.node("Erf", [d])
    out = b.node("Mul", [b.node("Mul", [x, b.node("Add", [erf, b.const(1.0)])]), b.const(0.5)])
    model = b.model((4, 8), b.node("Add", [out, erf]), (4, 8))     # erf is read twice
    assert "gelu" not in optimize(lw.from_onnx(model)).op_counts()


def test_sink_reshapes_keeps_values_and_moves_bias_into_the_dense_kernel():
    b = OnnxBuilder(opset=17)
    y = b.matmul_add("input", 16, 8)                                 # MatMul on 3-d + Add(bias)
    out = b.node("Relu", [b.node("Add", [y, "input2"])])
    model = b.model((2, 5, 16), out, (2, 5, 8))
    from onnx import TensorProto, helper
    model.graph.input.append(helper.make_tensor_value_info("input2", TensorProto.FLOAT, [2, 5, 8]))
    g = optimize(lw.from_onnx(model))
    kernels = [tuple(n.op_type for n in grp.nodes) for grp in fuse_operators(g) if grp.kind != "alias"]
    assert kernels == [("dense_kn", "add", "relu")], kernels
    exe = lw.compile(lw.from_onnx(model), progress=False)
    rng = np.random.default_rng(0)
    feed = {"input": rng.standard_normal((2, 5, 16)).astype(np.float32),
            "input2": rng.standard_normal((2, 5, 8)).astype(np.float32)}
    np.testing.assert_allclose(exe.run(feed)[0], _ort(model, feed)[0], rtol=1e-5, atol=1e-5)


def test_sink_reshapes_ends_when_both_operands_could_move():
    """mul(reshape(a), b) with b full-size and computed: b gets a view, and that view is never sunk
    back (it used to move the op up and down forever)."""
    b = OnnxBuilder(opset=17)
    a = b.node("Relu", ["input"])                                            # [2, 1, 3, 4]
    flat = b.node("Reshape", [a, b.const([2, 3, 4], np.int64)])
    other = b.node("Neg", ["input2"])                                        # [2, 3, 4], computed
    out = b.node("Mul", [flat, other])
    model = b.model((2, 1, 3, 4), out, (2, 3, 4))
    from onnx import TensorProto, helper
    model.graph.input.append(helper.make_tensor_value_info("input2", TensorProto.FLOAT, [2, 3, 4]))
    exe = lw.compile(lw.from_onnx(model), progress=False)
    rng = np.random.default_rng(0)
    feed = {"input": rng.standard_normal((2, 1, 3, 4)).astype(np.float32),
            "input2": rng.standard_normal((2, 3, 4)).astype(np.float32)}
    np.testing.assert_allclose(exe.run(feed)[0], _ort(model, feed)[0], rtol=1e-6)
