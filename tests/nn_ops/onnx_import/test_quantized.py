"""MatMulInteger and QLinearMatMul by a constant weight (the int8 product over packed words, with
the zero points applied after it) against numpy's exact product or ONNX's reference evaluator, and
against onnxruntime where its int8 product is exact on this CPU (``nn_ops/testing/integer_reference.py``)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.nn_ops.testing.integer_reference import exact_reference, onnxruntime_integer_product_is_exact

ort = pytest.importorskip("onnxruntime")

# schedules, layouts and instructions follow the host CPU: .ci/run runs these again as an AVX2 host
pytestmark = pytest.mark.vector_width
_TYPES = {"uint8": TensorProto.UINT8, "int8": TensorProto.INT8, "int32": TensorProto.INT32,
          "float32": TensorProto.FLOAT}


def _model(nodes, inputs, outputs, initializers):
    graph = helper.make_graph(nodes, "q", [helper.make_tensor_value_info(n, _TYPES[d], s) for n, d, s in inputs],
                              [helper.make_tensor_value_info(n, _TYPES[d], s) for n, d, s in outputs],
                              [numpy_helper.from_array(v, n) for n, v in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)


def _ints(rng, dtype, shape):
    info = np.iinfo(dtype)
    return rng.integers(info.min, info.max + 1, shape).astype(dtype)


# (A's dtype, B's dtype, A's zero point: None / "const" / "input", B's zero point: None / "const" /
#  "column", A's shape, K, N)
CASES = [
    ("uint8", "int8", "input", None, (2, 9), 700, 33),          # quantize_dynamic's layer, 3-d A
    ("uint8", "int8", "input", "const", (16,), 64, 40),
    ("uint8", "uint8", "const", "const", (5,), 37, 70),         # K not a multiple of 4: A padded
    ("int8", "int8", None, None, (3, 4), 12, 8),
    ("int8", "uint8", "input", "column", (6,), 130, 65),
    ("uint8", "int8", "const", "column", (1,), 768, 96),
    ("int8", "int8", "const", None, (2, 3), 9, 3),
]


@pytest.mark.parametrize("a_dt,b_dt,a_zp,b_zp,lead,k,n", CASES)
def test_matmul_integer_by_a_constant_weight_is_exact(a_dt, b_dt, a_zp, b_zp, lead, k, n):
    rng = np.random.default_rng(k * n)
    a, b = _ints(rng, a_dt, lead + (k,)), _ints(rng, b_dt, (k, n))
    za = _ints(rng, a_dt, ()) if a_zp else np.zeros((), a_dt)
    zb = _ints(rng, b_dt, (n,) if b_zp == "column" else ()) if b_zp else np.zeros((), b_dt)
    inputs, inits, names = [("a", a_dt, a.shape)], [("b", b)], ["a", "b", "", ""]
    feed = {"a": a}
    if a_zp:
        names[2] = "az"
        (inputs.append(("az", a_dt, [])), feed.__setitem__("az", za)) if a_zp == "input" else inits.append(("az", za))
    if b_zp:
        names[3] = "bz"
        inits.append(("bz", zb))
    while names[-1] == "":
        names.pop()
    model = _model([helper.make_node("MatMulInteger", names, ["y"])], inputs, [("y", "int32", lead + (n,))], inits)
    g = lw.from_onnx(model)
    assert "matmul_u8s8" in [node.op_type for node in g.nodes]
    (got,) = lw.compile(g, progress=False).run(feed)
    want = (a.astype(np.int64) - za.astype(np.int64)) @ (b.astype(np.int64) - zb.astype(np.int64))
    np.testing.assert_array_equal(got, want.astype(np.int32))


def _dynamic_dense(rng, lead, k, n, weight_dtype):
    """A dense layer as onnxruntime's ``quantize_dynamic`` writes it."""
    w = _ints(rng, weight_dtype, (k, n))
    wz = np.array(0 if weight_dtype == "int8" else 128, weight_dtype)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             helper.make_node("MatMulInteger", ["q", "w", "qz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["qs", "ws"], ["scale"]), helper.make_node("Mul", ["accf", "scale"], ["y"])]
    return _model(nodes, [("x", "float32", list(lead) + [k])], [("y", "float32", list(lead) + [n])],
                  [("w", w), ("wz", wz), ("ws", np.array(0.02, np.float32))])


@pytest.mark.parametrize("lead,k,n,weight_dtype", [((128,), 768, 64, "int8"), ((1,), 256, 300, "int8"),
                                                   ((9,), 66, 31, "uint8"), ((2, 5), 64, 40, "int8")])
def test_a_dynamically_quantized_dense_layer_matches_onnxruntime(lead, k, n, weight_dtype):
    """... in one kernel from the product to the scaled floats (the Cast joins across the dtype
    change and, for 3-d activations, past the reshape back from rows)."""
    rng = np.random.default_rng(k)
    model = _dynamic_dense(rng, lead, k, n, weight_dtype)
    x = rng.standard_normal(tuple(lead) + (k,)).astype(np.float32)
    exe = lw.compile(lw.from_onnx(model), progress=False)
    (got,) = exe.run({"x": x})
    np.testing.assert_array_equal(got, exact_reference(model, {"x": x})[0])
    if onnxruntime_integer_product_is_exact(weight_dtype):   # else it may clip pairs of products (module doc)
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"x": x})[0]
        np.testing.assert_allclose(got, want, rtol=1e-6, atol=1e-6)
    assert any(c.ops[:1] == ("matmul_u8s8",) and "cast" in c.ops for c in exe.calls), [c.ops for c in exe.calls]


