"""QuantizeLinear(DequantizeLinear(a) + DequantizeLinear(b)) becomes one ``rescale_add``
(``passes/fold_quantized_add``), equal to ONNX's reference on every pair of 8-bit inputs."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.nn_ops.network.passes import fold_quantized_add, optimize

pytestmark = pytest.mark.vector_width     # the multiply-adds fused or not by the host's instructions

ELEM = {np.uint8: TensorProto.UINT8, np.int8: TensorProto.INT8}


def _add(sa, za, sb, zb, sy, zy, b_shape=(1, 16, 64, 64)):
    """a [1, 16, 64, 64], b (``b_shape``): each dequantized, added, quantized; a zero point's dtype is its
    tensor's."""
    inits = [numpy_helper.from_array(np.asarray(v), k) for k, v in
             dict(sa=np.float32(sa), za=za, sb=np.float32(sb), zb=zb, sy=np.float32(sy), zy=zy).items()]
    nodes = [helper.make_node("DequantizeLinear", ["a", "sa", "za"], ["da"]),
             helper.make_node("DequantizeLinear", ["b", "sb", "zb"], ["db"]),
             helper.make_node("Add", ["da", "db"], ["s"]), helper.make_node("QuantizeLinear", ["s", "sy", "zy"], ["y"])]
    inputs = [helper.make_tensor_value_info("a", ELEM[type(za)], [1, 16, 64, 64]),
              helper.make_tensor_value_info("b", ELEM[type(zb)], list(b_shape))]
    graph = helper.make_graph(nodes, "add", inputs, [helper.make_tensor_value_info("y", ELEM[type(zy)], [1, 16, 64, 64])],
                              inits)
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 21)])


def _every_pair(a_dtype, b_dtype):
    """a and b of [1, 16, 64, 64] holding each of the 65,536 pairs of values once, in a shuffled order."""
    order = np.random.default_rng(0).permutation(1 << 16)
    a, b = (np.iinfo(a_dtype).min + order // 256), (np.iinfo(b_dtype).min + order % 256)
    return {"a": a.astype(a_dtype).reshape(1, 16, 64, 64), "b": b.astype(b_dtype).reshape(1, 16, 64, 64)}


def _run_against_reference(model, feed):
    from onnx.reference import ReferenceEvaluator
    (got,) = lw.compile(lw.from_onnx(model), progress=False).run(feed)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feed)[0])


@pytest.mark.parametrize("za,zb,zy", [(np.uint8(19), np.uint8(4), np.uint8(44)), (np.int8(-3), np.uint8(200), np.uint8(0)),
                                      (np.uint8(128), np.int8(5), np.int8(-7))])
def test_a_quantized_add_is_one_rescale_add_equal_to_the_reference_on_every_pair(za, zb, zy):
    model = _add(0.13102272, za, 0.061259475, zb, 0.01778497 * 8, zy)
    counts = optimize(lw.from_onnx(model)).op_counts()
    assert counts.get("rescale_add") == 1 and not {"add", "quantize", "dequantize"} & set(counts)
    _run_against_reference(model, _every_pair(type(za), type(zb)))


def test_an_add_whose_first_constants_miss_takes_nudged_ones():
    """Scales whose exact slopes and offset put some pairs on a half that ONNX's float32 steps round the
    other way: the constants found are not the first guess, and every pair still matches."""
    sa, za, sb, zb, sy, zy = 0.18342356, np.uint8(208), 0.1252608, np.uint8(161), 0.14860435, np.uint8(139)
    model = _add(sa, za, sb, zb, sy, zy)
    (node,) = [n for n in fold_quantized_add(lw.from_onnx(model)).nodes if n.op_type == "rescale_add"]
    first = tuple(float(np.float32(float(np.float32(s)) / float(np.float32(sy)))) for s in (sa, sb))
    first_offset = float(np.float32(float(zy) - float(za) * float(np.float32(sa)) / float(np.float32(sy))
                                    - float(zb) * float(np.float32(sb)) / float(np.float32(sy))))
    assert (tuple(node.attrs["multipliers"]), node.attrs["offset"]) != (first, first_offset)
    _run_against_reference(model, _every_pair(np.uint8, np.uint8))


