"""Attributes outside an operator's contract are refused at import with the node, the attribute and
the allowed range named (nn_ops/onnx_import/validate.py); sizes beyond the memory limit are
refused before anything is allocated; a converter bug is an InternalError naming the node."""
import re

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.errors import InternalError, OnnxImportError  # noqa: E402
from loopweave.nn_ops.network.limits import memory_limit  # noqa: E402


def _one_node(op, x_shape, attrs, inputs=("x",), initializers=(), name="the_node", outputs=("y",), x_type=None):
    """A one-node model; output shapes from ONNX shape inference where it copes, else the input's."""
    node = helper.make_node(op, list(inputs), list(outputs), name=name, **attrs)

    def build(outs):
        graph = helper.make_graph(
            [node], "g", [helper.make_tensor_value_info("x", x_type or TensorProto.FLOAT, x_shape)], outs,
            initializer=[numpy_helper.from_array(a, n) for n, a in initializers])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    try:
        inferred = {vi.name: vi for vi in onnx.shape_inference.infer_shapes(build([])).graph.value_info}
    except Exception:  # noqa: BLE001 - shape inference refuses some of these attributes itself
        inferred = {}
    return build([inferred[o] if o in inferred and inferred[o].type.tensor_type.HasField("shape")
                  else helper.make_tensor_value_info(o, TensorProto.FLOAT, x_shape) for o in outputs])


W = np.zeros((4, 3, 3, 3), np.float32)
BAD = [
    # attributes that once gave a ZeroDivisionError, a 24 GiB allocation, a two-minute pool, an IndexError
    ("AveragePool", dict(kernel_shape=[3, 3], strides=[0, 1], auto_pad="SAME_UPPER"), "strides", r"\[1, "),
    ("Conv", dict(pads=[2 ** 31 - 1, 0, 0, 0]), "pads", "larger than the input"),
    ("AveragePool", dict(kernel_shape=[10 ** 6, 10 ** 6]), "kernel_shape", "must fit the padded input"),
    ("MaxPool", dict(kernel_shape=[2, 2], pads=[2, 0, 0, 0]), "pads", "smaller than its window"),
    ("MaxPool", dict(kernel_shape=[2 ** 31 - 1, 2], auto_pad="SAME_UPPER"), "kernel_shape", "twice the input"),
    ("Conv", dict(dilations=[10 ** 6, 1], auto_pad="SAME_LOWER"), "dilations", "twice the input"),
    ("MaxPool", dict(kernel_shape=[2, 2], dilations=[-1, 1]), "dilations", r"\[1, "),
    ("MaxPool", dict(kernel_shape=[2, 2, 2]), "kernel_shape", "needs 2 values"),
    ("Conv", dict(pads=[-1, 0, 0, 0]), "pads", ">= 0"),
    ("Conv", dict(group=0), "group", ">= 1"),
    ("Conv", dict(group=2), "group", "divide the 3 input channels"),
    ("Softmax", dict(axis=4), "axis", r"\[-4, 3\]"),
    ("ReduceMax", dict(axes=[7]), "axes", r"\[-4, 3\]"),
    ("ReduceMax", dict(axes=[1, -3]), "axes", "repeat"),
    ("Flatten", dict(axis=-6), "axis", r"\[-5, 4\]"),
    ("Transpose", dict(perm=[0, 1, 1, 3]), "perm", "permutation"),
    ("DepthToSpace", dict(blocksize=0), "blocksize", r"\[1, "),
    ("ReduceSum", dict(keepdims=2), "keepdims", "0 or 1"),
    # found by the fuzzer's comparison with onnxruntime, which refuses it
    ("ConvTranspose", dict(strides=[2, 2], output_padding=[2, 0]), "output_padding",
     r"less than max\(stride, dilation\) = 2"),
]


@pytest.mark.parametrize("op, attrs, attribute, allowed", BAD, ids=[f"{b[0]}-{b[2]}" for b in BAD])
def test_out_of_range_attributes_name_node_attribute_and_range(op, attrs, attribute, allowed):
    inputs, inits = ("x",), ()
    if op == "Conv":
        inputs, inits = ("x", "w"), (("w", W),)
    if op == "ConvTranspose":
        inputs, inits = ("x", "w"), (("w", W.transpose(1, 0, 2, 3).copy()),)
    model = _one_node(op, [1, 3, 8, 8], attrs, inputs, inits)
    with pytest.raises(OnnxImportError) as info:
        lw.from_onnx(model)
    message = str(info.value)
    assert "the_node" in message and f"attribute {attribute}=" in message, message
    assert re.search(allowed, message), message


def test_split_sizes_and_axis():
    split = _one_node("Split", [6], {"axis": 3}, outputs=("a", "b"))
    with pytest.raises(OnnxImportError, match="axis=3 is out of range"):
        lw.from_onnx(split)
    sizes = _one_node("Split", [6], {}, inputs=("x", "s"), initializers=(("s", np.array([2, 5])),),
                      outputs=("a", "b"))
    with pytest.raises(OnnxImportError, match="add up to the axis length 6"):
        lw.from_onnx(sizes)


