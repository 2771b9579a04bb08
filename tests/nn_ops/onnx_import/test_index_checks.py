"""Index tensors are checked where they are used: Gather, GatherElements, GatherND,
ScatterElements and ScatterND raise ArgumentError at run time naming the node, the input and
the first bad index; negative indices wrap as ONNX says; nothing is clamped.  Each runs with
the default checks and with ``lw.compile(..., checks="bounds")``."""
import io

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import loopweave as lw  # noqa: E402

_TYPES = {"float32": TensorProto.FLOAT, "int64": TensorProto.INT64, "int32": TensorProto.INT32}
CHECKS = [None, "bounds"]


def _model(node, inputs, output, out_shape):
    graph = helper.make_graph([node], "g", [helper.make_tensor_value_info(n, _TYPES[d], s) for n, d, s in inputs],
                              [helper.make_tensor_value_info(output, TensorProto.FLOAT, out_shape)])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)


def _compile(model, checks):
    return lw.compile(lw.from_onnx(model), progress=False, checks=checks)


def _refused(exe, feed, node, data_input, index_input, index):
    pattern = rf"node '{node}' .*index {index} is out of range for axis \d of '{data_input}' " \
              rf"\(an index read from '{index_input}'\)"
    with pytest.raises(lw.ArgumentError, match=pattern):
        exe.run(feed)


@pytest.mark.parametrize("checks", CHECKS)
def test_embedding_lookup_refuses_a_token_id_past_the_vocabulary(checks):
    """The BERT case: vocabulary 30522, token ids 40000 and 10**9 (onnxruntime: INVALID_ARGUMENT)."""
    vocab, hidden = 30522, 8
    model = _model(helper.make_node("Gather", ["word_embeddings", "input_ids"], ["emb"], name="embeddings/Gather"),
                   [("word_embeddings", "float32", [vocab, hidden]), ("input_ids", "int64", [2, 16])],
                   "emb", [2, 16, hidden])
    exe = _compile(model, checks)
    table = np.random.default_rng(0).standard_normal((vocab, hidden)).astype(np.float32)
    ids = np.random.default_rng(1).integers(0, vocab, (2, 16))
    np.testing.assert_array_equal(exe.run({"word_embeddings": table, "input_ids": ids})[0], table[ids])
    for bad in (40000, 10**9, -30523):
        wrong = ids.copy()
        wrong[1, 7] = bad
        _refused(exe, {"word_embeddings": table, "input_ids": wrong}, "embeddings/Gather", "word_embeddings",
                 "input_ids", bad)
    ids[0, 0] = -1      # negative: counts from the end, as ONNX says
    np.testing.assert_array_equal(exe.run({"word_embeddings": table, "input_ids": ids})[0], table[ids])


@pytest.mark.parametrize("checks", CHECKS)
def test_gather_elements(checks):
    model = _model(helper.make_node("GatherElements", ["x", "i"], ["y"], axis=1, name="ge"),
                   [("x", "float32", [3, 5]), ("i", "int64", [3, 4])], "y", [3, 4])
    exe = _compile(model, checks)
    x = np.arange(15, dtype=np.float32).reshape(3, 5)
    i = np.array([[0, 4, -1, 2]] * 3)
    np.testing.assert_array_equal(exe.run({"x": x, "i": i})[0], np.take_along_axis(x, i % 5, 1))
    i[2, 3] = 5
    _refused(exe, {"x": x, "i": i}, "ge", "x", "i", 5)


@pytest.mark.parametrize("checks", CHECKS)
def test_gather_nd(checks):
    model = _model(helper.make_node("GatherND", ["x", "i"], ["y"], name="gnd"),
                   [("x", "float32", [4, 3, 2]), ("i", "int64", [5, 2])], "y", [5, 2])
    exe = _compile(model, checks)
    x = np.arange(24, dtype=np.float32).reshape(4, 3, 2)
    i = np.array([[0, 0], [3, 2], [-1, -3], [1, 1], [2, 0]])
    np.testing.assert_array_equal(exe.run({"x": x, "i": i})[0], x[i[:, 0], i[:, 1]])
    i[3, 1] = 3         # the second coordinate indexes axis 1 (size 3)
    with pytest.raises(lw.ArgumentError, match=r"node 'gnd' .*index 3 is out of range for axis 1 of 'x'.*of size 3"):
        exe.run({"x": x, "i": i})


