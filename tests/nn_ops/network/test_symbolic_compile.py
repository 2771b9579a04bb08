"""The one Graph pipeline over symbolic sizes (``lw.compile(dynamic_graph, pipeline="graph")``):
the encoder's symbolic Graph through the graph passes, kernels over size vars and the call list,
equal to the compile-once path at several bindings, with its binding checks and save/load."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.errors import ArgumentError, BuildError
from loopweave.nn_ops.testing import model_zoo
from loopweave.nn_ops.testing.onnx_builder import OnnxBuilder

HIDDEN = 32
BINDINGS = [(1, 1), (2, 5), (3, 19), (4, 1), (2, 40)]


@pytest.fixture(scope="module")
def encoder():
    graph = lw.from_onnx(model_zoo.transformer_encoder(batch=None, seq=None, hidden=HIDDEN, heads=2, layers=1,
                                                       ffn=64))
    return graph, lw.compile(graph, pipeline="graph"), lw.compile(graph, polymorphic=True)


def _feed(batch, seq, seed=0):
    return {"input": np.random.default_rng(seed).standard_normal((batch, seq, HIDDEN)).astype(np.float32)}


@pytest.mark.parametrize("batch,seq", BINDINGS)
def test_the_encoder_equals_the_compile_once_path(encoder, batch, seq):
    _, exe, once = encoder
    feed = _feed(batch, seq)
    got, = exe.run(feed)
    want, = once.run(feed)
    assert got.shape == (batch, seq, HIDDEN)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(exe.run_each(feed)[0], got, rtol=1e-6, atol=1e-6)   # the call tables agree


def test_its_kernels_take_size_vars_and_few_rows_take_their_variants(encoder):
    _, exe, _ = encoder
    dense = [c for c in exe.calls if c.module.name.startswith("dense_kn")]
    assert dense and all(c.variants for c in dense)
    assert all(set(c.sizes.values()) <= {lw.nn_ops.network.symbolic.symbol("batch") *
                                         lw.nn_ops.network.symbolic.symbol("seq")} for c in dense)
    one = {"batch": 1, "seq": 1}
    assert all(c.module_at(one) is not c.module for c in dense)             # a one-row register tile
    assert all(c.module_at({"batch": 2, "seq": 9}) is c.module for c in dense)
    # identical layers share their kernel: the three projections of q, k and v are one
    assert len({id(c.module) for c in dense}) < len(dense)


def test_attention_matmuls_read_the_head_splits_where_they_lie(encoder):
    """The static compile's kernels: each attention matmul takes in the head splits of its operands (one
    transpose kernel a layer is left, the heads' merge), over one size var per symbol (``2*batch`` heads
    and ``batch`` rows share one), with a kernel of one token picked at seq 1."""
    _, exe, _ = encoder
    names = [c.module.name for c in exe.calls]
    assert names.count("transpose") == 1 and "reshape_transpose_matmul_div" in names and \
        "reshape_transpose_matmul" in names
    batch, seq = lw.nn_ops.network.symbolic.symbol("batch"), lw.nn_ops.network.symbolic.symbol("seq")
    attention = [c for c in exe.calls if "matmul" in c.module.name and not c.module.name.startswith("dense")]
    assert len(attention) == 2 and all(set(c.sizes.values()) == {batch, seq} for c in attention)
    assert all(c.module_at({"batch": 3, "seq": 1}).name.endswith("_seq_1") for c in attention)
    assert all(c.module_at({"batch": 3, "seq": 2}) is c.module for c in attention)


def test_the_feed_is_checked_against_the_signature(encoder):
    _, exe, _ = encoder
    with pytest.raises(ArgumentError, match="dimension 2 must be 32"):
        exe.run({"input": np.zeros((2, 3, HIDDEN + 1), np.float32)})
    with pytest.raises(ArgumentError, match="rank"):
        exe.run({"input": np.zeros((2, HIDDEN), np.float32)})


def test_save_and_load_rebuild_it_without_compiling(encoder, tmp_path):
    _, exe, _ = encoder
    path = tmp_path / "encoder.lwx"
    exe.save(path)
    back = lw.load(path)
    assert type(back) is type(exe) and len(back.calls) == len(exe.calls)
    feed = _feed(2, 7, seed=3)
    np.testing.assert_array_equal(back.run(feed)[0], exe.run(feed)[0])


def test_an_op_outside_the_pipeline_is_named():
    b = OnnxBuilder(opset=17)
    y = b.node("Hardmax", [b.node("Relu", ["input"])], axis=1)
    graph = lw.from_onnx(b.model(("batch", 8), y, ("batch", 8)))
    with pytest.raises(BuildError, match=r"no kernel over symbolic sizes for these ops yet.*\n.*hardmax.*: hardmax$"):
        lw.compile(graph, pipeline="graph")


def test_the_pipeline_argument_is_checked(encoder):
    graph, _, _ = encoder
    with pytest.raises(ArgumentError, match="pipeline='walk'"):
        lw.compile(graph, pipeline="walk")
    with pytest.raises(BuildError, match="polymorphic=False"):
        lw.compile(graph, pipeline="graph", polymorphic=False)


def test_a_dense_stack_of_elementwise_ops_equals_the_compile_once_path():
    """Gemm, the activations and arithmetic of ``SYMBOLIC_OPS`` over a symbolic batch (a tanh GELU
    recognised by the passes, a softmax over two axes)."""
    b = OnnxBuilder(opset=17)
    h = b.node("Relu", [b.gemm("input", 16, 40)])
    h = b.node("Sigmoid", [b.gemm(h, 40, 8)])
    h = b.node("Tanh", [b.node("Sub", [h, b.const(0.25)])])
    h = b.node("Max", [b.node("Exp", [h]), b.node("Sqrt", [b.node("Mul", [h, h])])])
    h = b.node("Min", [b.node("Neg", [h]), b.node("Div", [h, b.const(3.0)])])
    h = b.node("Softmax", [b.gelu_tanh(h)], axis=-1)
    graph = lw.from_onnx(b.model(("batch", 16), h, ("batch", 8)))
    exe, once = lw.compile(graph, pipeline="graph"), lw.compile(graph, polymorphic=True)
    for batch in (1, 3, 17):
        feed = {"input": np.random.default_rng(batch).standard_normal((batch, 16)).astype(np.float32)}
        np.testing.assert_allclose(exe.run(feed)[0], once.run(feed)[0], rtol=1e-5, atol=1e-6)


def test_the_graph_passes_run_on_the_symbolic_graph(encoder):
    """GELU recognised, bias and residual adds in the dense kernels, weights in panels, row ops on
    (rows, n) views: the static pipeline's choices, over symbolic sizes."""
    from loopweave.nn_ops.network.executable import plan_kernel_groups
    from loopweave.nn_ops.onnx_import.symbolic_graph import symbolic_graph
    graph, _, _ = encoder
    g, groups, _, _ = plan_kernel_groups(symbolic_graph(graph), "llvm", copy_outputs=False)
    kernels = [tuple(n.op_type for n in grp.nodes) for grp in groups]
    assert ("dense_kn", "gelu") in kernels and kernels.count(("dense_kn", "add")) == 2
    assert all(n.attrs.get("panels") for n in g.nodes if n.op_type == "dense_kn")
    rows = lw.nn_ops.network.symbolic.symbol("batch") * lw.nn_ops.network.symbolic.symbol("seq")
    assert all(g.shape(n.inputs[0]) == (rows, HIDDEN) for n in g.nodes if n.op_type == "layer_norm")


