"""QLinearConv layers run as the direct int8 conv on the blocked layout (``passes/blocked_qconv.py`` inside
``choose_conv_layout``): uint8 blocks from one layer to the next, no transposes, equal to ONNX's exact
reference on the host and as AVX2 code."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.nn_ops.network.passes import optimize
from loopweave.target import compiling_for, parse_target

pytest.importorskip("onnx.reference")
pytestmark = pytest.mark.vector_width

_TYPES = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8}


def _two_layers(x_dtype: str, per_channel: bool):
    """x [1, 16, 9, 9] -> QLinearConv 3x3 pad 1 (32 channels) -> QLinearConv 3x3 stride 2 pad 1 (16)."""
    rng = np.random.default_rng(1 + per_channel)
    info = np.iinfo(x_dtype)
    inits, nodes, x = [], [], "x"
    for k, (c, oc, stride) in enumerate([(16, 32, 1), (32, 16, 2)]):
        shape = (oc,) if per_channel else ()
        w = rng.integers(-128, 128, (oc, c, 3, 3)).astype(np.int8)
        names = [x] + [f"{n}{k}" for n in ("xs", "xz", "w", "ws", "wz", "ys", "yz", "b")]
        inits += [(names[1], np.array(0.05 + 0.1 * k, np.float32)), (names[2], np.array(info.min + 100, x_dtype)),
                  (names[3], w), (names[4], rng.uniform(0.002, 0.006, shape).astype(np.float32)),
                  (names[5], np.zeros(shape, np.int8)), (names[6], np.array(0.4 + 0.2 * k, np.float32)),
                  (names[7], np.array(info.min + 90, x_dtype)), (names[8], rng.integers(-3000, 3000, oc).astype(np.int32))]
        x = f"y{k}"
        nodes.append(helper.make_node("QLinearConv", names, [x], pads=[1, 1, 1, 1], strides=[stride, stride]))
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info("x", _TYPES[x_dtype], [1, 16, 9, 9])],
                              [helper.make_tensor_value_info(x, _TYPES[x_dtype], [1, 16, 5, 5])],
                              [numpy_helper.from_array(v, n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    feed = {"x": rng.integers(info.min, info.max + 1, (1, 16, 9, 9)).astype(x_dtype)}
    return model, feed


@pytest.mark.parametrize("x_dtype,per_channel", [("uint8", True), ("int8", False)])
def test_qlinear_convs_stay_blocked_and_equal_the_exact_reference(x_dtype, per_channel):
    from onnx.reference import ReferenceEvaluator
    model, feed = _two_layers(x_dtype, per_channel)
    graph = lw.from_onnx(model)
    assert graph.op_counts().get("qconv2d") == 2
    ops = [n.op_type for n in optimize(graph).nodes]
    assert ops == ["to_blocked", "qconv2d_blocked", "qconv2d_blocked", "from_blocked"]
    want = ReferenceEvaluator(model).run(None, feed)[0]
    assert ((want > np.iinfo(x_dtype).min) & (want < np.iinfo(x_dtype).max)).mean() > 0.8     # mostly unsaturated
    (got,) = lw.compile(graph, progress=False).run(feed)
    np.testing.assert_array_equal(got, want)


def test_avx2_code_multiplies_int16_pairs_and_equals_the_exact_reference():
    from onnx.reference import ReferenceEvaluator
    model, feed = _two_layers("uint8", True)
    target = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3")
    with compiling_for(target):
        blocked = [n for n in optimize(lw.from_onnx(model)).nodes if n.op_type == "qconv2d_blocked"]
    assert [n.attrs["pairs"] for n in blocked] == [True, True]
    if not target.runs_here():
        pytest.skip("this CPU cannot run x86-64-v3 code")
    (got,) = lw.compile(lw.from_onnx(model), target=target, progress=False).run(feed)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feed)[0])


def test_a_qlinear_conv_whose_channels_are_not_whole_words_reads_them_padded_with_zero_weights():
    """(an RGB stem: 3 channels padded to one word, blocked in words)"""
    from onnx.reference import ReferenceEvaluator
    model, feed = _two_layers("uint8", False)
    model.graph.input[0].type.tensor_type.shape.dim[1].dim_value = 3
    w = numpy_helper.to_array(model.graph.initializer[2])[:, :3]
    model.graph.initializer[2].CopyFrom(numpy_helper.from_array(np.ascontiguousarray(w), "w0"))
    feed = {"x": feed["x"][:, :3].copy()}
    graph = lw.from_onnx(model)
    assert graph.op_counts().get("qconv2d") == 2 and graph.op_counts().get("pad") == 1
    blocks = [n.attrs["block"] for n in optimize(graph).nodes if n.op_type == "to_blocked"]
    assert blocks == [4]
    (got,) = lw.compile(graph, progress=False).run(feed)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feed)[0])

def test_a_quantized_layer_between_its_dequantize_and_quantize_is_one_kernel():
    """QDQ's conv -> DequantizeLinear -> a batch norm's float scale and shift -> QuantizeLinear: the float
    ops are one multiply-add (``rescale``) in the int8 conv's kernel (its uint8 result is never written),
    equal to ONNX's reference to the bit."""
    from loopweave.nn_ops.network.passes import fuse_operators
    model, feed = _two_layers("uint8", True)
    model.opset_import[0].version = 21         # (the reference evaluator's DequantizeLinear)
    rng = np.random.default_rng(9)
    g = model.graph
    y0 = g.node[0].output[0]
    g.node[0].output[0] = "c0"
    inits = [("s0", np.array(0.4, np.float32)), ("z0", np.array(90, np.uint8)),
             ("bn_s", rng.uniform(0.5, 1.5, (1, 32, 1, 1)).astype(np.float32)),
             ("bn_t", rng.uniform(-2, 2, (1, 32, 1, 1)).astype(np.float32)), ("s1", np.array(0.3, np.float32))]
    g.initializer.extend(numpy_helper.from_array(v, n) for n, v in inits)
    extra = [helper.make_node("DequantizeLinear", ["c0", "s0", "z0"], ["f0"]),
             helper.make_node("Mul", ["f0", "bn_s"], ["f1"]), helper.make_node("Add", ["f1", "bn_t"], ["f2"]),
             helper.make_node("QuantizeLinear", ["f2", "s1", "z0"], [y0])]
    for k, node in enumerate(extra):
        g.node.insert(1 + k, node)
    graph = lw.from_onnx(model)
    groups = [grp.name for grp in fuse_operators(optimize(graph))]
    assert "qconv2d_blocked_rescale" in groups and "quantize" not in groups
    from onnx.reference import ReferenceEvaluator
    want = ReferenceEvaluator(model).run(None, feed)[0]
    (got,) = lw.compile(graph, progress=False).run(feed)
    np.testing.assert_array_equal(got, want)


