"""Models whose shapes are known only at run time: a symbolic batch, shape inputs.

``from_onnx`` gives a DynamicGraph, ``compile`` a DynamicExecutable that compiles one
static specialisation per input binding on first use, and keeps it."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402
from loopweave.nn_ops.onnx_import.dynamic import DynamicGraph  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder, small_cnn, transformer_encoder  # noqa: E402


def _ort(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.fixture(scope="module")
def dynamic_cnn():
    model = small_cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return model, lw.compile(lw.from_onnx(model), progress=False, polymorphic=False)


def test_symbolic_batch_is_kept_and_every_batch_size_runs(dynamic_cnn):
    model, exe = dynamic_cnn
    assert exe.inputs == [("input", ("N", 3, 16, 16), "float32")]
    assert "N" in repr(exe.graph) and "specialisation" in repr(exe)
    rng = np.random.default_rng(0)
    for batch in (1, 3, 1):
        x = rng.standard_normal((batch, 3, 16, 16)).astype(np.float32)
        got, = exe.run({"input": x})
        np.testing.assert_allclose(got, _ort(model, {"input": x})[0], rtol=1e-4, atol=1e-4)
    assert len(exe.specializations) == 2          # batch 1 was compiled once


def test_dynamic_inputs_are_checked(dynamic_cnn):
    _, exe = dynamic_cnn
    with pytest.raises(lw.ArgumentError, match=r"'input' must have shape \[N, 3, 16, 16\], got \(2, 3, 15, 16\)"):
        exe.run({"input": np.zeros((2, 3, 15, 16), np.float32)})
    with pytest.raises(lw.ArgumentError, match="rank 4"):
        exe.run({"input": np.zeros((3, 16, 16), np.float32)})
    with pytest.raises(lw.ArgumentError, match="dtype float32"):
        exe.run({"input": np.zeros((1, 3, 16, 16), np.float64)})
    with pytest.raises(lw.ArgumentError, match="unknown input"):
        exe.run({"image": np.zeros((1, 3, 16, 16), np.float32)})


def test_symbol_shared_by_two_inputs_must_agree():
    b = OnnxBuilder()
    out = b.node("Add", ["input", "other"])
    model = b.model(("N", 4), out, ("N", 4))
    model.graph.input.append(helper.make_tensor_value_info("other", TensorProto.FLOAT, ["N", 4]))
    exe = lw.compile(lw.from_onnx(model), progress=False, polymorphic=False)
    with pytest.raises(lw.ArgumentError, match="'N' = 3.*'N' = 2"):
        exe.run({"input": np.zeros((2, 4), np.float32), "other": np.zeros((3, 4), np.float32)})
    got, = exe.run({"input": np.ones((5, 4), np.float32), "other": np.ones((5, 4), np.float32)})
    assert got.shape == (5, 4) and (got == 2).all()


def test_unsupported_ops_in_a_dynamic_model_are_reported_at_import():
    b = OnnxBuilder()
    out = b.node("Relu", [b.node("NonMaxSuppression", ["input"])])
    model = b.model(("N", 4), out, ("N", 4))
    with pytest.raises(OnnxImportError, match="NonMaxSuppression"):
        lw.from_onnx(model)


def test_dynamic_save_load_keeps_compiled_specialisations(dynamic_cnn, tmp_path):
    model, exe = dynamic_cnn
    x = np.random.default_rng(1).standard_normal((3, 3, 16, 16)).astype(np.float32)
    want, = exe.run({"input": x})
    path = tmp_path / "dyn.lwx"
    exe.save(path)
    loaded = lw.load(path)
    assert len(loaded.specializations) == len(exe.specializations)
    np.testing.assert_array_equal(loaded.run({"input": x})[0], want)
    y = np.random.default_rng(2).standard_normal((2, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(loaded.run({"input": y})[0], _ort(model, {"input": y})[0], rtol=1e-4, atol=1e-4)


def test_encoder_with_symbolic_batch_matches_onnxruntime():
    model = transformer_encoder(batch=None, layers=1)
    g = lw.from_onnx(model)
    assert isinstance(g, DynamicGraph) and g.symbols == ["batch"]
    exe = lw.compile(g, progress=False, polymorphic=False)
    x = np.random.default_rng(3).standard_normal((2, 128, 256)).astype(np.float32)
    np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-4, atol=1e-4)


def test_shape_given_as_a_runtime_input_is_specialised_per_value():
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4])
    shape = helper.make_tensor_value_info("shape", TensorProto.INT64, [2])
    y = helper.make_tensor_value_info("y", TensorProto.FLOAT, [])
    graph = helper.make_graph([helper.make_node("Relu", ["r"], ["y"]), ], "g", [x, shape], [y])
    graph.node.insert(0, helper.make_node("Reshape", ["x", "shape"], ["r"]))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = lw.from_onnx(model)
    assert isinstance(g, DynamicGraph) and g.value_inputs == ["shape"]
    exe = lw.compile(g, progress=False, polymorphic=False)
    data = np.random.default_rng(0).standard_normal((2, 3, 4)).astype(np.float32)
    for target in ([6, 4], [4, -1], [6, 4]):
        got, = exe.run({"x": data, "shape": np.array(target, np.int64)})
        np.testing.assert_array_equal(got, np.maximum(data.reshape(target), 0))
    assert len(exe.specializations) == 2


def dynamic_encoder(hidden=64, heads=2, ffn=128):
    """One BERT-style layer with symbolic batch and sequence, heads split through a Shape chain
    for both, as torch exports it."""
    b = OnnxBuilder(0, opset=17)
    dh, x = hidden // heads, "input"
    shape = b.node("Shape", [x])
    dims = [b.node("Unsqueeze", [b.node("Gather", [shape, b.const(k, np.int64)], axis=0), b.const([0], np.int64)])
            for k in (0, 1)]
    head_shape = b.node("Concat", dims + [b.const([heads, dh], np.int64)], axis=0)

    def heads_of(t, perm):
        return b.node("Transpose", [b.node("Reshape", [t, head_shape])], perm=perm)
    q = heads_of(b.matmul_add(x, hidden, hidden), [0, 2, 1, 3])
    k = heads_of(b.matmul_add(x, hidden, hidden), [0, 2, 3, 1])
    v = heads_of(b.matmul_add(x, hidden, hidden), [0, 2, 1, 3])
    probs = b.node("Softmax", [b.node("Div", [b.node("MatMul", [q, k]), b.const(np.sqrt(dh))])], axis=-1)
    ctx = b.node("Reshape", [b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3]),
                             b.const([0, 0, hidden], np.int64)])
    x = b.layer_norm(b.node("Add", [b.matmul_add(ctx, hidden, hidden), x]), hidden)
    x = b.layer_norm(b.node("Add", [b.matmul_add(b.relu(b.matmul_add(x, hidden, ffn)), ffn, hidden), x]), hidden)
    return b.model(("batch", "seq", hidden), x, ("batch", "seq", hidden), name="dynamic_encoder")


@pytest.mark.parametrize("batch, seq", [(1, 1), (2, 1), (1, 5), (3, 2)])
def test_symbolic_batch_and_sequence_at_size_one(batch, seq):
    """The classic trap: a residual Add after a dense layer at batch 1 x seq 1 read the 3-D
    input into the 2-D dense epilogue (InternalError: computed (1, 1, 64), graph says (1, 64))."""
    model = dynamic_encoder()
    exe = lw.compile(lw.from_onnx(model), progress=False, polymorphic=False)
    feed = {"input": np.random.default_rng(seq).standard_normal((batch, seq, 64)).astype(np.float32)}
    np.testing.assert_allclose(exe.run(feed)[0], _ort(model, feed)[0], rtol=1e-4, atol=1e-4)


def test_threads_meeting_a_new_binding_compile_it_once(monkeypatch):
    """Four threads run one new batch size at once: one compiles its specialisation, the others wait
    for it and run it (before, each thread that found no specialisation compiled its own)."""
    import threading
    import time
    from loopweave.nn_ops.network import dynamic_executable
    model = small_cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    exe = lw.compile(lw.from_onnx(model), progress=False, polymorphic=False)
    compiles = []
    real = dynamic_executable.compile_graph

    def slow_compile(*args, **kwargs):
        compiles.append(1)
        time.sleep(0.3)         # long enough for every thread to arrive while it compiles
        return real(*args, **kwargs)
    monkeypatch.setattr(dynamic_executable, "compile_graph", slow_compile)
    x = np.random.default_rng(5).standard_normal((2, 3, 16, 16)).astype(np.float32)
    results = [None] * 4

    def run(k):
        results[k] = exe.run({"input": x})[0]
    threads = [threading.Thread(target=run, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(compiles) == 1 and len(exe.specializations) == 1
    for got in results:
        np.testing.assert_allclose(got, _ort(model, {"input": x})[0], rtol=1e-4, atol=1e-4)