@pytest.mark.parametrize("checks", CHECKS)
def test_scatter_elements(checks):
    model = _model(helper.make_node("ScatterElements", ["x", "i", "u"], ["y"], axis=0, name="se"),
                   [("x", "float32", [4, 3]), ("i", "int64", [2, 3]), ("u", "float32", [2, 3])], "y", [4, 3])
    exe = _compile(model, checks)
    x = np.zeros((4, 3), np.float32)
    u = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    i = np.array([[0, 1, 2], [3, -1, 1]])
    want = x.copy()
    for r in range(2):
        for c in range(3):
            want[i[r, c], c] = u[r, c]
    np.testing.assert_array_equal(exe.run({"x": x, "i": i, "u": u})[0], want)
    i[1, 2] = -5
    _refused(exe, {"x": x, "i": i, "u": u}, "se", "x", "i", -5)


@pytest.mark.parametrize("checks", CHECKS)
def test_scatter_nd(checks):
    model = _model(helper.make_node("ScatterND", ["x", "i", "u"], ["y"], name="snd"),
                   [("x", "float32", [4, 3]), ("i", "int64", [2, 1]), ("u", "float32", [2, 3])], "y", [4, 3])
    exe = _compile(model, checks)
    x = np.zeros((4, 3), np.float32)
    u = np.arange(1, 7, dtype=np.float32).reshape(2, 3)
    want = x.copy()
    want[[2, 3]] = u
    np.testing.assert_array_equal(exe.run({"x": x, "i": np.array([[2], [-1]]), "u": u})[0], want)
    _refused(exe, {"x": x, "i": np.array([[2], [4]]), "u": u}, "snd", "x", "i", 4)


