"""QDQ models (onnxruntime's static quantizer) import their Conv and MatMul patterns as integer operators
(``onnx_import/qdq.py``): the convolutions become int8 products, and the outputs agree with onnxruntime,
which runs the same patterns as integer operators."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.nn_ops.onnx_import.qdq import qdq_to_qlinear
from loopweave.nn_ops.testing import model_zoo

ort = pytest.importorskip("onnxruntime")
pytest.importorskip("onnxruntime.quantization")
from loopweave.nn_ops.testing.qdq_models import static_qdq  # noqa: E402

pytestmark = pytest.mark.vector_width     # int8 products by the host's instructions: rerun as an AVX2 host


def _samples(shape, n=6, seed=0):
    rng = np.random.default_rng(seed)
    return [{"input": rng.standard_normal(shape).astype(np.float32)} for _ in range(n)]


def _ort(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.mark.parametrize("per_channel", [True, False])
def test_a_qdq_cnn_runs_its_convolutions_as_int8_products_and_matches_onnxruntime(per_channel):
    samples = _samples((1, 3, 16, 16))
    model = static_qdq(model_zoo.small_cnn(), samples, per_channel=per_channel)
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    gemms = sum(n.op_type == "Gemm" for n in model.graph.node)
    graph = lw.from_onnx(model)
    counts = graph.op_counts()
    assert counts.get("qconv2d") == convs and counts.get("matmul_u8s8") == gemms == 1 and \
        not {"conv2d", "dense", "gemm", "matmul"} & set(counts)
    exe = lw.compile(graph, progress=False)
    for feed in samples[:3]:
        got, want = exe.run(feed)[0], _ort(model, feed)[0]
        np.testing.assert_allclose(got, want, atol=1e-5 * float(np.abs(want).max()), rtol=0)
        assert got.argmax() == want.argmax()


def _one_conv(bias_scale_factor=1.0, quantized_output=True):
    """x_q -> DQ -> Conv(DQ(w_q), DQ(b_q)) -> Q: the pattern as the quantizer writes it."""
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (8, 4, 3, 3)).astype(np.int8)
    ws = (rng.random(8) * 0.02 + 0.005).astype(np.float32)
    xs, ys = np.float32(0.05), np.float32(0.2)
    b = rng.integers(-500, 500, 8).astype(np.int32)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("x_s", np.array(xs)), ("x_zp", np.array(128, np.uint8)), ("w_q", w), ("w_s", ws),
        ("w_zp", np.zeros(8, np.int8)), ("b_q", b), ("b_s", (xs * ws * np.float32(bias_scale_factor))),
        ("b_zp", np.zeros(8, np.int32)), ("y_s", np.array(ys)), ("y_zp", np.array(100, np.uint8))]]
    nodes = [helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_zp"], ["x"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["w"], axis=0),
             helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_zp"], ["b"], axis=0),
             helper.make_node("Conv", ["x", "w", "b"], ["y"], pads=[1, 1, 1, 1])]
    if quantized_output:
        nodes.append(helper.make_node("QuantizeLinear", ["y", "y_s", "y_zp"], ["y_q"]))
        out = helper.make_tensor_value_info("y_q", TensorProto.UINT8, [1, 8, 6, 6])
    else:
        out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 8, 6, 6])
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x_q", TensorProto.UINT8, [1, 4, 6, 6])],
                              [out], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def test_one_qdq_conv_is_one_qlinear_conv_equal_to_onnxruntime_to_the_step():
    model = _one_conv()
    rewritten, _ = qdq_to_qlinear(model)
    assert [n.op_type for n in rewritten.graph.node] == ["QLinearConv"]
    assert [n.op_type for n in model.graph.node].count("Conv") == 1        # the input is not modified
    feed = {"x_q": np.random.default_rng(5).integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)}
    got = lw.compile(lw.from_onnx(model), progress=False).run(feed)[0]
    want = _ort(model, feed)[0]
    assert got.dtype == np.uint8
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1     # a rounding tie at most


@pytest.mark.parametrize("case", ["bias of another scale", "float output"])
def test_patterns_that_are_not_the_integer_operator_stay_float(case):
    model = _one_conv(bias_scale_factor=1.5) if case == "bias of another scale" else _one_conv(quantized_output=False)
    rewritten, _ = qdq_to_qlinear(model)
    assert "QLinearConv" not in [n.op_type for n in rewritten.graph.node]
    feed = {"x_q": np.random.default_rng(6).integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)}
    got = lw.compile(lw.from_onnx(model), progress=False).run(feed)[0]
    want = _ort(model, feed)[0]
    if got.dtype == np.uint8:
        assert np.abs(got.astype(int) - want.astype(int)).max() <= 1
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


def test_a_qdq_matmul_becomes_a_qlinear_matmul():
    rng = np.random.default_rng(9)
    inits = [numpy_helper.from_array(a, n) for n, a in [
        ("a_s", np.array(0.03, np.float32)), ("a_zp", np.array(120, np.uint8)),
        ("b_q", rng.integers(-127, 128, (32, 16)).astype(np.int8)), ("b_s", np.array(0.01, np.float32)),
        ("b_zp", np.array(0, np.int8)), ("y_s", np.array(0.1, np.float32)), ("y_zp", np.array(128, np.uint8))]]
    nodes = [helper.make_node("DequantizeLinear", ["a_q", "a_s", "a_zp"], ["a"]),
             helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_zp"], ["b"]),
             helper.make_node("MatMul", ["a", "b"], ["y"]),
             helper.make_node("QuantizeLinear", ["y", "y_s", "y_zp"], ["y_q"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("a_q", TensorProto.UINT8, [5, 32])],
                              [helper.make_tensor_value_info("y_q", TensorProto.UINT8, [5, 16])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    rewritten, _ = qdq_to_qlinear(model)
    assert [n.op_type for n in rewritten.graph.node] == ["QLinearMatMul"]
    feed = {"a_q": rng.integers(0, 256, (5, 32)).astype(np.uint8)}
    graph = lw.from_onnx(model)
    got = lw.compile(graph, progress=False).run(feed)[0]
    want = _ort(model, feed)[0]
    assert np.abs(got.astype(int) - want.astype(int)).max() <= 1

    def float64_values(g):
        return [v for v in g.values.values() if v.dtype == "float64"]
    # (requantized in float32, within a step; the model's own QLinearMatMul in float64, to the bit)
    assert not float64_values(graph) and float64_values(lw.from_onnx(rewritten))
    from onnx.reference import ReferenceEvaluator
    exact = lw.compile(lw.from_onnx(rewritten), progress=False).run(feed)[0]
    np.testing.assert_array_equal(exact, ReferenceEvaluator(rewritten).run(None, feed)[0])
    assert np.abs(got.astype(int) - exact.astype(int)).max() <= 1


def test_a_qdq_mobilenet_style_network_runs_int8_convs_and_depthwise_within_a_step_of_the_exact_reference():
    """EfficientNet-Lite's inverted residuals (1x1 expand, depthwise, squeeze-excitation, 1x1 project,
    residual adds) quantized by onnxruntime: the convs and depthwise convs are integer kernels, and the
    output is that of ONNX's reference evaluator of the QDQ model to one quantization step."""
    from onnx.reference import ReferenceEvaluator
    from loopweave.nn_ops.network.passes import optimize
    small = dict(model_zoo.SMALL["efficientnet_lite"], size=32, stages=((1, 3, 1, 16, 1), (6, 3, 2, 24, 2)))
    model = static_qdq(model_zoo.efficientnet_lite(**small), _samples((1, 3, 32, 32), 3))
    graph = lw.from_onnx(model)
    counts = optimize(graph).op_counts()
    assert counts.get("qdepthwise_blocked") == sum(n.op_type == "Conv" and n.attribute and any(
        a.name == "group" and a.i > 1 for a in n.attribute) for n in model.graph.node) and counts.get("qconv2d_blocked")
    step = [n for n in model.graph.node if n.op_type == "QuantizeLinear"][-1].input[1]
    step = float(next(numpy_helper.to_array(t) for t in model.graph.initializer if t.name == step))
    reference = ReferenceEvaluator(_opset(model, 21))
    exe = lw.compile(graph, progress=False)
    for feed in _samples((1, 3, 32, 32), 2, seed=1):
        got, want = exe.run(feed)[0], reference.run(None, feed)[0]
        assert np.abs(got - want).max() <= step * 1.0001
        assert got.argmax() == want.argmax()


