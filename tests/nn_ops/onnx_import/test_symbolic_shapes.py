"""Graph-level symbolic shape inference (``onnx_import/symbolic_shapes.py``).

Every value's symbolic shape, evaluated at a binding, must equal what ONNX's own (static) shape
inference gives for the model with the inputs fixed to that binding; every symbol is tried at 1.
Equalities the graph needs are proven, refuted at import (error naming node and sizes), or
recorded as run-time checks that a run evaluates before anything runs."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402
from loopweave.nn_ops.onnx_import.symbolic_shapes import infer_symbolic_shapes  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder, resnet18, transformer_encoder  # noqa: E402


def static_shapes(model, binding):
    """ONNX's shape inference for ``model`` with each symbolic input dimension set from ``binding``."""
    m = onnx.ModelProto.FromString(model.SerializeToString())
    for inp in m.graph.input:
        for d in inp.type.tensor_type.shape.dim:
            if d.dim_param:
                value = binding[d.dim_param]
                d.ClearField("dim_param")
                d.dim_value = value
    for out in m.graph.output:
        out.type.tensor_type.ClearField("shape")
    m = onnx.shape_inference.infer_shapes(m, strict_mode=True, data_prop=True)
    found = {}
    for vi in list(m.graph.value_info) + list(m.graph.output):
        dims = vi.type.tensor_type.shape.dim
        if vi.type.tensor_type.HasField("shape") and all(d.HasField("dim_value") for d in dims):
            found[vi.name] = tuple(d.dim_value for d in dims)
    return found


def assert_matches_onnx(model, result, binding):
    """Every node output's symbolic shape at ``binding`` is ONNX's (which must know them all)."""
    want = static_shapes(model, binding)
    outputs = [o for n in model.graph.node for o in n.output if o]
    assert set(outputs) <= set(want)
    for name in outputs:
        assert name in result.shapes, f"no symbolic shape for {name!r}"
        assert result.shape_at(name, binding) == want[name], (name, result.show(name), binding)


def symbolic_resnet18():
    model = resnet18(size=64, classes=10)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for k, name in ((0, "N"), (2, "H"), (3, "W")):
        dims[k].dim_param = name
    model.graph.output[0].type.tensor_type.shape.dim[0].dim_param = "N"
    return model


@pytest.fixture(scope="module")
def encoder():
    model = transformer_encoder(batch=None, seq=None, hidden=64, heads=2, layers=2, ffn=128)
    return model, infer_symbolic_shapes(model)


@pytest.fixture(scope="module")
def resnet():
    model = symbolic_resnet18()
    return model, infer_symbolic_shapes(model)


@pytest.mark.parametrize("batch, seq", [(1, 1), (1, 7), (4, 1), (2, 64), (3, 200)])
def test_encoder_shapes_match_onnx_at_every_binding(encoder, batch, seq):
    model, result = encoder
    assert_matches_onnx(model, result, {"batch": batch, "seq": seq})


def test_encoder_is_fully_symbolic_with_nothing_left_to_check(encoder):
    model, result = encoder
    assert result.unknown == [] and result.checks == []
    assert repr(result.signature) == ("<SymbolicSignature (input: float32[batch, seq, 64]) -> "
                                      f"({model.graph.output[0].name}: float32[batch, seq, 64])>")
    shows = {result.show(n) for n in result.shapes}
    # the head split through Shape -> Gather -> Unsqueeze -> Concat -> Reshape, and the scores
    assert {"[batch, seq, 2, 32]", "[batch, 2, seq, 32]", "[batch, 2, 32, seq]", "[batch, 2, seq, seq]"} <= shows
    concat = next(n.output[0] for n in model.graph.node if n.op_type == "Concat")
    assert [str(v) for v in result.values[concat]] == ["batch", "seq", "2", "32"]


@pytest.mark.parametrize("binding", [dict(N=1, H=1, W=1), dict(N=1, H=64, W=64), dict(N=2, H=33, W=17),
                                     dict(N=1, H=40, W=50), dict(N=3, H=2, W=7)])
def test_resnet18_shapes_match_onnx_at_every_binding(resnet, binding):
    model, result = resnet
    assert_matches_onnx(model, result, binding)