def test_range_with_a_zero_or_huge_step_count_is_refused():
    def model(start, limit, delta):
        node = helper.make_node("Range", ["s", "l", "d"], ["r"], name="the_range")
        add = helper.make_node("Add", ["x", "r"], ["y"])
        graph = helper.make_graph([node, add], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1])],
                                  [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1])],
                                  initializer=[numpy_helper.from_array(np.array(v, np.float32), n)
                                               for n, v in (("s", start), ("l", limit), ("d", delta))])
        return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    with pytest.raises(OnnxImportError, match="the_range.*delta.*non-zero"):
        lw.from_onnx(model(0, 10, 0))
    with pytest.raises(OnnxImportError, match="the_range.*memory limit"):
        lw.from_onnx(model(0, 1e30, 1))


def test_sizes_beyond_the_memory_limit_are_refused_before_allocation():
    huge = _one_node("Relu", [2 ** 31 - 1, 2 ** 31 - 1], {})
    with pytest.raises(OnnxImportError, match="input 'x'.*memory limit"):
        lw.from_onnx(huge)
    small = _one_node("Relu", [64, 64], {})
    lw.from_onnx(small)
    with memory_limit(1000):
        with pytest.raises(OnnxImportError, match="memory limit of 1000 bytes"):
            lw.from_onnx(small)


def test_a_converter_bug_is_an_internal_error_naming_the_node(monkeypatch):
    from loopweave.nn_ops.onnx_import import importer
    from loopweave.nn_ops.onnx_import.context import Converter

    def broken(ctx, node):
        raise ValueError("something impossible")
    monkeypatch.setattr(importer, "find_converter", lambda op, opset: Converter(broken, 1, None))
    with pytest.raises(InternalError, match="the_node.*Relu.*something impossible") as info:
        lw.from_onnx(_one_node("Relu", [2, 2], {}))
    assert "bug in loopweave" in str(info.value)


def test_valid_attributes_still_import_and_run():
    model = _one_node("AveragePool", [1, 3, 8, 8], dict(kernel_shape=[3, 3], strides=[2, 2], auto_pad="SAME_UPPER"))
    exe = lw.compile(lw.from_onnx(model), progress=False)
    (got,) = exe.run({"x": np.ones((1, 3, 8, 8), np.float32)})
    assert got.shape == (1, 3, 4, 4) and np.allclose(got, 1.0)


@pytest.mark.parametrize("op, x_shape, attrs", [
    ("AveragePool", [1, 1, 2000, 2000], dict(kernel_shape=[2000, 2000], pads=[1999] * 4)),
    ("MaxPool", [1, 8, 4000, 4000], dict(kernel_shape=[1000, 1000], auto_pad="SAME_UPPER")),
])
def test_a_window_asking_for_hours_of_compute_is_refused(op, x_shape, attrs):
    """Each attribute passes its own rule; together they ask for > 2**42 multiply-adds
    (pathological attributes cannot make a kernel run for minutes)."""
    with pytest.raises(OnnxImportError, match=r"node 'the_node'.*multiply-adds .*more than the limit .*use a "
                                              r"smaller window, smaller pads or larger strides"):
        lw.from_onnx(_one_node(op, x_shape, attrs))


def test_a_big_but_ordinary_layer_is_not_refused_by_the_work_bound():
    """A 3x3 convolution of 64 channels over a 1080p image: 8e10 multiply-adds, under the bound."""
    w = np.zeros((64, 64, 3, 3), np.float32)
    lw.from_onnx(_one_node("Conv", [1, 64, 1080, 1920], dict(pads=[1] * 4), ("x", "w"), (("w", w),)))


def test_pad_with_a_constant_value_of_several_numbers_is_refused():
    """A rewired Pad whose constant_value has 4 numbers was a numpy ValueError (fuzzer)."""
    model = _one_node("Pad", [1, 2, 3, 3], {}, inputs=("x", "pads", "cv"),
                      initializers=[("pads", np.zeros(8, np.int64)), ("cv", np.zeros(4, np.float32))])
    with pytest.raises(OnnxImportError, match="constant_value must be one number"):
        lw.from_onnx(model)


def test_attention_with_a_past_key_of_the_wrong_rank_is_refused():
    """A rewired Attention whose past_key is 2-D was an IndexError (fuzzer)."""
    q = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 2, 4, 8])
    node = helper.make_node("Attention", ["x", "x", "x", "", "pk", "pv"], ["y", "k2", "v2"], name="att")
    graph = helper.make_graph([node], "g", [q], [helper.make_tensor_value_info("y", TensorProto.FLOAT, [1, 2, 4, 8])],
                              initializer=[numpy_helper.from_array(np.zeros((2, 8), np.float32), "pk"),
                                           numpy_helper.from_array(np.zeros((1, 2, 3, 8), np.float32), "pv")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 23)], ir_version=10)
    with pytest.raises(OnnxImportError, match="past_key has shape"):
        lw.from_onnx(model)