@pytest.mark.parametrize("a_dt,b_dt", [("uint8", "int8"), ("int8", "int8"), ("uint8", "uint8")])
def test_qlinear_matmul_by_a_constant_weight_matches_onnxruntime(a_dt, b_dt):
    rng = np.random.default_rng(3)
    a, w = _ints(rng, a_dt, (4, 50)), _ints(rng, b_dt, (50, 24))
    inits = [("as", np.array(0.05, np.float32)), ("az", _ints(rng, a_dt, ())), ("w", w),
             ("ws", np.array(0.01, np.float32)), ("wz", _ints(rng, b_dt, ())), ("ys", np.array(0.9, np.float32)),
             ("yz", _ints(rng, a_dt, ()))]
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "w", "ws", "wz", "ys", "yz"], ["y"])
    model = _model([node], [("a", a_dt, a.shape)], [("y", a_dt, [4, 24])], inits)
    g = lw.from_onnx(model)
    assert "matmul_u8s8" in [nd.op_type for nd in g.nodes]
    (got,) = lw.compile(g, progress=False).run({"a": a})
    np.testing.assert_array_equal(got, exact_reference(model, {"a": a})[0])   # requantized in float64, as ONNX's
    if onnxruntime_integer_product_is_exact(b_dt):
        want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"a": a})[0]
        assert np.abs(got.astype(np.int32) - want.astype(np.int32)).max() <= 1     # rounding of .5 in float32 vs 64


def _conv_integer_model(rng, x_dt, w_dt, x_shape, w_shape, attrs, x_zp, w_zp):
    """ConvInteger with x's zero point a graph input ("input"), a constant ("const") or absent, and w's
    one constant, one per output channel ("channel") or absent; the feed and the exact reference."""
    from onnx.reference import ReferenceEvaluator
    x, w = _ints(rng, x_dt, x_shape), _ints(rng, w_dt, w_shape)
    inputs, inits, names, feed = [("x", x_dt, x_shape)], [("w", w)], ["x", "w", "", ""], {"x": x}
    if x_zp:
        names[2] = "xz"
        z = _ints(rng, x_dt, ())
        if x_zp == "input":
            inputs.append(("xz", x_dt, []))
            feed["xz"] = z
        else:
            inits.append(("xz", z))
    if w_zp:
        names[3] = "wz"
        inits.append(("wz", _ints(rng, w_dt, (w_shape[0],) if w_zp == "channel" else ())))
    while names[-1] == "":
        names.pop()
    node = helper.make_node("ConvInteger", names, ["y"], **attrs)
    probe = _model([node], inputs, [("y", "int32", None)], inits)
    probe.graph.output[0].type.tensor_type.ClearField("shape")
    want = ReferenceEvaluator(probe).run(None, feed)[0]
    return _model([node], inputs, [("y", "int32", want.shape)], inits), feed, want