def _opset(model, version: int):
    """A copy of ``model`` with its default opset at ``version`` (the reference evaluator's
    DequantizeLinear starts at 19)."""
    import onnx
    copy = onnx.ModelProto.FromString(model.SerializeToString())
    for imp in copy.opset_import:
        if imp.domain in ("", "ai.onnx"):
            imp.version = version
    return copy


def _one_gemm(trans_b=1, alpha=1.0, per_channel=True):
    """x_q -> DQ -> Gemm(DQ(w_q), DQ(b_q)) -> Q -> DQ: a classifier's last layer as the quantizer writes it."""
    rng = np.random.default_rng(11)
    n, k = 24, 40
    w = rng.integers(-127, 128, (n, k) if trans_b else (k, n)).astype(np.int8)
    ws = (rng.random(n) * 0.02 + 0.005).astype(np.float32) if per_channel else np.array(0.01, np.float32)
    xs, ys = np.float32(0.04), np.float32(0.3)
    inits = [numpy_helper.from_array(a, name) for name, a in [
        ("x_s", np.array(xs)), ("x_zp", np.array(110, np.uint8)), ("w_q", w), ("w_s", ws),
        ("w_zp", np.zeros(ws.shape, np.int8)), ("b_q", rng.integers(-3000, 3000, n).astype(np.int32)),
        ("b_s", (xs * ws).astype(np.float32)), ("b_zp", np.zeros(ws.shape, np.int32)),
        ("y_s", np.array(ys)), ("y_zp", np.array(120, np.uint8))]]
    nodes = [helper.make_node("DequantizeLinear", ["x_q", "x_s", "x_zp"], ["x"]),
             helper.make_node("DequantizeLinear", ["w_q", "w_s", "w_zp"], ["w"], axis=0 if trans_b else 1),
             helper.make_node("DequantizeLinear", ["b_q", "b_s", "b_zp"], ["b"], axis=0),
             helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=trans_b, alpha=alpha),
             helper.make_node("QuantizeLinear", ["y", "y_s", "y_zp"], ["y_q"]),
             helper.make_node("DequantizeLinear", ["y_q", "y_s", "y_zp"], ["out"])]
    graph = helper.make_graph(nodes, "qdq", [helper.make_tensor_value_info("x_q", TensorProto.UINT8, [2, k])],
                              [helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, n])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


