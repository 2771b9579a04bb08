"""CNNs through the one Graph pipeline (``lw.compile(dynamic_graph, pipeline="graph")``): the blocked
layout the graph passes choose, built over a symbolic batch (Winograd in its rows form, residual adds
and clips as epilogues, a depthwise conv inside its 1x1 projection, pools, a channel concat) and over
a symbolic height and width (the compile-once path's Winograd and row-block variants, picked per
binding), equal to the static compile of each shape and to onnxruntime."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.nn_ops.testing import model_zoo
from loopweave.nn_ops.testing.onnx_builder import OnnxBuilder

SIZE = 32


def _cnn():
    """A stem conv, a residual block of 3x3s (Winograd at 16x16), a depthwise conv with its 1x1
    projection, max pool, a fire module (1x1 and 3x3 expands concatenated), average and global pools."""
    b = OnnxBuilder(opset=13)
    x = b.relu(b.bn(b.conv("input", 3, 16, 3, stride=2), 16))
    y = b.bn(b.conv(b.relu(b.bn(b.conv(x, 16, 16, 3), 16)), 16, 16, 3), 16)
    x = b.relu(b.node("Add", [y, x]))
    x = b.bn(b.conv(b.relu6(b.bn(b.conv(x, 16, 16, 3, groups=16), 16)), 16, 32, 1, pad=0), 32)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    s = b.relu(b.conv(x, 32, 16, 1, pad=0, bias=True))
    x = b.node("Concat", [b.relu(b.conv(s, 16, 16, 1, pad=0, bias=True)), b.relu(b.conv(s, 16, 16, 3, bias=True))],
               axis=1)
    x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Flatten", [b.node("GlobalAveragePool", [x])], axis=1)
    return b.model(("batch", 3, SIZE, SIZE), b.gemm(x, 32, 10), ("batch", 10), name="cnn")


@pytest.fixture(scope="module")
def cnn():
    model = _cnn()
    graph = lw.from_onnx(model)
    return model, graph, lw.compile(graph, pipeline="graph")


def _feed(batch):
    return {"input": np.random.default_rng(batch).standard_normal((batch, 3, SIZE, SIZE)).astype(np.float32)}


def test_its_kernels_are_the_static_compiles_over_a_batch_var(cnn):
    _, _, exe = cnn
    names = [c.module.name for c in exe.calls]
    assert names.count("conv2d_winograd_blocked_relu") == names.count("conv2d_winograd_blocked_add_relu") == 1
    assert "depthwise_blocked_clip_conv2d_blocked" in names
    assert {"pool2d_blocked", "concat", "global_avg_pool_blocked"} <= set(names)
    assert all(set(c.sizes) == {"v0"} and str(c.sizes["v0"]) == "batch" for c in exe.calls)


def _equals_static_and_onnxruntime(model, graph, exe, feed):
    got = exe.run(feed)[0]
    static = lw.compile(graph.specialize({"input": feed["input"].shape}, {}), progress=False)
    np.testing.assert_allclose(got, static.run(feed)[0], rtol=1e-6, atol=1e-6)
    ort = pytest.importorskip("onnxruntime")
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(got, session.run(None, feed)[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("batch", [1, 3])
def test_it_equals_the_static_compile_and_onnxruntime(cnn, batch):
    _equals_static_and_onnxruntime(*cnn, _feed(batch))


@pytest.fixture(scope="module")
def any_size_cnn():
    model = model_zoo.symbolic_sizes(_cnn())
    graph = lw.from_onnx(model)
    return model, graph, lw.compile(graph, pipeline="graph")


#: (batch, height, width) -> the kernel the residual block's second 3x3 conv runs there: Winograd in
#: blocks of 8 tiles (a 16x16 map), of 7 (19x15), the direct conv's blocks of 5 pixels (8x15: too small
#: for Winograd) and its general blocks (8x8)
RESIDUAL_CONV = {(1, 32, 32): "winograd_8", (3, 37, 29): "winograd_7", (1, 16, 30): "rows_of_5", (2, 16, 16): ""}


@pytest.mark.parametrize("shape", list(RESIDUAL_CONV))
def test_over_any_image_size_each_binding_takes_its_variant(any_size_cnn, shape):
    model, graph, exe = any_size_cnn
    batch, h, w = shape
    residual = next(c for c in exe.calls if c.module.name == "conv2d_winograd_blocked_add_relu")
    assert residual.module_at({"N": batch, "H": h, "W": w}).name == \
        "_".join(filter(None, ("conv2d_winograd_blocked_add_relu", RESIDUAL_CONV[shape])))
    feed = {"input": np.random.default_rng(batch).standard_normal((batch, 3, h, w)).astype(np.float32)}
    _equals_static_and_onnxruntime(model, graph, exe, feed)


def test_whole_block_variants_are_built_over_whole_blocks(any_size_cnn):
    """Winograd's blocks of 8 tiles take the map as 2 x a var by 16 x another, the direct conv's rows of
    7 pixels the row as 7 x a var (no code for a partial block); the general kernel any size."""
    _, _, exe = any_size_cnn
    residual = next(c for c in exe.calls if c.module.name == "conv2d_winograd_blocked_add_relu")
    size_names = {v.module.name.rsplit("relu_", 1)[1]: v.module.size_names for v in residual.variants}
    assert size_names["winograd_8"][1:] == ["v1x2", "v2x16"] and size_names["rows_of_7"][2] == "v2x7"
    assert residual.module.size_names == ["v0", "v1", "v2"]


def test_a_squeeze_and_excitation_gate_over_a_symbolic_batch():
    """The gate's reducing 1x1 conv on [N, 16, 1, 1] stays NCHW (4 output channels, too few to block):
    over a batch var it is the row path's kernel, its weight as it lies."""
    b = OnnxBuilder(opset=13)
    x = b.relu(b.conv("input", 16, 16, 3, bias=True))
    gate = b.node("Sigmoid", [b.conv(b.relu(b.conv(b.node("GlobalAveragePool", [x]), 16, 4, 1, pad=0, bias=True)),
                                     4, 16, 1, pad=0, bias=True)])
    model = b.model(("batch", 16, 8, 8), b.node("Mul", [x, gate]), ("batch", 16, 8, 8), name="se")
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    reduce = [c for c in exe.calls if c.module.name == "conv2d_relu"]
    assert len(reduce) == 1 and exe.constants[reduce[0].args[1]].shape == (4, 16, 1, 1)
    for batch in (1, 3):
        feed = {"input": np.random.default_rng(batch).standard_normal((batch, 16, 8, 8)).astype(np.float32)}
        _equals_static_and_onnxruntime(model, graph, exe, feed)