@pytest.mark.parametrize("x_dt,w_dt,x_shape,w_shape,attrs,x_zp,w_zp,op", [
    ("uint8", "int8", (1, 8, 9, 10), (16, 8, 3, 3), dict(pads=[1, 1, 1, 1]), "input", "const", "matmul_u8s8"),
    ("uint8", "uint8", (2, 5, 9, 10), (7, 5, 3, 2), dict(pads=[1, 0, 2, 1], strides=[2, 1]), "input", "channel",
     "matmul_u8s8"),
    ("int8", "int8", (1, 3, 12, 12), (4, 3, 5, 5), dict(dilations=[2, 2], pads=[2, 2, 2, 2]), "const", "const",
     "matmul_u8s8"),
    ("uint8", "int8", (1, 4, 6, 6), (6, 4, 1, 1), {}, None, None, "matmul_u8s8"),
    ("uint8", "int8", (1, 4, 6, 6), (4, 1, 3, 3), dict(group=4, pads=[1, 1, 1, 1]), "input", "const", "conv2d"),
    ("uint8", "uint8", (1, 4, 6, 6), (6, 2, 3, 3), dict(group=2, auto_pad="SAME_UPPER"), "input", "const", "conv2d"),
    ("uint8", "int8", (1, 4, 6, 6), (6, 2, 3, 3), dict(group=2, pads=[1, 1, 1, 1]), "const", "channel", "conv2d"),
    ("int8", "uint8", (2, 3, 7), (5, 3, 3), dict(pads=[1, 1]), "input", "const", "conv2d"),     # 1-d
])
def test_conv_integer_is_exact(x_dt, w_dt, x_shape, w_shape, attrs, x_zp, w_zp, op):
    """One group and a constant weight: the int8 product of the input's patches (padded with x's zero
    point, a run-time value from DynamicQuantizeLinear); grouped: the widened int32 convolution."""
    model, feed, want = _conv_integer_model(np.random.default_rng(len(x_shape) + w_shape[0]), x_dt, w_dt, x_shape,
                                            w_shape, attrs, x_zp, w_zp)
    g = lw.from_onnx(model)
    assert op in [node.op_type for node in g.nodes]
    (got,) = lw.compile(g, progress=False).run(feed)
    np.testing.assert_array_equal(got, want)


def test_conv_integer_refuses_float_operands_by_name():
    from loopweave.errors import OnnxImportError
    node = helper.make_node("ConvInteger", ["x", "w"], ["y"])
    model = _model([node], [("x", "float32", [1, 2, 4, 4])], [("y", "int32", [1, 2, 4, 4])],
                   [("w", np.ones((2, 2, 1, 1), np.float32))])
    with pytest.raises(OnnxImportError, match="int8 or uint8 expected"):
        lw.from_onnx(model)