def test_it_exports_a_library_that_takes_the_sizes(encoder, tmp_path):
    """The same executable family: ``export_library`` of the graph pipeline's encoder runs from C."""
    from .test_export_polymorphic import CC, _app, _run
    if CC is None:
        pytest.skip("no C compiler (cc) to link and call the library")
    _, exe, _ = encoder
    app = _app(tmp_path, exe.export_library(tmp_path / "model.so"))
    for batch, seq in ((2, 7), (1, 1)):
        x = _feed(batch, seq, seed=5)["input"]
        proc = _run(tmp_path, app, x, (batch, seq))
        assert proc.returncode == 0, proc.stderr
        got = np.fromfile(tmp_path / "y.bin", np.float32).reshape(batch, seq, HIDDEN)
        np.testing.assert_array_equal(got, exe.run({"input": x})[0])


def _with_outputs(model, *outputs):
    """``model`` with more graph outputs ((name, shape) of float32 values)."""
    from onnx import TensorProto, helper
    for name, shape in outputs:
        model.graph.output.append(helper.make_tensor_value_info(name, TensorProto.FLOAT, list(shape)))
    return model


def _equals_onnxruntime(model, graph, exe, feeds):
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for feed in feeds:
        want = session.run(None, feed)
        for _ in range(2):          # the checked run, then the run at a binding that ran
            got = exe.run(feed)
            assert len(got) == len(want)
            for g, w in zip(got, want):
                np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
        for g, w in zip(exe.run_each(feed), want):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_outputs_that_are_constants_are_given_back():
    """A folded constant and a view of a weight as outputs, beside a computed one."""
    b = OnnxBuilder(opset=17)
    y = b.node("Relu", [b.gemm("input", 8, 4)])
    c = b.node("Add", [b.const([1.0, 2.0, 3.0]), b.const([0.5, 0.5, 0.5])])
    w = b.node("Reshape", [b.init("w", np.arange(6, dtype=np.float32)), b.init("shape", np.array([2, 3]))])
    model = _with_outputs(b.model(("batch", 8), y, ("batch", 4)), (c, (3,)), (w, (2, 3)))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    feeds = [{"input": np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)} for n in (1, 3, 17)]
    _equals_onnxruntime(model, graph, exe, feeds)


