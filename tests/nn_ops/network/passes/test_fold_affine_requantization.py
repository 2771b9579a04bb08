"""DequantizeLinear -> affine float ops by constants -> QuantizeLinear becomes one ``rescale`` multiply-add
(``passes/fold_affine_requantization``), equal to ONNX's reference on every 8-bit input."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.nn_ops.network.passes import fold_affine_requantization, optimize

pytestmark = pytest.mark.vector_width     # the multiply-add fused or not by the host's instructions


def _chain(ops, in_dtype=np.uint8, out_dtype=np.uint8, channels=16, seed=0):
    """x [1, C, 16, 16] of ``in_dtype`` -> DequantizeLinear -> ``ops`` (op type, constant of shape
    [1, C, 1, 1], whether the value is the first operand) -> QuantizeLinear to ``out_dtype``."""
    rng = np.random.default_rng(seed)
    inits = [numpy_helper.from_array(np.array(0.037, np.float32), "s0"),
             numpy_helper.from_array(np.array(7 if in_dtype == np.uint8 else -3, in_dtype), "z0"),
             numpy_helper.from_array(np.array(0.051, np.float32), "s1"),
             numpy_helper.from_array(np.array(121 if out_dtype == np.uint8 else 2, out_dtype), "z1")]
    nodes = [helper.make_node("DequantizeLinear", ["x", "s0", "z0"], ["v0"])]
    for k, (op, value_first) in enumerate(ops):
        c = rng.uniform(0.3, 1.7, (1, channels, 1, 1)).astype(np.float32) * rng.choice([-1, 1], (1, channels, 1, 1))
        inits.append(numpy_helper.from_array(c.astype(np.float32), f"c{k}"))
        operands = [f"v{k}", f"c{k}"] if value_first else [f"c{k}", f"v{k}"]
        nodes.append(helper.make_node(op, operands, [f"v{k + 1}"]))
    nodes.append(helper.make_node("QuantizeLinear", [f"v{len(ops)}", "s1", "z1"], ["y"]))
    elem = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}
    graph = helper.make_graph(nodes, "chain", [helper.make_tensor_value_info("x", elem[in_dtype], [1, channels, 16, 16])],
                              [helper.make_tensor_value_info("y", elem[out_dtype], [1, channels, 16, 16])], inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _every_value(dtype, channels=16):
    """Each channel's 16 x 16 map holds all 256 values of ``dtype`` (in a different order per channel)."""
    info = np.iinfo(dtype)
    rng = np.random.default_rng(1)
    return np.stack([rng.permutation(np.arange(info.min, info.max + 1)).reshape(16, 16)
                     for _ in range(channels)])[None].astype(dtype)


@pytest.mark.parametrize("ops", [[("Mul", True), ("Add", True)], [("Add", False), ("Div", True), ("Sub", False)],
                                 [("Sub", True), ("Mul", False)], []])
@pytest.mark.parametrize("in_dtype,out_dtype", [(np.uint8, np.uint8), (np.int8, np.uint8), (np.uint8, np.int8)])
def test_an_affine_chain_between_8_bit_values_is_one_rescale_equal_to_the_reference_on_every_input(
        ops, in_dtype, out_dtype):
    from onnx.reference import ReferenceEvaluator
    model = _chain(ops, in_dtype, out_dtype)
    graph = lw.from_onnx(model)
    assert optimize(graph).op_counts().get("rescale") == 1 and "quantize" not in optimize(graph).op_counts()
    (node,) = [n for n in optimize(graph).nodes if n.op_type == "rescale"]
    assert node.attrs["int32_range"]          # (multipliers and offsets far below 2**31 / 255)
    feed = {"x": _every_value(in_dtype)}
    (got,) = lw.compile(graph, progress=False).run(feed)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feed)[0])


@pytest.mark.parametrize("ops", [[("Div", False)], [("Relu", None)]])
def test_a_chain_that_is_not_affine_in_the_value_stays(ops):
    model = _chain([op for op in ops if op[0] != "Relu"])
    if ops[0][0] == "Relu":     # DequantizeLinear -> Relu -> QuantizeLinear
        g = model.graph
        g.node.insert(1, helper.make_node("Relu", ["v0"], ["r0"]))
        g.node[-1].input[0] = "r0"
    graph = lw.from_onnx(model)
    counts = fold_affine_requantization(graph.copy()).op_counts()
    assert "rescale" not in counts and counts["quantize"] == 1


def test_a_chain_whose_inner_value_is_read_elsewhere_stays():
    model = _chain([("Mul", True)])
    model.graph.output.append(helper.make_tensor_value_info("v1", TensorProto.FLOAT, [1, 16, 16, 16]))
    graph = lw.from_onnx(model)
    assert "rescale" not in fold_affine_requantization(graph.copy()).op_counts()


def test_a_channel_whose_first_guess_misses_takes_a_nudged_multiplier_and_offset():
    """MobileNetV2's last batch norm (QDQ), one channel: the chain's exact slope and offset put inputs 60
    and 237 on 64.5 and 251.5, which ONNX's float32 steps round up and down; a multiplier a few steps
    smaller and a larger offset give both."""
    from onnx.reference import ReferenceEvaluator
    inits = {"s0": np.float32(0.089604564), "z0": np.uint8(131), "bn_s": np.full((1, 1, 1, 1), 1.30802, np.float32),
             "bn_b": np.full((1, 1, 1, 1), 0.05672165, np.float32), "s1": np.float32(0.11093695), "z1": np.uint8(139)}
    nodes = [helper.make_node("DequantizeLinear", ["x", "s0", "z0"], ["v0"]),
             helper.make_node("Mul", ["v0", "bn_s"], ["v1"]), helper.make_node("Add", ["v1", "bn_b"], ["v2"]),
             helper.make_node("QuantizeLinear", ["v2", "s1", "z1"], ["y"])]
    graph = helper.make_graph(nodes, "bn", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 1, 16, 16])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 1, 16, 16])],
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])
    folded = fold_affine_requantization(lw.from_onnx(model))
    (node,) = [n for n in folded.nodes if n.op_type == "rescale"]
    slope = np.float32(np.float64(inits["s0"]) * np.float64(inits["bn_s"].item()) / np.float64(inits["s1"]))
    assert folded.initializers[node.inputs[1]].item() != slope
    feed = {"x": np.arange(256, dtype=np.uint8).reshape(1, 1, 16, 16)}
    (got,) = lw.compile(lw.from_onnx(model), progress=False).run(feed)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feed)[0])