@pytest.mark.parametrize("trans_b, per_channel", [(1, True), (0, True), (1, False)])
def test_a_qdq_gemm_becomes_qgemm_an_int8_product_within_a_step_of_the_reference(trans_b, per_channel):
    from onnx.reference import ReferenceEvaluator
    model = _one_gemm(trans_b, per_channel=per_channel)
    rewritten, _ = qdq_to_qlinear(model)
    assert [(n.domain, n.op_type) for n in rewritten.graph.node] == [("com.microsoft", "QGemm"),
                                                                      ("", "DequantizeLinear")]
    graph = lw.from_onnx(model)
    counts = graph.op_counts()
    assert counts.get("matmul_u8s8") == 1 and not {"dense", "matmul", "gemm"} & set(counts)
    feed = {"x_q": np.random.default_rng(12).integers(0, 256, (2, 40)).astype(np.uint8)}
    got = lw.compile(graph, progress=False).run(feed)[0]
    for want in (ReferenceEvaluator(_opset(model, 21)).run(None, feed)[0], _ort(model, feed)[0]):
        assert np.abs(got - want).max() <= 0.3 * 1.0001                 # one step of y_s at most


def test_a_gemm_the_integer_operator_does_not_compute_stays_float():
    rewritten, _ = qdq_to_qlinear(_one_gemm(alpha=0.5))
    assert "Gemm" in [n.op_type for n in rewritten.graph.node]
    assert "QGemm" not in [n.op_type for n in rewritten.graph.node]


def test_a_qdq_conv_requantizes_in_float32_a_qlinear_conv_of_the_model_in_float64():
    """A QDQ conv's reference is float32 arithmetic (within a step is what it promises); a QLinearConv
    written in the model has ONNX's exact float64 requantization, kept to the bit."""
    model = _one_conv()
    rewritten, outputs = qdq_to_qlinear(model)
    assert outputs == {"y_q"}
    for source, dtype in ((model, np.float32), (rewritten, np.float64)):
        graph = lw.from_onnx(source)
        conv = next(n for n in graph.nodes if n.op_type == "qconv2d")
        assert graph.initializers[conv.inputs[3]].dtype == dtype
    feed = {"x_q": np.random.default_rng(5).integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)}
    from onnx.reference import ReferenceEvaluator
    exact = lw.compile(lw.from_onnx(rewritten), progress=False).run(feed)[0]
    np.testing.assert_array_equal(exact, ReferenceEvaluator(rewritten).run(None, feed)[0])
    got = lw.compile(lw.from_onnx(model), progress=False).run(feed)[0]
    assert np.abs(got.astype(int) - exact.astype(int)).max() <= 1