def test_resnet18_sizes_are_the_window_formulas(resnet):
    model, result = resnet
    assert result.unknown == [] and result.checks == []
    stem = next(n.output[0] for n in model.graph.node if n.op_type == "Conv")
    assert result.show(stem) == "[N, 64, (H - 1)//2 + 1, (W - 1)//2 + 1]"
    pool = next(n.output[0] for n in model.graph.node if n.op_type == "MaxPool")
    assert result.show(pool) == "[N, 64, ((H - 1)//2)//2 + 1, ((W - 1)//2)//2 + 1]"
    assert result.show(model.graph.output[0].name) == "[N, 10]"


def two_input_model(nodes, inputs, outputs, opset=17):
    graph = helper.make_graph(nodes, "g", [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, [None, None]) for n in outputs])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])


def test_slice_and_concat_of_symbolic_extents():
    """x[:, 1:] concatenated with x, and a reshape with -1 over the symbolic sizes."""
    i64 = lambda v: helper.make_tensor("c" + str(abs(hash(str(v))) % 10 ** 6), TensorProto.INT64, [len(v)], v)  # noqa
    starts, ends, axes, target = i64([1]), i64([2 ** 62]), i64([1]), i64([-1, 4])
    nodes = [helper.make_node("Slice", ["x", starts.name, ends.name, axes.name], ["s"]),
             helper.make_node("Concat", ["s", "x"], ["c"], axis=1),
             helper.make_node("Reshape", ["c", target.name], ["y"])]
    model = two_input_model(nodes, [("x", ["N", "seq", 4])], ["y"])
    model.graph.initializer.extend([starts, ends, axes, target])
    result = infer_symbolic_shapes(model)
    assert result.show("s") == "[N, seq - 1, 4]" and result.show("c") == "[N, 2*seq - 1, 4]"
    assert result.show("y") in ("[N*(2*seq - 1), 4]", "[2*N*seq - N, 4]")
    for binding in (dict(N=1, seq=1), dict(N=2, seq=5)):
        assert_matches_onnx(model, result, binding)


def test_an_impossible_equality_is_an_import_error_naming_node_and_sizes():
    b = OnnxBuilder()
    out = b.node("MatMul", ["input", b.init("w", np.zeros((32, 10), np.float32))])
    with pytest.raises(OnnxImportError, match=r"node 'matmul_2_node' \(MatMul\): the inner sizes of "
                                              r"\[N, seq, 64\] @ \[32, 10\]: 64 and 32 must be equal"):
        lw.from_onnx(b.model(("N", "seq", 64), out))
    b = OnnxBuilder()
    out = b.node("Reshape", ["input", b.init("shape", np.array([0, 4], np.int64))])
    with pytest.raises(OnnxImportError, match=r"node 'reshape_2_node' \(Reshape\): element counts of the input "
                                              r"\[N, 6\] and the target \[N, 4\]: 6\*N and 4\*N must be equal"):
        lw.from_onnx(b.model(("N", 6), out))


def test_an_open_broadcast_becomes_a_run_time_check():
    """x [N, seq] + y [N, seq_k]: legal when seq == seq_k or either is 1; checked before a run."""
    model = two_input_model([helper.make_node("Add", ["x", "y"], ["z"], name="the_add")],
                            [("x", ["N", "seq"]), ("y", ["N", "seq_k"])], ["z"])
    g = lw.from_onnx(model)
    assert len(g.shapes.checks) == 1 and g.shapes.show("z") == "[N, max(seq, seq_k)]"
    exe = lw.compile(g, progress=False)
    rng = np.random.default_rng(0)
    for seq, seq_k in ((3, 3), (3, 1), (1, 4)):
        x, y = rng.standard_normal((2, seq)).astype(np.float32), rng.standard_normal((2, seq_k)).astype(np.float32)
        np.testing.assert_array_equal(exe.run({"x": x, "y": y})[0], x + y)
    compiled = len(exe.specializations)
    with pytest.raises(lw.ArgumentError, match=r"node 'the_add' \(Add\): sizes seq and seq_k \(axis -1\) do not "
                                               r"broadcast.*\(here seq = 3, seq_k = 4\)"):
        exe.run({"x": np.zeros((2, 3), np.float32), "y": np.zeros((2, 4), np.float32)})
    assert len(exe.specializations) == compiled       # refused before anything was compiled or run