def test_one_hot_out_of_range_is_an_all_off_row_as_onnx_says():
    """OneHot is the exception: ONNX defines indices outside [-depth, depth) as a row of off_value
    (it reads nothing by index), so it is not an error."""
    graph = helper.make_graph(
        [helper.make_node("OneHot", ["i", "depth", "values"], ["y"], name="oh")], "g",
        [helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 4])],
        initializer=[onnx.numpy_helper.from_array(np.array(4, np.int64), "depth"),
                     onnx.numpy_helper.from_array(np.array([0, 1], np.float32), "values")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    exe = lw.compile(lw.from_onnx(model), progress=False)
    got = exe.run({"i": np.array([1, 7, -1])})[0]
    np.testing.assert_array_equal(got, [[0, 1, 0, 0], [0, 0, 0, 0], [0, 0, 0, 1]])


def test_a_saved_executable_still_names_the_node():
    model = _model(helper.make_node("Gather", ["x", "i"], ["y"], name="lookup"),
                   [("x", "float32", [10, 2]), ("i", "int64", [3])], "y", [3, 2])
    buf = io.BytesIO()
    _compile(model, None).save(buf)
    buf.seek(0)
    exe = lw.load(buf)
    _refused(exe, {"x": np.zeros((10, 2), np.float32), "i": np.array([1, 10, 2])}, "lookup", "x", "i", 10)


def test_a_fused_gather_names_its_node_among_the_group():
    """Gather fused with an elementwise consumer: the kernel's error still names the Gather node."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["g"], name="the_gather"),
         helper.make_node("Relu", ["g"], ["y"], name="the_relu")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, [3])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, [3, 2])])
    exe = lw.compile(lw.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)],
                                                    ir_version=8)), progress=False)
    _refused(exe, {"x": np.zeros((10, 2), np.float32), "i": np.array([1, 2, 30])}, "the_gather", "x", "i", 30)


def _model_of(nodes, inputs, outputs, opset=17, initializers=()):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, _TYPES[d], s) for n, d, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in outputs],
                              initializer=list(initializers))
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=10)


@pytest.mark.parametrize("checks", CHECKS)
def test_loss_targets_are_checked_except_the_ignored_one(checks):
    model = _model_of([helper.make_node("NegativeLogLikelihoodLoss", ["x", "t"], ["loss"], reduction="none",
                                        ignore_index=-100, name="nll")],
                      [("x", "float32", [3, 4]), ("t", "int64", [3])], [("loss", [3])])
    exe = _compile(model, checks)
    x = np.arange(12, dtype=np.float32).reshape(3, 4)
    np.testing.assert_array_equal(exe.run({"x": x, "t": np.array([1, -100, 3])})[0], [-1, 0, -11])
    with pytest.raises(lw.ArgumentError, match=r"node 'nll' .*index 4 is out of range for axis 1 of 'x' "
                                               r"\(a class read from 't'\), of size 4 \(valid: 0 to 3\)"):
        exe.run({"x": x, "t": np.array([1, 4, 3])})


def test_rotary_position_ids_are_checked_against_the_cache():
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 3, 8)).astype(np.float32)
    cos, sin = (rng.standard_normal((5, 4)).astype(np.float32) for _ in range(2))
    model = _model_of([helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], name="rope")],
                      [("x", "float32", list(x.shape)), ("cos", "float32", [5, 4]), ("sin", "float32", [5, 4]),
                       ("pos", "int64", [1, 3])], [("y", list(x.shape))], opset=23)
    exe = _compile(model, None)
    feed = {"x": x, "cos": cos, "sin": sin, "pos": np.array([[0, 4, 2]])}
    exe.run(feed)
    feed["pos"] = np.array([[0, 5, 2]])
    with pytest.raises(lw.ArgumentError, match=r"node 'rope' .*index 5 is out of range for axis 0 of 'cos' "
                                               r"\(a position read from 'pos'\)"):
        exe.run(feed)


def test_compile_refuses_an_unknown_kind_of_checks():
    model = _model(helper.make_node("Gather", ["x", "i"], ["y"], name="lookup"),
                   [("x", "float32", [10, 2]), ("i", "int64", [3])], "y", [3, 2])
    with pytest.raises(lw.BuildError, match="checks='all' is not a kind of run-time check"):
        lw.compile(lw.from_onnx(model), progress=False, checks="all")


def test_a_dynamic_model_checks_its_indices_too():
    """A symbolic batch: each specialisation is compiled with the same checks."""
    graph = helper.make_graph(
        [helper.make_node("Gather", ["x", "i"], ["y"], name="lookup")], "g",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [10, 2]),
         helper.make_tensor_value_info("i", TensorProto.INT64, ["N"])],
        [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 2])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    for checks in CHECKS:
        exe = lw.compile(lw.from_onnx(model), progress=False, checks=checks)
        x = np.arange(20, dtype=np.float32).reshape(10, 2)
        np.testing.assert_array_equal(exe.run({"x": x, "i": np.array([9, -10])})[0], x[[9, 0]])
        _refused(exe, {"x": x, "i": np.array([1, 2, 10])}, "lookup", "x", "i", 10)


def test_the_error_carries_the_index_and_the_node():
    model = _model(helper.make_node("Gather", ["x", "i"], ["y"], name="lookup"),
                   [("x", "float32", [10, 2]), ("i", "int64", [3])], "y", [3, 2])
    exe = _compile(model, None)
    with pytest.raises(lw.IndexOutOfRangeError) as info:
        exe.run({"x": np.zeros((10, 2), np.float32), "i": np.array([1, 2, -11])})
    err = info.value
    assert (err.index, err.extent, err.node) == (-11, 10, "lookup") and "'x'" in err.what
    assert isinstance(err, lw.ArgumentError) and isinstance(err, IndexError)