def test_a_residual_projection_gets_no_row_block_variants():
    """A 1x1 strided conv does a ninth of the strided 3x3's work beside it: its general kernel alone,
    as the compile-once path builds it; the 3x3 gets its row blocks."""
    b = OnnxBuilder(opset=13)
    x = b.relu(b.conv("input", 3, 16, 3))
    y = b.relu(b.node("Add", [b.conv(x, 16, 16, 3, stride=2), b.conv(x, 16, 16, 1, stride=2, pad=0)]))
    model = model_zoo.symbolic_sizes(b.model((1, 3, 16, 16), y, (1, 16, 8, 8), name="projection"))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    variants = {c.module.name: [v.module.name for v in c.variants] for c in exe.calls}
    assert variants["conv2d_blocked"] == [] and variants["conv2d_blocked_add_relu"] == [
        "conv2d_blocked_add_relu_rows_of_7", "conv2d_blocked_add_relu_rows_of_5"]
    _equals_static_and_onnxruntime(model, graph, exe, {"input": np.random.default_rng(0).standard_normal(
        (2, 3, 21, 30)).astype(np.float32)})


def test_reductions_and_global_pools_of_plain_maps_over_any_image_size():
    """A mean over channels (ConvNeXt's channels-first layer norm writes it so) and global max and
    average pools of an NCHW map: each its op's own kernel over size vars, the average dividing by the
    map's size computed per call."""
    b = OnnxBuilder(opset=13)
    x = b.relu(b.conv("input", 3, 16, 3, bias=True))
    x = b.node("Sub", [x, b.node("ReduceMean", [x], axes=[1])])
    out = b.node("Add", [b.node("GlobalMaxPool", [x]), b.node("GlobalAveragePool", [x])])
    model = model_zoo.symbolic_sizes(b.model((1, 3, 12, 12), out, (1, 16, 1, 1), name="pools"))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert {"reduce", "global_max_pool", "global_avg_pool"} <= {c.module.name for c in exe.calls}
    for shape in ((1, 3, 12, 12), (2, 3, 9, 17)):
        feed = {"input": np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)}
        _equals_static_and_onnxruntime(model, graph, exe, feed)


def test_reflection_padding_and_nearest_upsampling_over_a_symbolic_batch():
    """The style-transfer net's reflection pad (``pad_index``) and nearest 2x resize (its tables
    constants of the constant map size) over a batch var."""
    b = OnnxBuilder(opset=13)
    x = b.node("Pad", ["input", b.const([0, 0, 2, 2, 0, 0, 2, 2], np.int64)], mode="reflect")
    x = b.relu(b.conv(x, 3, 16, 3, pad=0, bias=True))
    x = b.node("Resize", [x, "", b.const([1.0, 1.0, 2.0, 2.0])], mode="nearest", nearest_mode="floor",
               coordinate_transformation_mode="asymmetric")
    model = b.model(("batch", 3, 8, 8), x, ("batch", 16, 20, 20), name="pad_resize")
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert {"pad_index", "resize"} <= {c.module.name for c in exe.calls}
    for batch in (1, 3):
        feed = {"input": np.random.default_rng(batch).standard_normal((batch, 3, 8, 8)).astype(np.float32)}
        _equals_static_and_onnxruntime(model, graph, exe, feed)


