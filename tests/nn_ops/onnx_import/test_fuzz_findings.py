"""Mutants the fuzzer's comparison with onnxruntime found: attributes and operands onnxruntime refuses
(Mod.fmod not 0/1, RMSNormalization.axis out of range, an even LRN size, a Conv kernel_shape that is
not its weight's) are refused by loopweave too, naming them; a
Slice with a step of 0 is a clean import error, not an internal one."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.errors import OnnxImportError


def _model(node, inputs, inits=(), opset=23):
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    out = helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * len(inputs[0][1]))
    graph = helper.make_graph([node], "g", values, [out], initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


CASES = [
    (lambda: _model(helper.make_node("Mod", ["a", "b"], ["y"], fmod=2, name="the_node"), [("a", [4]), ("b", [4])]),
     r"attribute fmod=2.*0 or 1"),
    (lambda: _model(helper.make_node("RMSNormalization", ["x", "s"], ["y"], axis=1000000, name="the_node"),
                    [("x", [2, 3])], [numpy_helper.from_array(np.ones(3, np.float32), "s")]),
     r"attribute axis=1000000"),
    (lambda: _model(helper.make_node("Slice", ["x", "st", "en", "ax", "sp"], ["y"], name="the_node"), [("x", [4, 4])],
                    [numpy_helper.from_array(np.array([0], np.int64), n) for n in ("st", "ax", "sp")]
                    + [numpy_helper.from_array(np.array([4], np.int64), "en")], opset=17),
     r"a step of 0 is not allowed"),
]


CASES.append((lambda: _model(helper.make_node("LRN", ["x"], ["y"], size=2, name="the_node"), [("x", [1, 4, 3, 3])],
                             opset=17),
              r"attribute size=2.*must be odd"))


CASES.append((lambda: _model(helper.make_node("Conv", ["x", "w"], ["y"], kernel_shape=[1, 3], name="the_node"),
                             [("x", [1, 1, 5, 5])], [numpy_helper.from_array(np.ones((1, 1, 3, 3), np.float32), "w")],
                             opset=17),
              r"attribute kernel_shape=\[1, 3\].*weight's spatial shape \[3, 3\]"))


@pytest.mark.parametrize("make, message", CASES, ids=["mod-fmod", "rms-axis", "slice-step-0", "lrn-even-size",
                                                      "conv-kernel-shape"])
def test_refused_with_a_clean_error(make, message):
    with pytest.raises(OnnxImportError, match=message) as info:
        lw.from_onnx(make())
    assert "the_node" in str(info.value) or "#0" in str(info.value)


def test_an_output_computed_at_import_compiles_per_shape():
    """A graph output that is a shape value (Shape of a symbolic input) has no kernel in the compile-once
    path: it compiles per shape (before, the run raised a KeyError), and polymorphic=True says why."""
    import warnings
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 3])
    y = helper.make_tensor_value_info("y", TensorProto.INT64, [2])
    graph = helper.make_graph([helper.make_node("Shape", ["x"], ["y"])], "g", [x], [y])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", lw.PerShapeCompileWarning)
        exe = lw.compile(lw.from_onnx(model), progress=False)
    np.testing.assert_array_equal(exe.run({"x": np.zeros((5, 3), np.float32)})[0], [5, 3])
    with pytest.raises(OnnxImportError, match="its output 'y' is computed at import"):
        lw.compile(lw.from_onnx(model), polymorphic=True, progress=False)


@pytest.mark.parametrize("size", [3, 9, 2 ** 31 - 1])
def test_an_lrn_window_wider_than_the_channels_costs_no_more(size):
    """LRN's window far wider than the channels (2^31 - 1: the fuzzer's hang) sums the channels there
    are, in a loop no longer than twice the channels."""
    x = np.random.default_rng(size % 97).standard_normal((1, 4, 2, 3)).astype(np.float32)
    model = _model(helper.make_node("LRN", ["x"], ["y"], size=size, alpha=1e-2, beta=0.75, bias=2.0),
                   [("x", list(x.shape))], opset=17)
    got = lw.compile(lw.from_onnx(model), progress=False).run({"x": x})[0]
    before, after = (size - 1) // 2, -(-(size - 1) // 2)
    sums = np.stack([(x[:, max(0, c - before):min(4, c + after + 1)] ** 2).sum(axis=1) for c in range(4)], axis=1)
    want = x / (2.0 + 1e-2 / size * sums) ** 0.75
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)