def test_a_qlinear_conv_of_output_channels_in_no_whole_block_keeps_the_product_of_patches():
    """(12 channels make no block of 8 or 16: the direct kernel would run on NCHW, unscheduled)"""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(2)
    inits = [("xs", np.array(0.05, np.float32)), ("xz", np.array(10, np.uint8)),
             ("w", rng.integers(-128, 128, (12, 16, 3, 3)).astype(np.int8)), ("ws", np.array(0.004, np.float32)),
             ("wz", np.array(0, np.int8)), ("ys", np.array(0.5, np.float32)), ("yz", np.array(20, np.uint8))]
    node = helper.make_node("QLinearConv", ["x"] + [n for n, _ in inits], ["y"],
                            pads=[1, 1, 1, 1])
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("x", TensorProto.UINT8, [1, 16, 6, 6])],
                              [helper.make_tensor_value_info("y", TensorProto.UINT8, [1, 12, 6, 6])],
                              [numpy_helper.from_array(v, n) for n, v in inits])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    imported = lw.from_onnx(model)
    assert "qconv2d" not in imported.op_counts() and imported.op_counts().get("matmul_u8s8") == 1
    feed = {"x": rng.integers(0, 256, (1, 16, 6, 6)).astype(np.uint8)}
    (got,) = lw.compile(imported, progress=False).run(feed)
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, feed)[0])
