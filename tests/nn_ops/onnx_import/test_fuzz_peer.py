"""The fuzzer's comparison with onnxruntime (nn_ops/testing/fuzz.py, run in its child process) can
fail: outputs that differ are 'wrong', a mutant onnxruntime refuses naming the mutated attribute is
'accepts_invalid'."""
import numpy as np
import pytest

pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

from loopweave.nn_ops.testing import fuzz  # noqa: E402


@pytest.fixture(scope="module")
def peer_verdict():
    space = {"np": np}
    exec(fuzz._PEER, space)
    return space["peer_verdict"]


def _relu():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 3])
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model.SerializeToString()


def test_agreeing_outputs_are_ok(peer_verdict):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    assert peer_verdict(_relu(), {"x": x}, [np.maximum(x, 0)], "")[0] == "ok"
    assert peer_verdict(_relu(), {"x": x}, [np.maximum(x, 0) * (1 + 1e-6)], "")[0] == "ok"    # float32 rounding


@pytest.mark.parametrize("change", [lambda y: y + 1e-2, lambda y: y[:1], lambda y: y.astype(np.float64),
                                    lambda y: np.where(y == 0, np.nan, y)])
def test_differing_outputs_are_wrong(peer_verdict, change):
    x = np.arange(6, dtype=np.float32).reshape(2, 3) - 3
    assert peer_verdict(_relu(), {"x": x}, [change(np.maximum(x, 0))], "")[0] == "wrong"


def test_a_refused_attribute_that_loopweave_ran_is_flagged(peer_verdict):
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 3, 3])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, None)
    w = helper.make_tensor("w", TensorProto.FLOAT, [1, 1, 3, 3], np.ones(9, np.float32))
    node = helper.make_node("ConvTranspose", ["x", "w"], ["y"], strides=[2, 2], output_padding=[2, 2])
    graph = helper.make_graph([node], "g", [x], [y], initializer=[w])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    feeds = {"x": np.ones((1, 1, 3, 3), np.float32)}
    verdict, detail = peer_verdict(model.SerializeToString(), feeds, [np.zeros((1, 1, 9, 9), np.float32)],
                                   "output_padding")
    assert verdict == "accepts_invalid" and "output_padding" in detail
    # refused for another reason than the mutated attribute: not loopweave's fault
    assert peer_verdict(model.SerializeToString(), feeds, [np.zeros((1, 1, 9, 9), np.float32)], "group")[0] == "ok"


def test_where_onnxruntime_departs_from_the_reference_the_reference_decides(peer_verdict):
    """A causal mask: onnxruntime writes -FLT_MAX into the masked scores, ONNX's reference -inf."""
    from loopweave.nn_ops.testing.conformance import as_array, collect_cases
    case = next((c for c in collect_cases()
                 if c.name == "test_attention_4d_with_past_and_present_qk_matmul_bias_4d_mask_causal"), None)
    if case is None:
        pytest.skip("this onnx has no such backend case")
    inits = {t.name for t in case.model.graph.initializer}
    names = [i.name for i in case.model.graph.input if i.name not in inits]
    feeds = {n: as_array(a) for n, a in zip(names, case.data_sets[0][0])}
    reference = [as_array(a) for a in case.data_sets[0][1]]
    assert peer_verdict(case.model.SerializeToString(), feeds, reference, "")[0] == "ok"
    off = [reference[0] + 1.0] + reference[1:]
    assert peer_verdict(case.model.SerializeToString(), feeds, off, "")[0] == "wrong"