def test_a_reshape_that_may_not_divide_is_checked_at_run_time():
    b = OnnxBuilder()
    out = b.node("Reshape", ["input", b.init("shape", np.array([-1, 4], np.int64))])
    model = b.model(("N", 6), out)
    g = lw.from_onnx(model)
    assert g.shapes.show(out) == "[3*N/2, 4]"
    exe = lw.compile(g, progress=False)
    x = np.arange(24, dtype=np.float32).reshape(4, 6)
    np.testing.assert_array_equal(exe.run({"input": x})[0], x.reshape(-1, 4))
    with pytest.raises(lw.ArgumentError, match=r"node 'reshape_2_node' \(Reshape\): the input's 6\*N elements do "
                                               r"not split into rows of 4 .*\(here N = 3\)"):
        exe.run({"input": np.zeros((3, 6), np.float32)})


def test_a_window_larger_than_the_input_is_checked_at_run_time():
    b = OnnxBuilder()
    out = b.node("MaxPool", ["input"], kernel_shape=[3, 3])
    g = lw.from_onnx(b.model((1, 1, "H", "H"), out))
    assert g.shapes.show(out) == "[1, 1, H - 2, H - 2]"
    with pytest.raises(lw.ArgumentError, match=r"MaxPool\): an input of size H is smaller than the window.*"
                                               r"\(here H = 2\)"):
        lw.compile(g, progress=False).run({"input": np.zeros((1, 1, 2, 2), np.float32)})


def test_ops_without_a_rule_leave_the_rest_unknown_and_still_run(monkeypatch):
    from loopweave.nn_ops.onnx_import.symbolic_shapes import RULES
    monkeypatch.delitem(RULES, "EyeLike")          # (every op converted has a rule: one taken away)
    b = OnnxBuilder()
    eye = b.node("EyeLike", ["input"], k=1)
    out = b.node("Relu", [eye])
    model = b.model(("N", 5), out)
    g = lw.from_onnx(model)
    assert [(op, why) for _, op, why in g.shapes.unknown] == [
        ("EyeLike", "no symbolic shape rule for this op"), ("Relu", f"the shape of {eye!r} is not known "
                                                                    f"symbolically")]
    assert g.signature.outputs[0][1] is None
    x = np.random.default_rng(1).standard_normal((3, 5)).astype(np.float32)
    np.testing.assert_allclose(lw.compile(g, progress=False).run({"input": x})[0], np.eye(3, 5, k=1))


@pytest.mark.parametrize("batch, seq", [(1, 1), (2, 1), (1, 3)])
def test_symbolic_encoder_runs_at_size_one_with_the_predicted_shapes(batch, seq):
    """The zoo's encoder with symbolic batch and sequence, at every symbol = 1 and beside it: the
    run matches onnxruntime, and the output shape is the signature's."""
    model = transformer_encoder(batch=None, seq=None, hidden=64, heads=2, layers=1, ffn=128)
    g = lw.from_onnx(model)
    exe = lw.compile(g, progress=False)
    feed = {"input": np.random.default_rng(seq).standard_normal((batch, seq, 64)).astype(np.float32)}
    got, = exe.run(feed)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
    assert [got.shape] == g.output_shapes(g.symbol_values(feed))


def test_symbolic_resnet18_runs_at_every_size_one_with_the_predicted_shapes():
    """One compile (the suite's time: a second one took 17 s), run at sizes of 1 and at odd sizes."""
    model = symbolic_resnet18()
    g = lw.from_onnx(model)
    assert g.trial == {"N": 1, "H": 1, "W": 1}
    exe = lw.compile(g, progress=False)
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for shape in ((1, 3, 1, 1), (2, 3, 33, 17)):
        x = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        got, = exe.run({"input": x})
        want, = session.run(None, {"input": x})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)
        assert [got.shape] == g.output_shapes(g.symbol_values({"input": x}))