def test_a_unet_over_any_image_size_its_checks_accept():
    """Transposed convs up and skip concats: the sizes its checks equate are one size var (the map a
    multiple of 4 of the deepest), its Winograd variants built over them as they are."""
    model = model_zoo.symbolic_sizes(model_zoo.unet(size=16, base=8, depth=2))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert all(set(c.sizes) == {"v0", "v1", "v2"} for c in exe.calls if c.module.name == "concat")
    for shape in ((1, 3, 16, 16), (2, 3, 12, 20)):
        feed = {"input": np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)}
        _equals_static_and_onnxruntime(model, graph, exe, feed)


def test_save_and_load_keep_it_over_any_image_size(any_size_cnn, tmp_path, request):
    """Every kernel and variant is saved; the loaded executable compiles nothing and runs as the saved one."""
    _, _, exe = any_size_cnn
    path = tmp_path / "cnn.lwx"
    exe.save(path)
    request.getfixturevalue("forbid_compilation")
    back = lw.load(path)
    assert [c.module.name for c in back.calls] == [c.module.name for c in exe.calls]
    assert [len(c.variants) for c in back.calls] == [len(c.variants) for c in exe.calls]
    for shape in ((1, 3, 32, 32), (3, 3, 37, 29)):
        feed = {"input": np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)}
        np.testing.assert_array_equal(back.run(feed)[0], exe.run(feed)[0])


def test_it_exports_a_library_that_takes_the_image_size(any_size_cnn, tmp_path):
    from .test_export_polymorphic import CC, _app, _run
    if CC is None:
        pytest.skip("no C compiler (cc) to link and call the library")
    _, _, exe = any_size_cnn
    app = _app(tmp_path, exe.export_library(tmp_path / "model.so"))
    for shape in ((1, 3, 32, 32), (2, 3, 19, 15)):
        x = np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)
        sizes = dict(zip(("N", "H", "W"), (shape[0], shape[2], shape[3])))
        proc = _run(tmp_path, app, x, [sizes[s] for s in exe.signature.symbols])
        assert proc.returncode == 0, proc.stderr
        got = np.fromfile(tmp_path / "y.bin", np.float32).reshape(shape[0], 10)
        np.testing.assert_array_equal(got, exe.run({"input": x})[0])


def test_a_convnext_over_any_image_size():
    """Its channels-first layer norms (channel means), and the NHWC blocks' layer norm over rows
    ``N * (H//4) * (W//4)``: a product of named sizes, read through the transposes."""
    model = model_zoo.symbolic_sizes(model_zoo.convnext(size=32, classes=10, depths=(1, 1), dims=(16, 32)))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    for shape in ((1, 3, 32, 32), (2, 3, 24, 40)):
        feed = {"input": np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)}
        _equals_static_and_onnxruntime(model, graph, exe, feed)


def test_the_style_transfer_net_over_any_image_size(tmp_path):
    """Reflection pads, instance norms (means over a map of run-time size) and nearest 2x up-sampling,
    whose index tables ``o // 2`` are computed per binding (``BindingTable``), by a loaded one too."""
    model = model_zoo.symbolic_sizes(model_zoo.style_transfer(size=16, base=8, residuals=1))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert len(exe.tables) == 4           # two up-samplings, a table for each of height and width
    for shape in ((1, 3, 16, 16), (2, 3, 32, 24)):
        feed = {"input": np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)}
        _equals_static_and_onnxruntime(model, graph, exe, feed)
    exe.save(tmp_path / "style.lwx")
    feed = {"input": np.random.default_rng(5).standard_normal((1, 3, 24, 40)).astype(np.float32)}
    np.testing.assert_array_equal(lw.load(tmp_path / "style.lwx").run(feed)[0], exe.run(feed)[0])


