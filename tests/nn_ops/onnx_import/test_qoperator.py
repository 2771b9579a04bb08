"""onnxruntime's ``com.microsoft`` quantized operators (``converters/qoperator.py``), op by op against
onnxruntime (within one quantization step: it computes some through lookup tables), and models in the
QOperator format as its static quantizer writes them."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.nn_ops.testing import model_zoo

ort = pytest.importorskip("onnxruntime")

pytestmark = pytest.mark.vector_width


def _model(nodes, inputs, output, inits):
    graph = helper.make_graph(nodes, "qop", [helper.make_tensor_value_info(n, TensorProto.UINT8, s) for n, s in inputs],
                              [helper.make_tensor_value_info(output[0], output[1], output[2])],
                              [numpy_helper.from_array(np.asarray(v), n) for n, v in inits])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13), helper.make_opsetid("com.microsoft", 1)],
                             ir_version=8)


def _compare(model, feed, steps=1):
    got = lw.compile(lw.from_onnx(model), progress=False).run(feed)[0]
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
    assert got.dtype == want.dtype and got.shape == want.shape
    if got.dtype == np.uint8:
        assert np.abs(got.astype(int) - want.astype(int)).max() <= steps
    else:
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5 * float(np.abs(want).max()))


SCALES = [("sa", np.float32(0.05)), ("za", np.uint8(120)), ("sb", np.float32(0.03)), ("zb", np.uint8(90)),
          ("sy", np.float32(0.08)), ("zy", np.uint8(128))]


@pytest.mark.parametrize("op", ["QLinearAdd", "QLinearMul"])
def test_binary_ops_broadcast_and_match_onnxruntime(op):
    node = helper.make_node(op, ["a", "sa", "za", "b", "sb", "zb", "sy", "zy"], ["y"], domain="com.microsoft")
    model = _model([node], [("a", [2, 3, 4, 5]), ("b", [1, 3, 1, 5])], ("y", TensorProto.UINT8, [2, 3, 4, 5]), SCALES)
    rng = np.random.default_rng(0)
    _compare(model, {"a": rng.integers(0, 256, (2, 3, 4, 5)).astype(np.uint8),
                     "b": rng.integers(0, 256, (1, 3, 1, 5)).astype(np.uint8)})


@pytest.mark.parametrize("op,attrs", [("QLinearGlobalAveragePool", {}), ("QLinearLeakyRelu", {"alpha": 0.2}),
                                      ("QLinearSigmoid", {}),
                                      ("QLinearAveragePool", {"kernel_shape": [2, 2], "strides": [2, 2]})])
def test_unary_ops_match_onnxruntime(op, attrs):
    node = helper.make_node(op, ["a", "sa", "za", "sy", "zy"], ["y"], domain="com.microsoft", **attrs)
    out = {"QLinearGlobalAveragePool": [1, 4, 1, 1], "QLinearAveragePool": [1, 4, 3, 3]}.get(op, [1, 4, 6, 6])
    model = _model([node], [("a", [1, 4, 6, 6])], ("y", TensorProto.UINT8, out),
                   [SCALES[0], SCALES[1], SCALES[4], SCALES[5]])
    _compare(model, {"a": np.random.default_rng(1).integers(0, 256, (1, 4, 6, 6)).astype(np.uint8)})


def test_qlinear_concat_requantizes_each_piece():
    node = helper.make_node("QLinearConcat", ["sy", "zy", "a", "sa", "za", "b", "sb", "zb"], ["y"],
                            domain="com.microsoft", axis=1)
    model = _model([node], [("a", [1, 2, 3]), ("b", [1, 4, 3])], ("y", TensorProto.UINT8, [1, 6, 3]), SCALES)
    rng = np.random.default_rng(2)
    _compare(model, {"a": rng.integers(0, 256, (1, 2, 3)).astype(np.uint8),
                     "b": rng.integers(0, 256, (1, 4, 3)).astype(np.uint8)})


@pytest.mark.parametrize("quantized_output", [True, False])
def test_qgemm_is_the_exact_integer_product_scaled(quantized_output):
    rng = np.random.default_rng(3)
    w = rng.integers(-127, 128, (6, 16)).astype(np.int8)           # [N, K]: transB=1, as the quantizer writes
    inits = [("sa", np.float32(0.05)), ("za", np.uint8(120)), ("w", w), ("sw", (rng.random(6) * 0.02).astype(np.float32)),
             ("zw", np.zeros(6, np.int8)), ("c", rng.integers(-300, 300, 6).astype(np.int32))]
    inputs = ["a", "sa", "za", "w", "sw", "zw", "c"]
    if quantized_output:
        inits += [("sy", np.float32(0.1)), ("zy", np.uint8(128))]
        inputs += ["sy", "zy"]
    node = helper.make_node("QGemm", inputs, ["y"], domain="com.microsoft", transB=1, alpha=1.0)
    model = _model([node], [("a", [3, 16])], ("y", TensorProto.UINT8 if quantized_output else TensorProto.FLOAT, [3, 6]),
                   inits)
    _compare(model, {"a": rng.integers(0, 256, (3, 16)).astype(np.uint8)})


def test_an_unknown_operator_of_the_domain_is_named():
    node = helper.make_node("QLinearSoftmax", ["a", "sa", "za", "sy", "zy"], ["y"], domain="com.microsoft")
    model = _model([node], [("a", [2, 4])], ("y", TensorProto.UINT8, [2, 4]), [SCALES[0], SCALES[1], SCALES[4], SCALES[5]])
    with pytest.raises(lw.OnnxImportError, match="com.microsoft.QLinearSoftmax.*custom domain"):
        lw.from_onnx(model)


def test_a_qoperator_cnn_from_onnxruntimes_quantizer_agrees_with_it():
    pytest.importorskip("onnxruntime.quantization")
    from loopweave.nn_ops.testing.qdq_models import static_qdq
    rng = np.random.default_rng(4)
    samples = [{"input": rng.standard_normal((1, 3, 16, 16)).astype(np.float32)} for _ in range(4)]
    model = static_qdq(model_zoo.small_cnn(), samples, qoperator=True)
    domains = {(n.domain, n.op_type) for n in model.graph.node}
    assert ("com.microsoft", "QLinearAdd") in domains and ("com.microsoft", "QGemm") in domains
    exe = lw.compile(lw.from_onnx(model), progress=False)
    for feed in samples[:2]:
        got = exe.run(feed)[0]
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)[0]
        # (onnxruntime's u8 x s8 product saturates on AVX2 without VNNI: a few steps apart there)
        np.testing.assert_allclose(got, want, atol=0.02 * float(np.abs(want).max()), rtol=0)
        assert got.argmax() == want.argmax()