@pytest.mark.parametrize("polymorphic", [None, False])
def test_a_symbol_bound_twice_is_refused_before_anything_compiles_or_runs(polymorphic):
    model = two_input_model([helper.make_node("Add", ["ids", "mask"], ["z"])],
                            [("ids", ["batch", "seq"]), ("mask", ["batch", "seq"])], ["z"])
    exe = lw.compile(lw.from_onnx(model), progress=False, polymorphic=polymorphic)
    with pytest.raises(lw.ArgumentError, match=r"input 'mask' dimension 1 is 'seq' = 64, but input 'ids' "
                                               r"dimension 1 set 'seq' = 128"):
        exe.run({"ids": np.zeros((1, 128), np.float32), "mask": np.zeros((1, 64), np.float32)})
    if polymorphic is False:
        assert exe.specializations == {}
    else:           # compiled once: the default for a model the compile-once path covers
        assert type(exe).__name__ == "PolymorphicExecutable"


def test_a_rule_that_breaks_on_an_odd_node_leaves_it_unknown_visibly():
    """A Gemm on a rank-1 operand (refused later by the importer) must not crash the inference."""
    b = OnnxBuilder()
    out = b.node("Gemm", ["input", b.init("w", np.zeros((4, 3), np.float32))])
    result = infer_symbolic_shapes(b.model(("N",), out))
    assert [(op, why.split(" (")[0]) for _, op, why in result.unknown] == [("Gemm", "the symbolic shape rule failed")]


def test_every_rule_agrees_with_onnx_on_the_backend_node_cases():
    """The rules run on every ONNX backend node case loopweave claims (static inputs: each rule's
    arithmetic on plain sizes): no case is refused, and every output shape the inference gives equals
    ONNX's own inference wherever that one is static."""
    from loopweave.nn_ops.network import symbolic as S
    from loopweave.nn_ops.testing.conformance import collect_cases, is_claimed
    compared, wrong = 0, []
    for case in (c for c in collect_cases() if is_claimed(c)):
        result = infer_symbolic_shapes(case.model)
        try:
            inferred = onnx.shape_inference.infer_shapes(case.model, strict_mode=False, data_prop=True)
        except Exception:  # noqa: BLE001 - a case ONNX's own inference refuses: nothing to compare with
            continue
        want = {}
        for vi in list(inferred.graph.value_info) + list(inferred.graph.output):
            t = vi.type.tensor_type
            if t.HasField("shape") and all(d.HasField("dim_value") for d in t.shape.dim):
                want[vi.name] = tuple(d.dim_value for d in t.shape.dim)
        for name in (o for n in case.model.graph.node for o in n.output if o in want and o in result.shapes):
            got = result.shapes[name]
            compared += 1
            if not all(S.is_static(d) for d in got) or tuple(int(d) for d in got) != want[name]:
                wrong.append((case.name, name, got, want[name]))
    assert wrong == [] and compared > 5000


@pytest.mark.parametrize("name", ["small_cnn", "mobilenet_v2", "squeezenet1_1", "efficientnet_lite", "convnext",
                                  "densenet", "unet"])
def test_zoo_cnns_with_symbolic_batch_and_image_size(name):
    """Every value of each zoo CNN (small variants) with symbolic N, H, W: the shape ONNX infers at
    three bindings; the bindings satisfy the recorded checks (a stride-2 stem without padding needs
    H >= 3, say), and every symbol at 1 either satisfies them or is refused by a named check."""
    from loopweave.nn_ops.testing import model_zoo
    kwargs = dict(model_zoo.SMALL.get(name, {"size": 64, "classes": 10}))
    model = getattr(model_zoo, name)(**kwargs)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    for k, symbol in ((0, "N"), (2, "H"), (3, "W")):
        dims[k].dim_param = symbol
    for d in model.graph.output[0].type.tensor_type.shape.dim:
        d.ClearField("dim_value")
    result = infer_symbolic_shapes(model)
    assert result.unknown == []
    size = kwargs["size"]
    for binding in (dict(N=1, H=size, W=size), dict(N=3, H=size, W=size), dict(N=1, H=size + 32, W=size + 64)):
        assert all(c.holds(binding) for c in result.checks)
        assert_matches_onnx(model, result, binding)
    ones = dict(N=1, H=1, W=1)
    assert all(c.holds(ones) for c in result.checks) or any("smaller than the window" in c.message
                                                             for c in result.checks if not c.holds(ones))