def test_instance_norm_grouped_conv_space_to_depth_ceil_pool_and_transposed_conv_over_any_image_size():
    """Instance norm, a grouped conv, PRelu, space-to-depth and back (its checks take even maps only:
    probed at even sizes), an average pool in ceil mode and a 2x2/2 transposed conv over N, H, W: equal
    to the static compile bit for bit."""
    b = OnnxBuilder(opset=13)
    x = b.relu(b.conv("input", 3, 16, 3, bias=True))
    x = b.node("InstanceNormalization", [x, b.const(np.linspace(0.5, 1.5, 16).astype(np.float32)),
                                         b.const(np.linspace(-0.1, 0.1, 16).astype(np.float32))])
    x = b.node("PRelu", [b.conv(x, 16, 16, 3, groups=4), b.const(np.full((16, 1, 1), 0.2, np.float32))])
    x = b.node("DepthToSpace", [b.node("SpaceToDepth", [x], blocksize=2)], blocksize=2)
    x = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[2, 2], ceil_mode=1)
    model = model_zoo.symbolic_sizes(b.model((1, 3, 16, 16), b.conv_transpose(x, 16, 8, 2, 2), (1, 8, 16, 16),
                                             name="image_ops"))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    for shape in ((1, 3, 16, 16), (2, 3, 20, 12)):
        feed = {"input": np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)}
        static = lw.compile(graph.specialize({"input": shape}, {}), progress=False)
        np.testing.assert_array_equal(exe.run(feed)[0], static.run(feed)[0])


def test_a_transposed_conv_with_overlapping_taps_and_lrn_over_any_image_size():
    """A 3x3/2 transposed conv (taps overlap: the op's own kernel, not a 2x2 tiling) and a local
    response normalization over N, H, W: equal to the static compile bit for bit."""
    b = OnnxBuilder(opset=13)
    x = b.relu(b.conv("input", 3, 16, 3, bias=True))
    y = b.node("LRN", [b.conv_transpose(x, 16, 8, 3, 2)], size=3)
    model = model_zoo.symbolic_sizes(b.model((1, 3, 8, 8), y, ("N", 8, None, None), name="transposed"))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert {"conv2d_transpose", "lrn"} <= {c.module.name for c in exe.calls}
    for shape in ((1, 3, 8, 8), (2, 3, 10, 6)):
        feed = {"input": np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)}
        static = lw.compile(graph.specialize({"input": shape}, {}), progress=False)
        np.testing.assert_array_equal(exe.run(feed)[0], static.run(feed)[0])


def test_linear_and_cubic_resizes_over_any_image_size():
    """A linear 2x resize (half-pixel) and a cubic one (align corners): their index and weight tables
    are made at each binding from the resize's own description, so the outputs equal the static
    compile's bit for bit."""
    b = OnnxBuilder(opset=13)
    x = b.relu(b.conv("input", 3, 8, 3, bias=True))
    x = b.node("Resize", [x, "", b.const([1.0, 1.0, 2.0, 2.0])], mode="linear",
               coordinate_transformation_mode="half_pixel")
    x = b.node("Resize", [b.conv(x, 8, 8, 3), "", b.const([1.0, 1.0, 2.0, 2.0])], mode="cubic",
               coordinate_transformation_mode="align_corners")
    model = model_zoo.symbolic_sizes(b.model((1, 3, 8, 8), x, (1, 8, 32, 32), name="linear_resize"))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert len(exe.tables) == 8           # an index and a weight table of height and width, per resize
    for shape in ((1, 3, 8, 8), (2, 3, 10, 6)):
        feed = {"input": np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)}
        static = lw.compile(graph.specialize({"input": shape}, {}), progress=False)
        np.testing.assert_array_equal(exe.run(feed)[0], static.run(feed)[0])


def test_a_linear_resize_to_a_skips_size_over_any_image_size():
    """A linear resize to sizes taken from the skip's shape (as torch exports
    ``F.interpolate(size=skip.shape[2:])``): its scale, ``13/7`` at 13 rows, changes with the sizes, and
    its tables are made per binding from them: equal to the static compile bit for bit."""
    b = OnnxBuilder(opset=13)
    full = b.relu(b.conv("input", 3, 8, 3, bias=True))
    half = b.relu(b.conv(full, 8, 8, 3, stride=2, bias=True))

    def shape_slice(x, begin, end):
        return b.node("Slice", [b.node("Shape", [x]), b.const(np.array([begin], np.int64)),
                                b.const(np.array([end], np.int64))])
    sizes = b.node("Concat", [shape_slice(half, 0, 2), shape_slice(full, 2, 4)], axis=0)
    up = b.node("Resize", [half, "", "", sizes], mode="linear", coordinate_transformation_mode="half_pixel")
    model = model_zoo.symbolic_sizes(b.model((1, 3, 16, 16), b.node("Add", [up, full]), (1, 8, 16, 16),
                                             name="resize_to_skip"))
    graph = lw.from_onnx(model)
    exe = lw.compile(graph, pipeline="graph")
    assert len(exe.tables) == 4
    for shape in ((1, 3, 16, 16), (2, 3, 13, 10)):
        feed = {"input": np.random.default_rng(shape[0]).standard_normal(shape).astype(np.float32)}
        static = lw.compile(graph.specialize({"input": shape}, {}), progress=False)
        np.testing.assert_array_equal(exe.run(feed)[0], static.run(feed)[0])