def test_an_add_no_constants_match_stays():
    """Scales 0.05, 0.4 and 0.3: sums ONNX's float32 steps put on both sides of a half, which no one
    multiply-add pair near the exact slopes reproduces."""
    model = _add(0.05, np.uint8(100), 0.4, np.uint8(90), 0.3, np.uint8(120))
    counts = fold_quantized_add(lw.from_onnx(model)).op_counts()
    assert "rescale_add" not in counts and counts["add"] == 1


def test_a_broadcast_add_stays():
    model = _add(0.1, np.uint8(3), 0.2, np.uint8(5), 0.3, np.uint8(7), b_shape=(1, 16, 1, 1))
    counts = fold_quantized_add(lw.from_onnx(model)).op_counts()
    assert "rescale_add" not in counts and counts["add"] == 1


def test_an_add_whose_dequantized_operand_is_read_elsewhere_stays():
    model = _add(0.1, np.uint8(3), 0.2, np.uint8(5), 0.3, np.uint8(7))
    model.graph.output.append(helper.make_tensor_value_info("da", TensorProto.FLOAT, [1, 16, 64, 64]))
    counts = fold_quantized_add(lw.from_onnx(model)).op_counts()
    assert "rescale_add" not in counts and counts["add"] == 1


def test_a_residual_add_after_an_int8_conv_joins_its_kernel():
    """x -> QLinearConv 3x3 -> r, r -> QLinearConv 3x3 -> DequantizeLinear, + DequantizeLinear(r), QuantizeLinear
    (16 channels, blocked): the add is the second conv kernel's epilogue (no float map, no kernel of its own),
    equal to ONNX's reference."""
    from onnx.reference import ReferenceEvaluator
    from loopweave.nn_ops.network.passes import fuse_operators
    rng = np.random.default_rng(3)
    inits = dict(xs=np.float32(0.0473), xz=np.uint8(100), w=rng.integers(-128, 128, (16, 16, 3, 3)).astype(np.int8),
                 ws=np.float32(0.004), wz=np.int8(0), ys=np.float32(0.3817), yz=np.uint8(90),
                 b=rng.integers(-3000, 3000, 16).astype(np.int32), s=np.float32(0.2913), z=np.uint8(120))
    nodes = [helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "xs", "xz", "b"], ["r"], pads=[1, 1, 1, 1]),
             helper.make_node("QLinearConv", ["r", "xs", "xz", "w", "ws", "wz", "ys", "yz", "b"], ["c"], pads=[1, 1, 1, 1]),
             helper.make_node("DequantizeLinear", ["c", "ys", "yz"], ["dc"]),
             helper.make_node("DequantizeLinear", ["r", "xs", "xz"], ["dx"]),
             helper.make_node("Add", ["dx", "dc"], ["sum"]), helper.make_node("QuantizeLinear", ["sum", "s", "z"], ["y"])]
    vi = lambda n: helper.make_tensor_value_info(n, TensorProto.UINT8, [1, 16, 9, 9])
    model = helper.make_model(helper.make_graph(nodes, "residual", [vi("x")], [vi("y")],
                                                [numpy_helper.from_array(np.asarray(v), k) for k, v in inits.items()]),
                              opset_imports=[helper.make_opsetid("", 21)])
    graph = lw.from_onnx(model)
    names = [grp.name for grp in fuse_operators(optimize(graph))]
    assert any("qconv2d_blocked" in n and "rescale_add" in n for n in names)
    assert not any(n.startswith(("quantize", "dequantize", "add")) for n in names)
    feed = {"x": rng.integers(0, 256, (1, 16, 9, 9)).astype(np.uint8)}
    (got,) = lw.compile(graph, progress=False).run(feed)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feed)[0])