def _concat_model(axis: int):
    """Relu and sigmoid of two dense layers over a symbolic batch, concatenated along ``axis``, then
    scaled (a kernel reading the concat)."""
    b = OnnxBuilder(opset=17)
    left = b.node("Relu", [b.gemm("input", 8, 16)])
    right = b.node("Sigmoid", [b.gemm("input", 8, 16)])
    y = b.node("Mul", [b.node("Concat", [left, right], axis=axis), b.const(2.0)])
    return b.model(("batch", 8), y, ("batch", 32) if axis else (None, 16))


def test_a_concat_along_the_batch_is_computed_in_place(tmp_path):
    """Each dense layer writes its rows into the concat's memory, the second at an offset of 64 * batch
    bytes (so aligned at every batch); no concat kernel runs."""
    model = _concat_model(axis=0)
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert not any("concat" in c.module.name for c in exe.calls) and len(exe.plan.offsets) == 1
    feeds = [{"input": np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)} for n in (1, 2, 5, 17)]
    _equals_onnxruntime(model, graph, exe, feeds)
    with pytest.raises(ArgumentError, match="in place, at offsets"):
        exe.export_library(tmp_path / "model.so")


def test_a_concat_of_symbolic_rows_along_columns_is_a_kernel():
    model = _concat_model(axis=1)
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert any("concat" in c.module.name for c in exe.calls) and not exe.plan.offsets
    feeds = [{"input": np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)} for n in (1, 4, 9)]
    _equals_onnxruntime(model, graph, exe, feeds)


def test_slices_over_a_symbolic_batch():
    """A slice that is one contiguous block of a kernel's result is a view of it (at 64 bytes in); a slice
    of columns of symbolic rows is a kernel."""
    b = OnnxBuilder(opset=17)
    h = b.node("Relu", [b.gemm("input", 8, 32)])
    heads = b.node("Reshape", [h, b.init("shape", np.array([-1, 2, 16]))])
    block = b.node("Slice", [heads, b.init("starts", np.array([0, 1])), b.init("ends", np.array([1, 2])),
                             b.init("axes", np.array([0, 1]))])
    y = b.node("Softmax", [block], axis=-1)         # (a kernel of its own, so the slice is alone)
    columns = b.node("Slice", [h, b.init("starts", np.array([4])), b.init("ends", np.array([12])),
                               b.init("axes", np.array([1]))])
    z = b.node("Sigmoid", [columns])
    model = _with_outputs(b.model(("batch", 8), y, (1, 1, 16)), (z, ("batch", 8)))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert list(exe.plan.offsets.values()) == [64]
    assert sum("slice" in c.module.name for c in exe.calls) == 1
    feeds = [{"input": np.random.default_rng(n).standard_normal((n, 8)).astype(np.float32)} for n in (1, 2, 9)]
    _equals_onnxruntime(model, graph, exe, feeds)


def test_an_embedding_lookup_and_a_where_over_a_symbolic_batch():
    """GPT-2's token embedding (``gather`` of ids) and its mask's ``where``, over a batch var."""
    b = OnnxBuilder(opset=13)
    x = b.node("Gather", [b.init("table", b.weight((50, 16), 1.0)), "input"], axis=0)
    y = b.node("Where", [b.node("Less", [x, b.const(0.0)]), b.node("Mul", [x, b.const(0.1)]), x])
    model = b.model(("batch", 8), y, ("batch", 8, 16), name="embed", input_dtype=np.int64)
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert {"gather", "where"} <= {n for c in exe.calls for n in c.module.name.split("_")}
    for batch in (1, 3):
        ids = np.random.default_rng(batch).integers(0, 50, (batch, 8)).astype(np.int64)
        static = lw.compile(graph.specialize({"input": ids.shape}, {}), progress=False)
        np.testing.assert_array_equal(exe.run({"input": ids})[0], static.run({"input": ids})[0])