@pytest.mark.parametrize("axis,per_axis,block", [(1, False, 0), (1, True, 0), (0, True, 0), (0, True, 8)])
def test_a_dequantized_constant_weight_is_folded_at_import(axis, per_axis, block):
    """DequantizeLinear of a constant (quantize_dynamic's embeddings, QDQ weights; per tensor, per axis,
    per block) becomes a float constant, so the product reading it is a dense layer, not a run-time
    matrix."""
    rng = np.random.default_rng(axis + block)
    w = _ints(rng, "int8", (24, 10))
    shape = (3, 10) if block else (w.shape[axis],) if per_axis else ()
    scale = rng.uniform(0.01, 0.1, shape).astype(np.float32)
    zero = _ints(rng, "int8", shape)
    nodes = [helper.make_node("DequantizeLinear", ["w", "s", "z"], ["wf"], axis=axis,
                              **({"block_size": block} if block else {})),
             helper.make_node("MatMul", ["x", "wf"], ["y"])]
    model = _model(nodes, [("x", "float32", [3, 24])], [("y", "float32", [3, 10])],
                   [("w", w), ("s", scale), ("z", zero)])
    model.opset_import[0].version = 21 if block else 13
    g = lw.from_onnx(model)
    assert "dequantize" not in [node.op_type for node in g.nodes]
    x = rng.standard_normal((3, 24)).astype(np.float32)
    (got,) = lw.compile(g, progress=False).run({"x": x})
    # (not onnxruntime: it turns DequantizeLinear -> MatMul into a product of x quantized on the fly)
    if block:
        spread = [np.repeat(p, block, axis=0)[:24] for p in (zero, scale)]
    else:
        along = [-1 if d == axis else 1 for d in range(2)] if per_axis else []
        spread = [zero.reshape(along), scale.reshape(along)]
    want = x @ ((w.astype(np.float32) - spread[0]) * spread[1])
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_conv_integer_of_symbolic_batch_compiles_per_shape_and_says_why():
    """ConvInteger has a symbolic shape rule but no compile-once kernel: the warning names it."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(4)
    w = _ints(rng, "int8", (5, 4, 3, 3))
    node = helper.make_node("ConvInteger", ["x", "w", "xz"], ["y"], pads=[1, 1, 1, 1])
    model = _model([node], [("x", "uint8", ["N", 4, 6, 6])], [("y", "int32", ["N", 5, 6, 6])],
                   [("w", w), ("xz", np.array(7, np.uint8))])
    with pytest.warns(lw.PerShapeCompileWarning, match="ConvInteger: no shape-polymorphic kernel"):
        exe = lw.compile(lw.from_onnx(model), progress=False)
    for batch in (1, 3):
        x = _ints(rng, "uint8", (batch, 4, 6, 6))
        np.testing.assert_array_equal(exe.run({"x": x})[0], ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("x_dt,w_dt,per_channel,bias,attrs", [
    ("uint8", "uint8", False, True, dict(pads=[1, 1, 1, 1])),
    ("uint8", "int8", True, True, dict(strides=[2, 2], pads=[0, 1, 1, 0])),
    ("int8", "int8", True, False, dict(group=3, pads=[1, 1, 1, 1])),
    ("uint8", "int8", False, False, dict(kernel_shape=[1, 1])),
])
def test_qlinear_conv_matches_the_onnx_reference(x_dt, w_dt, per_channel, bias, attrs):
    """The int32 convolution (int8 product or widened), the bias, then requantized in float64 as the
    reference does: exactly its values (onnxruntime rounds in float32: at most 1 apart)."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(len(attrs) + per_channel)
    oc, group = 6, attrs.get("group", 1)
    kernel = attrs.get("kernel_shape", [3, 3])
    x, w = _ints(rng, x_dt, (1, 3 * group if group > 1 else 5, 9, 8)), None
    w = _ints(rng, w_dt, (oc, x.shape[1] // group, *kernel))
    shape = (oc,) if per_channel else ()
    inits = [("xs", np.array(0.05, np.float32)), ("xz", _ints(rng, x_dt, ())), ("w", w),
             ("ws", rng.uniform(0.005, 0.02, shape).astype(np.float32)), ("wz", np.zeros(shape, w_dt)),
             ("ys", np.array(0.7, np.float32)), ("yz", _ints(rng, x_dt, ()))]
    names = ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"]
    if bias:
        inits.append(("b", rng.integers(-2000, 2000, oc).astype(np.int32)))
        names.append("b")
    node = helper.make_node("QLinearConv", names, ["y"], **attrs)
    probe = _model([node], [("x", x_dt, x.shape)], [("y", x_dt, None)], inits)
    probe.graph.output[0].type.tensor_type.ClearField("shape")
    want = ReferenceEvaluator(probe).run(None, {"x": x})[0]
    model = _model([node], [("x", x_dt, x.shape)], [("y", x_dt, want.shape)], inits)
    (got,) = lw.compile(lw.from_onnx(model), progress=False).run({"x": x})
    np.testing.assert_array_equal(got, want)
    if x_dt == "uint8" and w_dt == "uint8" or not per_channel:
        session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
        theirs = session.run(None, {"x": x})[0]
        assert np.abs(got.astype(np.int32) - theirs.astype(np.int32)).max() <= 1


def test_a_qlinear_conv_of_symbolic_batch_compiles_per_shape_and_says_why():
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(0)
    inits = [("xs", np.array(0.05, np.float32)), ("xz", np.array(3, np.uint8)), ("w", _ints(rng, "int8", (4, 2, 3, 3))),
             ("ws", np.array(0.01, np.float32)), ("wz", np.array(0, np.int8)), ("ys", np.array(0.5, np.float32)),
             ("yz", np.array(7, np.uint8))]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1, 1, 1, 1])
    model = _model([node], [("x", "uint8", ["N", 2, 5, 5])], [("y", "uint8", ["N", 4, 5, 5])], inits)
    with pytest.warns(lw.PerShapeCompileWarning, match="QLinearConv: no shape-polymorphic kernel"):
        exe = lw.compile(lw.from_onnx(model), progress=False)
    x = _ints(rng, "uint8", (2, 2, 5, 5))
    np.testing.assert_array_equal(exe.run({"x": x})[0], ReferenceEvaluator(model).run(None, {"x": x})[0])