def test_math_and_activation_ops_over_a_symbolic_batch():
    """The elementwise math and activations of ``SYMBOLIC_OPS`` beyond the encoder's, each read by a
    sum, over a batch var: equal to the static compile bit for bit."""
    b = OnnxBuilder(opset=18)
    x = b.gemm("input", 8, 16)
    pos = b.node("Add", [b.node("Abs", [x]), b.const(1.0)])
    terms = [b.node("Log", [pos]), b.node("Reciprocal", [pos]), b.node("Pow", [pos, b.node("Sin", [x])]),
             b.node("LeakyRelu", [x], alpha=0.1), b.node("Shrink", [x], lambd=0.5),
             b.node("PRelu", [x, b.const(np.full(16, 0.2, np.float32))])]
    terms += [b.node(op, [x]) for op in ("Floor", "Ceil", "Round", "Sign", "Cos", "Atan", "Elu", "Selu", "Celu",
                                         "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Mish", "ThresholdedRelu")]
    total = terms[0]
    for t in terms[1:]:
        total = b.node("Add", [total, t])
    graph = lw.from_onnx(b.model(("batch", 8), total, ("batch", 16), name="math"))
    exe = lw.compile(graph, pipeline="graph")
    for batch in (1, 5):
        feed = {"input": np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)}
        static = lw.compile(graph.specialize({"input": (batch, 8)}, {}), progress=False)
        np.testing.assert_array_equal(exe.run(feed)[0], static.run(feed)[0])


def test_a_vit_over_a_symbolic_batch():
    """ViT's class token, expanded to the batch (a constant as long as the batch at each probe), is an
    ``expand`` of its one copy over a batch var: equal to the static compile bit for bit."""
    graph = lw.from_onnx(model_zoo.vit_tiny(batch=None, size=32, patch=16, hidden=32, heads=2, layers=1, mlp=64,
                                            classes=10))
    exe = lw.compile(graph, pipeline="graph")
    assert any("expand" in c.module.name for c in exe.calls)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 32, 32)).astype(np.float32)
        static = lw.compile(graph.specialize({"input": x.shape}, {}), progress=False)
        np.testing.assert_array_equal(exe.run({"input": x})[0], static.run({"input": x})[0])


def _position_rows_model():
    """x plus its position rows ``table[arange(seq)]`` (folded at import to the table's first rows)."""
    b = OnnxBuilder(opset=13)
    seq = b.node("Gather", [b.node("Shape", ["input"]), b.const(np.array(1, np.int64))], axis=0)
    ids = b.node("Range", [b.const(np.array(0, np.int64)), seq, b.const(np.array(1, np.int64))])
    rows = b.node("Gather", [b.init("table", b.weight((64, 16), 1.0)), ids], axis=0)
    return b.model(("batch", "seq", 16), b.node("Add", ["input", rows]), ("batch", "seq", 16), name="positions")


def test_position_rows_over_a_symbolic_length_are_a_slice_of_the_table():
    """The rows are a slice of the table over a length var, equal to the static compile bit for bit; a
    length past the table is refused as the kernel reads it."""
    graph = lw.from_onnx(_position_rows_model())
    exe = lw.compile(graph, pipeline="graph")
    assert "slice" in {n for c in exe.calls for n in c.module.name.split("_")}
    for shape in ((1, 1), (3, 64), (2, 5)):
        x = np.random.default_rng(shape[1]).standard_normal(shape + (16,)).astype(np.float32)
        static = lw.compile(graph.specialize({"input": x.shape}, {}), progress=False)
        np.testing.assert_array_equal(exe.run({"input": x})[0], static.run({"input": x})[0])
    with pytest.raises(lw.LoopweaveError, match="index 64 is out of range for axis 0"):
        exe.run({"input": np.zeros((1, 65, 16), np.float32)})


def test_gpt2_over_its_batch_and_length():
    """GPT-2's position rows (a slice of its table) and its causal mask ``[:min(1024, seq)]`` read as
    ``seq`` (its where's check takes it only so): equal to the static compile bit for bit."""
    graph = lw.from_onnx(model_zoo.gpt2(batch=None, **dict(model_zoo.SMALL["gpt2"], seq=None, layers=1)))
    exe = lw.compile(graph, pipeline="graph")
    for batch, seq in ((1, 1), (2, 7), (1, 40)):
        ids = np.random.default_rng(seq).integers(0, 1000, (batch, seq)).astype(np.int64)
        static = lw.compile(graph.specialize({"input": ids.shape}, {}), progress=False)
        np.testing.assert_array_equal(exe.run({"input": ids})[0], static.run({"input": ids})[0])