@pytest.mark.parametrize("op,inputs,extra,attrs,message", [
    ("ConvInteger", ["x", "w"], {"w": np.zeros((4, 3, 3, 3), np.int8)}, {},
     "its 3 channels per group do not make the input's 4"),
    ("ConvInteger", ["x", "w", "xz"], {"w": np.zeros((4, 4, 3, 3), np.int8), "xz": np.array(3, np.int8)}, {},
     "zero point 'xz' of dtype int8 for 'x' of uint8"),
    ("QLinearConv", ["x", "s", "xz", "w", "s", "wz", "s", "xz", "b"],
     {"w": np.zeros((4, 4, 3, 3), np.int8), "s": np.array(0.1, np.float32), "xz": np.array(3, np.uint8),
      "wz": np.array(0, np.int8), "b": np.zeros(3, np.int32)}, {}, r"bias 'b' of int32 \(3,\)"),
    ("QLinearConv", ["x", "s", "xz", "w", "s", "wz", "s", "xz"],
     {"w": np.zeros((4, 2, 3, 3), np.int8), "s": np.array(0.1, np.float32), "xz": np.array(3, np.uint8),
      "wz": np.array(0, np.int8)}, {}, "its 2 channels per group do not make the input's 4"),
])
def test_malformed_integer_convolutions_are_refused_by_name(op, inputs, extra, attrs, message):
    from loopweave.errors import OnnxImportError
    model = _model([helper.make_node(op, inputs, ["y"], **attrs)], [("x", "uint8", [1, 4, 6, 6])],
                   [("y", "uint8" if op == "QLinearConv" else "int32", [1, 4, 4, 4])], list(extra.items()))
    with pytest.raises(OnnxImportError, match=message):
        lw.compile(lw.from_onnx(model), progress=False)


def test_a_dequantize_whose_scale_does_not_fit_is_refused_by_the_op_not_the_fold():
    from loopweave.errors import OnnxImportError
    node = helper.make_node("DequantizeLinear", ["w", "s"], ["y"], axis=1)
    model = _model([node], [], [("y", "float32", [6, 4])],
                   [("w", np.zeros((6, 4), np.int8)), ("s", np.ones(5, np.float32))])
    with pytest.raises(OnnxImportError, match=r"per-axis scale of shape \(5,\) for axis 1"):
        lw.from_onnx(model)


@pytest.mark.parametrize("y_scale,int32_range", [(0.7, True), (0.1, False)])
def test_a_direct_qlinear_conv_saturates_in_int32_where_every_sum_rounds_into_it(y_scale, int32_range):
    """Multipliers 0.05 * 0.01 / 0.7 round every int32 sum into int32; 0.5 * 0.5 / 0.1 = 2.5 do not, and
    the requantization saturates in float64 before its rounding.  Both exact."""
    from onnx.reference import ReferenceEvaluator
    rng = np.random.default_rng(4)
    x_scale, w_scale = (0.05, 0.01) if int32_range else (0.5, 0.5)
    x = _ints(rng, "uint8", (1, 16, 6, 6))
    inits = [("xs", np.array(x_scale, np.float32)), ("xz", np.array(7, np.uint8)), ("w", _ints(rng, "int8", (16, 16, 3, 3))),
             ("ws", np.array(w_scale, np.float32)), ("wz", np.array(0, np.int8)), ("ys", np.array(y_scale, np.float32)),
             ("yz", np.array(120, np.uint8))]
    node = helper.make_node("QLinearConv", ["x", "xs", "xz", "w", "ws", "wz", "ys", "yz"], ["y"], pads=[1, 1, 1, 1])
    model = _model([node], [("x", "uint8", x.shape)], [("y", "uint8", (1, 16, 6, 6))], inits)
    graph = lw.from_onnx(model)
    (conv,) = [n for n in graph.nodes if n.op_type == "qconv2d"]
    assert conv.attrs["int32_range"] is int32_range
    (got,) = lw.compile(graph, progress=False).run({"x": x})
    np.testing.assert_array_equal(got, ReferenceEvaluator(model).run(None, {"x": x})[0])
