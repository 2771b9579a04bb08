"""Shape-polymorphic CNNs (``compile_once/cnn.py``): one compile, any batch, height and
width, blocked activations, results checked against onnxruntime."""

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402
from loopweave.nn_ops.network.pending_kernels import Deferred, build_deferred  # noqa: E402
from loopweave.nn_ops.network.polymorphic_executable import PolymorphicExecutable  # noqa: E402
from loopweave.nn_ops.testing import model_zoo  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder, mobilenet_v2, resnet18, symbolic_sizes  # noqa: E402
from loopweave.target import resolve_target  # noqa: E402


_SESSIONS = {}      # id(model) -> (model, its onnxruntime session): a model checked at several sizes loads once


def _ort(model, feed):
    if id(model) not in _SESSIONS:
        _SESSIONS[id(model)] = model, ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return _SESSIONS[id(model)][1].run(None, feed)


def _check(model, exe, shape, seed=0):
    x = np.random.default_rng(seed).standard_normal(shape).astype(np.float32)
    got = exe.run({"input": x})
    for g, w in zip(got, _ort(model, {"input": x})):
        np.testing.assert_allclose(g, w, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(w).max())))


@pytest.fixture(scope="module")
def resnet():
    model = symbolic_sizes(resnet18(size=32, classes=10))
    return model, lw.compile(lw.from_onnx(model), polymorphic=True)


@pytest.mark.parametrize("shape", [(1, 3, 32, 32), (2, 3, 56, 56), (1, 3, 40, 72), (3, 3, 9, 13), (1, 3, 1, 1)])
def test_resnet18_compiled_once_matches_onnxruntime_at_every_size(resnet, shape):
    model, exe = resnet
    _check(model, exe, shape)


def test_resnet18_kernels_fold_batch_norm_and_residual_adds_and_run_again_with_no_compile(resnet, request):
    model, exe = resnet
    convs = sum(n.op_type == "Conv" for n in model.graph.node)
    # one call per conv (its BatchNormalization, ReLU and residual Add inside), the stem's max pool,
    # the global pool and the classifier: no batch-norm, add or layout-copy kernels of their own
    assert len(exe.calls) == convs + 3
    _check(model, exe, (2, 3, 23, 31), seed=1)        # builds the variants this binding picks
    request.getfixturevalue("forbid_compilation")
    _check(model, exe, (2, 3, 23, 31), seed=2)


def test_every_residual_blocks_last_conv_takes_its_add_and_the_blocks_of_a_stage_share_kernels(resnet):
    """A projection shortcut sits between its block's last conv and the Add (torchvision's order); it is
    converted first, so that conv takes the Add as the identity blocks' last convs do and both blocks of
    a stage run one kernel (and one set of variants): one Winograd kernel per stage and epilogue."""
    model, exe = resnet
    made_by = {o: n for n in model.graph.node for o in n.output}
    calls = {c.node: c for c in exe.calls}
    last_convs = [made_by[made_by[n.input[0]].input[0]] for n in model.graph.node if n.op_type == "Add"]
    assert len(last_convs) == 8 and all(n.op_type == "Conv" for n in last_convs)
    for first, second in zip(last_convs[::2], last_convs[1::2]):      # the two blocks of each stage
        a, b = calls[first.name], calls[second.name]
        assert a.module is b.module and [v.module for v in a.variants] == [v.module for v in b.variants]
    winograd = {id(v.module) for c in exe.calls for v in c.variants if v.module.name == "poly_conv_winograd_7"}
    assert len(winograd) == 8       # 4 stages x (conv, BN, ReLU | conv, BN, Add, ReLU)
    # the shortcut's own kernel is just its conv and BN
    shortcuts = [n for n in model.graph.node if n.op_type == "Conv" and n.attribute and
                 any(a.name == "kernel_shape" and list(a.ints) == [1, 1] for a in n.attribute)]
    assert len(shortcuts) == 3 and all(len(calls[n.name].args) == 4 for n in shortcuts)   # x, weight, bias -> out
    # and no row-block variants: a ninth of the strided 3x3 conv's work, a padded last block costs little
    assert all(calls[n.name].variants == () for n in shortcuts)


def test_row_block_variants_of_a_conv_as_wide_as_its_input_are_built_over_whole_blocks(resnet):
    """A row-block variant runs only where its block divides the row; where the output row is as wide
    as the input (stride 1, "same" padding) the kernel takes that width as whole blocks (a size var
    ``v<k>x<pixels>``), so it holds no code for a partial block.  A strided conv's keep plain vars."""
    model, exe = resnet
    conv_nodes = {n.name: n for n in model.graph.node if n.op_type == "Conv"}
    convs = [c for c in exe.calls if c.node in conv_nodes]
    rows = [(c, v.module) for c in convs for v in c.variants if v.module.name.startswith("poly_conv_rows_of_")]
    strided = {name for name, n in conv_nodes.items() if any(a.name == "strides" and list(a.ints) != [1, 1]
                                                             for a in n.attribute)}
    assert {c.node for c, _ in rows} - strided and {c.node for c, _ in rows} & strided
    # one variant of each kind, built here (not into the shared executable): all of them take minutes
    picked = [next(r for r in rows if r[0].node not in strided), next(r for r in rows if r[0].node in strided)]
    built = build_deferred([m for _, m in picked if isinstance(m, Deferred)], exe.target)
    for call, module in picked:
        module = built.get(id(module), module)
        whole = [n for n in module.size_names if n.endswith("x" + module.name.rsplit("_", 1)[1])]
        assert (len(whole) == 1) == (call.node not in strided), (call.node, module.size_names)


@pytest.mark.vector_width
def test_each_binding_runs_the_kernel_that_fits_its_rows(resnet):
    """3x3 stride-1 convs: Winograd where the map is in Winograd's size range, its register block
    8 tiles where the map is even and that divides a row's tiles and 7 does not, else 7 on rows of
    at least 7 tiles (the last block overlapping the one before where 7 does not divide; odd maps
    too); narrower rows and maps outside that range direct kernels
    with register blocks of 7 (or 5) pixels where those divide the row and 8 do not; else the
    general kernel."""
    model, exe = resnet
    conv_nodes = {n.name for n in model.graph.node if n.op_type == "Conv"}
    convs = [c for c in exe.calls if c.node in conv_nodes]
    first = convs[1]        # the first 3x3 conv after the stem and its max pool: maps of H/4 x W/4

    def picked(h, w):
        return first.module_at({"N": 1, "H": h, "W": w}).name

    # with AVX2's 16 registers a block of 2 channel vectors x 7 pixels does not fit: no rows of 7
    wide = resolve_target("llvm").vector_registers >= 32
    assert [v.module.name for v in first.variants] == ["poly_conv_winograd_8", "poly_conv_winograd_7"] + \
        ["poly_conv_rows_of_7"] * wide + ["poly_conv_rows_of_5"]
    assert picked(56, 56) == "poly_conv_winograd_7"     # 14 x 14: 7 tiles a row
    assert picked(64, 80) == "poly_conv_winograd_7"     # 16 x 20: 10 tiles, a tail of 3
    assert picked(64, 64) == "poly_conv_winograd_8"     # 16 x 16 (a U-Net's 256 x 256: 64 x 64)
    assert picked(224, 224) == "poly_conv_winograd_7"   # 56 x 56: 28, which 7 and 4 divide, not 8
    assert picked(60, 56) == "poly_conv_winograd_7"     # 15 x 14: an odd height
    assert picked(60, 72) == "poly_conv_winograd_7"     # 15 x 18: 9 tiles, a tail of 2
    assert picked(68, 64) == "poly_conv_winograd_7"     # 17 x 16: an odd height, 8 tiles a row
    assert picked(64, 60) == "poly_conv_winograd_7"     # 16 x 15: an odd width, 8 tiles a row
    assert picked(8, 8) == "poly_conv"                        # 2 x 2: too small a map for Winograd
    assert picked(80, 48) == "poly_conv"                      # 20 x 12: 6 tiles, fewer than a block
    assert picked(8, 28) == ("poly_conv_rows_of_7" if wide else "poly_conv")   # 2 x 7: direct (16 registers:
    #                                                         the general block of 4 divides the row)
    # the stem (4 channel vectors: 7 pixels would not fit the registers) has only the 5-pixel kernel
    assert [v.module.name for v in convs[0].variants] == ["poly_conv_rows_of_5"]
    for shape in ((1, 3, 56, 56), (1, 3, 64, 80), (1, 3, 60, 56), (2, 3, 60, 80), (1, 3, 64, 64),
                  (1, 3, 60, 72), (1, 3, 58, 62), (1, 3, 80, 48)):
        _check(model, exe, shape, seed=2)


def test_save_and_load_keep_the_polymorphic_cnn(resnet, tmp_path, request):
    model, exe = resnet
    path = tmp_path / "r18.lwx"
    exe.save(path)                  # with every variant, deferred ones built
    request.getfixturevalue("forbid_compilation")
    loaded = lw.load(path)
    assert isinstance(loaded, PolymorphicExecutable)
    assert [len(c.variants) for c in loaded.calls] == [len(c.variants) for c in exe.calls]
    _check(model, loaded, (2, 3, 35, 28), seed=3)
    _check(model, loaded, (1, 3, 56, 56), seed=4)          # Winograd, 7 tiles a block
    _check(model, loaded, (1, 3, 56, 80), seed=5)          # and 5
    _check(model, loaded, (1, 3, 58, 62), seed=6)          # 7 with a tail, odd maps


def _block_net():
    """conv-bn-relu6 (Clip), a residual block, max and average pools, a sigmoid on a pooled map (read
    as NCHW), the global pool and a Gemm; a second output read straight off a conv (blocked)."""
    b = OnnxBuilder(0)
    x = b.relu6(b.bn(b.conv("input", 3, 16, 3, bias=True), 16))
    y = b.bn(b.conv(b.relu(b.bn(b.conv(x, 16, 16, 3), 16)), 16, 16, 3), 16)
    x = b.relu(b.node("Add", [y, x]))
    side = b.conv(x, 16, 32, 1)
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("Sigmoid", [x])
    x = b.node("GlobalAveragePool", [b.conv(x, 16, 32, 3)])
    out = b.gemm(b.node("Flatten", [x], axis=1), 32, 5)
    model = b.model(("N", 3, "H", "W"), out, ("N", 5), name="block_net")
    model.graph.output.append(onnx.helper.make_tensor_value_info(side, onnx.TensorProto.FLOAT,
                                                                 ["N", 32, "H", "W"]))
    return model


@pytest.fixture(scope="module")
def block_net():
    model = _block_net()
    return model, lw.compile(lw.from_onnx(model), polymorphic=True)


@pytest.mark.parametrize("shape", [(1, 3, 8, 8), (2, 3, 13, 21), (1, 3, 3, 3), (1, 3, 5, 3)])
def test_clip_residual_pools_and_values_read_as_nchw(block_net, shape):
    model, exe = block_net
    _check(model, exe, shape)


def test_a_map_smaller_than_a_pool_window_is_refused_by_name(block_net):
    model, exe = block_net
    out = exe.run({"input": np.ones((1, 3, 8, 8), np.float32)})
    before = [o.copy() for o in out]
    with pytest.raises(lw.ArgumentError, match=r"AveragePool.*smaller than the window.*H = 1"):
        exe.run({"input": np.ones((1, 3, 1, 8), np.float32)})
    for o, b in zip(out, before):
        np.testing.assert_array_equal(o, b)


@pytest.mark.parametrize("shape", [(1, 3, 32, 32), (2, 3, 40, 56), (1, 3, 1, 1)])
def test_mobilenet_v2_depthwise_and_padded_channels(shape):
    """Depthwise convs, and 24 channels (not whole blocks of 16: padded with zero channels)."""
    model = symbolic_sizes(mobilenet_v2(size=32, classes=10))
    exe = _compiled(model)
    _check(model, exe, shape)


def test_convnext_layer_norm_over_channels_as_reduce_means():
    """ConvNeXt's channel LayerNorm as ReduceMean / Sub / Pow / Sqrt / Div on maps of symbolic size:
    the means divide by a count known only per call."""
    from loopweave.nn_ops.testing import model_zoo
    model = symbolic_sizes(model_zoo.convnext(**model_zoo.SMALL["convnext"]))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert sum(c.module.name == "poly_reduce" for c in exe.calls) == \
        sum(n.op_type == "ReduceMean" for n in model.graph.node)
    for shape in ((1, 3, 64, 64), (2, 3, 69, 73)):
        _check(model, exe, shape)


@pytest.mark.parametrize("name", ["squeezenet1_1", "densenet"])
def test_channel_concats_ceil_mode_pools_and_batch_norms_after_a_concat(name):
    """SqueezeNet (fire modules' channel concats, ceil-mode max pools without padding, a 1000-class
    conv padded to whole blocks) and DenseNet (growing concats, BatchNormalization + ReLU after each
    concat) compiled once with symbolic batch, height and width."""
    from loopweave.nn_ops.testing import model_zoo
    model = symbolic_sizes(getattr(model_zoo, name)(**model_zoo.SMALL[name]))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    ops = {c.module.name for c in exe.calls}
    assert {"poly_Concat", "poly_pool"} <= ops and ("poly_BatchNormalization" in ops) == (name == "densenet")
    for shape in ((1, 3, 64, 64), (2, 3, 69, 73)):
        _check(model, exe, shape)


def test_squeeze_and_excitation_gates_scale_the_blocked_map_without_layout_copies():
    """EfficientNet's gate (GlobalAveragePool -> conv -> conv -> Sigmoid, [N, C, 1, 1]) times its
    blocked map is one kernel on the blocked values: no from_blocked of the map, no to_blocked of
    the product; results at odd sizes and a batch of 2."""
    model = symbolic_sizes(model_zoo.efficientnet_lite(**model_zoo.SMALL["efficientnet_lite"]))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    gates = sum(n.op_type == "GlobalAveragePool" for n in model.graph.node) - 1      # (and the head's pool)
    assert gates > 0 and sum(c.module.name == "poly_scale_channels" for c in exe.calls) == gates
    assert not [c.node for c in exe.calls if c.module.name in ("poly_from_blocked", "poly_to_blocked")
                and not c.node.startswith("globalaveragepool")]
    for shape in ((1, 3, 64, 64), (2, 3, 37, 45), (1, 3, 9, 13)):
        _check(model, exe, shape)


_COMPILED = {}


def _compiled(model):
    key = model.graph.name
    if key not in _COMPILED:
        _COMPILED[key] = lw.compile(lw.from_onnx(model), polymorphic=True)
    return _COMPILED[key]


def _divided_net(channels: int):
    """conv -> relu -> relu / (relu + 1) -> conv: the division's divisor is computed."""
    b = OnnxBuilder(1)
    r = b.node("Relu", [b.conv("input", 3, channels, 3, bias=True)])
    d = b.node("Div", [r, b.node("Add", [r, b.init("one", np.ones((), np.float32))])])
    out = b.conv(b.node("Sigmoid", [d]), channels, 16, 3)
    return b.model(("N", 3, "H", "W"), out, ("N", 16, "H", "W"), name=f"divided{channels}")


@pytest.mark.vector_width
def test_padded_channels_end_an_epilogue_before_a_division_by_a_computed_value():
    """Zero channels pad 12 output channels to whole vectors (of 8 or 16 lanes); a division by a
    computed value could turn them into NaN (0 / 0), which the next conv's zero weights would carry
    into real channels (0 * NaN). So after a padded conv the division runs in a kernel of its own;
    with 16 channels (no padding at either width) it joins the conv's epilogue."""
    for channels, calls in ((16, 3), (12, 5)):      # + the output's from_blocked; padded: + from_blocked, the rest
        model = _divided_net(channels)
        exe = lw.compile(lw.from_onnx(model), polymorphic=True)
        assert len(exe.calls) == calls, [c.module.name for c in exe.calls]
        _check(model, exe, (2, 3, 9, 11))


def test_grouped_convs_of_whole_channel_blocks_compile_once():
    """Groups of 16-channel blocks (2 x 16 -> 2 x 32 at 3x3, 4 x 16 at 1x1 with a ReLU and a stride)
    run as blocked convs that read their group's input blocks only; one compile, every size."""
    b = OnnxBuilder(0)
    x = b.conv("input", 3, 32, 3)
    x = b.relu(b.conv(x, 32, 64, 3, groups=2, bias=True))
    x = b.conv(x, 64, 64, 1, stride=2, groups=4)
    model = b.model(("N", 3, "H", "W"), x, ("N", 64, "H2", "W2"), name="grouped")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    names = [c.module.name for c in exe.calls]
    assert len(names) == 4 and names[-1].startswith("poly_from_blocked"), names     # three convs, then NCHW
    for shape in ((1, 3, 8, 8), (2, 3, 9, 13), (1, 3, 1, 1)):
        _check(model, exe, shape)


def test_groups_smaller_than_a_block_compile_once_as_block_diagonal_blocks():
    """ResNeXt's groups of 4 and 8 channels (and 16: whole blocks), in = out per group: each block of
    16 channels runs as a group of its own whose weight is zero between the small groups in it; a
    ReLU and a residual add in the epilogue, a stride; one compile, every size, against onnxruntime."""
    b = OnnxBuilder(1)
    x = b.relu(b.conv("input", 3, 64, 3))
    y = b.relu(b.conv(x, 64, 64, 3, groups=16, bias=True))                # 4 channels a group
    y = b.node("Add", [b.conv(y, 64, 64, 3, groups=8), x])                  # 8, then the residual
    y = b.conv(y, 64, 64, 3, stride=2, groups=4)                            # 16: whole blocks
    model = b.model(("N", 3, "H", "W"), y, ("N", 64, "H2", "W2"), name="resnext_like")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    assert len(exe.calls) == 5, [c.module.name for c in exe.calls]       # four convs (the add fused), NCHW
    for shape in ((1, 3, 8, 8), (2, 3, 9, 13), (1, 3, 1, 1)):
        _check(model, exe, shape)


def test_groups_of_other_shapes_compile_once_merged_into_whole_blocks():
    """Groups with more channels out than in (16 -> 32 in 2 groups of 8 in, 16 out), and groups that
    make no whole block at all (8 -> 16 in 2 groups): merged into whole-block groups (here one dense
    conv) whose weight is zero outside each output channel's own group; one compile, every size."""
    b = OnnxBuilder(3)
    x = b.relu(b.conv("input", 3, 16, 3))
    x = b.relu(b.conv(x, 16, 32, 3, groups=2, bias=True))
    x = b.conv(b.conv(x, 32, 8, 1), 8, 16, 3, groups=2)
    model = b.model(("N", 3, "H", "W"), x, ("N", 16, "H", "W"), name="odd_groups")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    for shape in ((1, 3, 8, 8), (2, 3, 9, 13), (1, 3, 1, 1)):
        _check(model, exe, shape)


def test_what_the_cnn_path_refuses_is_listed():
    b = OnnxBuilder(0)
    x = b.conv("input", 3, 16, 3)
    x = b.conv(x, 16, 12, 1)
    pooled = b.node("LpPool", [x], kernel_shape=[3, 3], auto_pad="SAME_UPPER", p=2)
    bias = b.node("ReduceMean", [x], axes=[0, 2, 3], keepdims=0)             # a bias computed: [12]
    x = b.node("Conv", [x, b.init("w", b.weight((12, 12, 1, 1), 0.3)), bias], kernel_shape=[1, 1])
    model = b.model(("N", 3, "H", "W"), b.node("Concat", [x, pooled], axis=1), ("N", 24, "H", "W"), name="refused")
    with pytest.raises(OnnxImportError, match=r"cannot compile shape-polymorphically yet") as info:
        lw.compile(lw.from_onnx(model), polymorphic=True)
    message = str(info.value)
    assert "Conv: a Conv whose bias is computed" in message
    assert "LpPool: auto_pad (give explicit pads)" in message


def test_groups_too_small_to_merge_into_blocks_run_as_vector_rows():
    """Groups of 1 channel in and 3 out (a depthwise multiplier of 3: 16x the multiplies as whole
    blocks) and of 2 in and 1 out, biased, strided: vector rows of the NCHW map, group by group."""
    b = OnnxBuilder(21)
    x = b.relu(b.conv("input", 3, 12, 3))
    tripled = b.conv(x, 12, 36, 3, groups=12, bias=True)                        # 1 in, 3 out per group
    halved = b.conv(tripled, 36, 18, 3, stride=2, groups=18)                    # 2 in, 1 out per group
    model = b.model(("N", 3, "H", "W"), halved, ("N", 18, None, None), name="small_groups")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert [c.module.name for c in exe.calls].count("poly_conv_rows") == 2
    for shape in ((1, 3, 1, 1), (2, 3, 9, 20), (1, 3, 6, 37)):
        _check(model, exe, shape, seed=10)


def test_a_training_mode_batch_norm_after_a_conv_is_not_folded_but_refused_by_name():
    """Batch statistics cannot be folded into a conv's weight: the node is listed as not covered
    (the per-shape path computes it)."""
    b = OnnxBuilder(0, opset=15)
    x = b.conv("input", 3, 16, 3)
    params = [b.init(f"p{k}", np.full(16, 0.5 + k, np.float32)) for k in range(4)]
    y = b.node("BatchNormalization", [x] + params, epsilon=1e-5, training_mode=1)
    model = b.model(("N", 3, "H", "W"), y, ("N", 16, "H", "W"), name="refused_bn")
    with pytest.raises(OnnxImportError) as info:
        lw.compile(lw.from_onnx(model), polymorphic=True)
    message = str(info.value)
    assert "BatchNormalization: a BatchNormalization in training mode" in message


def test_unet_transposed_convs_and_skip_concats_compile_once():
    """U-Net: ConvTranspose 2x2/2 up (a 1x1 conv to 4x the channels, then each tap's channels to its
    pixels, blocked), concatenated with the skip of the same level, whose size equals the up-sampled
    one only where the map halves evenly: a run-time check, refused by name at other sizes."""
    from loopweave.nn_ops.testing import model_zoo
    model = symbolic_sizes(model_zoo.unet(**model_zoo.SMALL["unet"]))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    assert sum(c.module.name == "poly_depth_to_space" for c in exe.calls) == 3
    for shape in ((1, 3, 64, 64), (2, 3, 40, 72), (1, 3, 8, 8)):
        _check(model, exe, shape)
    with pytest.raises(lw.ArgumentError, match=r"H = 36"):
        exe.run({"input": np.zeros((1, 3, 36, 64), np.float32)})


def test_a_transposed_conv_with_overlapping_taps_compiles_once():
    """A 3x3/2 ConvTranspose (taps overlap: the general gather form, NCHW), between blocked convs."""
    b = OnnxBuilder(2)
    x = b.conv_transpose(b.conv("input", 3, 16, 3), 16, 16, 3, 2)
    out = b.conv(b.relu(x), 16, 16, 3)
    model = b.model(("N", 3, "H", "W"), out, ("N", 16, "OH", "OW"), name="overlapping_up")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert "poly_conv_transpose" in {c.module.name for c in exe.calls}
    for shape in ((1, 3, 9, 9), (2, 3, 5, 12)):
        _check(model, exe, shape)


@pytest.mark.parametrize("up", ["nearest", "linear", "linear_corners"])
def test_upsampling_by_whole_factors_compiles_once(up):
    """U-Net with ``F.interpolate(scale_factor=2)`` compiles once.  Nearest: output pixel (y, x)
    reads (y//2, x//2) of the blocked map (the output size floor(2*H) from the symbolic Resize rule).
    Linear (pytorch_half_pixel, as torch exports it): two taps per axis from y // 2 and y % 2, clamped
    at the map's edges; with align_corners, the coordinate computed per row from the run-time size;
    checked against onnxruntime at odd sizes and at 1 pixel too."""
    from loopweave.nn_ops.testing import model_zoo
    model = symbolic_sizes(model_zoo.unet(**dict(model_zoo.SMALL["unet"], up=up)))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    ups = [c.module for c in exe.calls if c.module.name == "poly_upsample"]
    assert len(ups) == 3, [c.module.name for c in exe.calls]
    assert all(("upsample_linear[" in m.get_source("lowered")) == up.startswith("linear") for m in ups)
    for shape in ((1, 3, 64, 64), (2, 3, 40, 72), (1, 3, 8, 24)):
        _check(model, exe, shape)


@pytest.mark.parametrize("transform, factors", [("half_pixel", (2, 3)), ("asymmetric", (3, 2)),
                                                ("pytorch_half_pixel", (1, 4)), ("align_corners", (2, 2)),
                                                ("align_corners", (3, 1))])
def test_linear_upsampling_by_any_whole_factors_matches_onnxruntime(transform, factors):
    b = OnnxBuilder(0)
    x = b.conv("input", 3, 16, 3)
    scales = b.init("scales", np.array([1, 1, *factors], np.float32))
    y = b.node("Resize", [x, "", scales], mode="linear", coordinate_transformation_mode=transform)
    model = b.model(("N", 3, "H", "W"), y, ("N", 16, "OH", "OW"), name="linear_up")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    for shape in ((1, 3, 5, 7), (2, 3, 1, 1), (1, 3, 2, 9)):
        _check(model, exe, shape)


def _resize_model(mode, transform, scales=None, sizes_from_input=False, channels=16, **attrs):
    """A conv (blocked: 16 channels) or the input itself (plain: 3 channels), then a Resize by constant
    ``scales``, or by sizes computed from its shape (2 rows and 3 columns more); opset 18 (antialias)."""
    b = OnnxBuilder(0, opset=18)
    x = b.conv("input", 3, 16, 3) if channels == 16 else "input"
    if sizes_from_input:
        sizes = b.node("Add", [b.node("Shape", [x]), b.const([0, 0, 2, 3], np.int64)])
        y = b.node("Resize", [x, "", "", sizes], mode=mode, coordinate_transformation_mode=transform, **attrs)
    else:
        y = b.node("Resize", [x, "", b.init("scales", np.array(scales, np.float32))], mode=mode,
                   coordinate_transformation_mode=transform, **attrs)
    return b.model(("N", 3, "H", "W"), y, ("N", channels, "OH", "OW"), name=f"resize_{mode}")


@pytest.mark.parametrize("mode, transform, scales, sizes, channels, attrs", [
    ("linear", "pytorch_half_pixel", None, True, 16, {}),
    ("nearest", "half_pixel", None, True, 16, {"nearest_mode": "round_prefer_ceil"}),
    ("cubic", "align_corners", [1, 1, 2, 2], False, 16, {}),
    ("cubic", "half_pixel", [1, 1, 1.5, 2.5], False, 16, {"exclude_outside": 1}),
    ("linear", "asymmetric", [1, 1, 1.5, 1.25], False, 3, {}),
    ("nearest", "asymmetric", None, True, 3, {"nearest_mode": "floor"}),
    ("linear", "half_pixel", [1, 1, 0.5, 0.5], False, 16, {"antialias": 1}),
    ("cubic", "half_pixel", [1, 1, 0.6, 1.5], False, 3, {"antialias": 1}),
])
def test_any_resize_of_height_and_width_compiles_once_with_tables_per_binding(mode, transform, scales, sizes,
                                                                             channels, attrs, monkeypatch):
    """Sizes given (here computed from the input's shape, as torch exports ``F.interpolate(size=...)``)
    or scales that are not whole factors: the source rows and columns and their weights are tables
    computed per binding, by the code that makes a static compile's; blocked (after a conv) and
    plain (the 3-channel input) maps; checked against onnxruntime at sizes where the factor is not
    whole and at one row or column, with no compilation at run time."""
    import loopweave.backends.build as build_module
    from loopweave.backends.llvm import jit
    model = _resize_model(mode, transform, scales, sizes, channels, **attrs)
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable) and exe.tables
    assert "poly_resize_taps" in {c.module.name for c in exe.calls}
    exe.build_variants()            # the convs' deferred ones: no kernel is built below
    for module, name in ((build_module, "build"), (build_module, "lower"), (jit, "compile_ir")):
        monkeypatch.setattr(module, name, lambda *a, **k: pytest.fail("compiled at run time"))
    shapes = ((1, 3, 6, 7), (2, 3, 9, 4), (1, 3, 3, 1)) if sizes else ((1, 3, 6, 7), (2, 3, 9, 4), (1, 3, 2, 2))
    for shape in shapes:
        _check(model, exe, shape)


def test_a_down_scaling_resize_imports_checks_its_smallest_input_and_compiles_once():
    """Scales of 0.5 leave no output for a one-pixel map: import records the condition (and tries its
    first specialisation at a size that meets it), a feed that breaks it is refused naming the node,
    and every other size runs compiled once."""
    model = _resize_model("linear", "half_pixel", [1, 1, 0.5, 0.25], channels=16)
    graph = lw.from_onnx(model)
    assert graph.trial == {"H": 4, "N": 4, "W": 4}            # every symbol at the smallest size that works
    exe = lw.compile(graph, polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    for shape in ((1, 3, 6, 7), (2, 3, 9, 4), (1, 3, 4, 4)):
        _check(model, exe, shape)
    with pytest.raises(lw.ArgumentError, match=r"node 'resize_4_node' \(Resize\): an input of size W scaled by "
                                              r"1/4 leaves no output along axis 3: it needs W >= 4 \(here"):
        exe.run({"input": np.zeros((1, 3, 8, 3), np.float32)})


def test_a_model_whose_smallest_input_is_over_64_imports_at_a_larger_trial_size():
    """Inception-v3 needs an input of at least 75 pixels (unpadded strided convs); its symbolic import
    tried sizes up to 64 only, fell back to 1 and reported the model as unimportable.  Here an 80x80
    pool: the trial import takes the first listed size that holds, and the model compiles once."""
    b = OnnxBuilder(2)
    y = b.node("AveragePool", ["input"], kernel_shape=[80, 80], strides=[8, 8])
    model = b.model(("N", 3, "H", "W"), y, ("N", 3, "H2", "W2"), name="wide_pool")
    graph = lw.from_onnx(model)
    assert graph.trial == {"H": 96, "N": 96, "W": 96}, graph.trial      # the common size, as above
    exe = lw.compile(graph, polymorphic=True)
    for shape in ((1, 3, 80, 80), (2, 3, 97, 120)):
        _check(model, exe, shape)


def test_unet_resized_to_its_skips_sizes_runs_odd_sizes(tmp_path):
    """``F.interpolate(x, size=skip.shape[2:])``: Resize's sizes come from Shape -> Slice -> Concat,
    so an input whose halvings are odd (37 -> 18 -> 9) still lines up with its skips; saved and
    loaded, the tables come back with the walk."""
    from loopweave.nn_ops.testing import model_zoo
    model = symbolic_sizes(model_zoo.unet(**dict(model_zoo.SMALL["unet"], up="linear_sizes")))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    for shape in ((1, 3, 64, 64), (2, 3, 37, 50), (1, 3, 9, 13)):
        _check(model, exe, shape)
    assert ".rows_index[H, 2]" in exe._repr_html_()            # the last level's tables, by their sizes
    exe.save(tmp_path / "unet.lwx")
    loaded = lw.load(tmp_path / "unet.lwx")
    assert set(loaded.tables) == set(exe.tables)
    _check(model, loaded, (1, 3, 21, 30))


def test_other_resizes_are_refused_by_name():
    b = OnnxBuilder(0, opset=18)
    x = b.conv("input", 3, 16, 3)
    sizes = b.node("Sub", [b.node("Shape", [x]), b.const([0, 0, 2, 3], np.int64)])
    y = b.node("Resize", [x, "", "", sizes], mode="cubic", coordinate_transformation_mode="half_pixel", antialias=1)
    model = b.model(("N", 3, "H", "W"), y, ("N", 16, "OH", "OW"), name="antialiased")
    with pytest.raises(OnnxImportError, match=r"Resize: antialias with sizes given \(its tap count depends on the "
                                              r"scale, which the input size changes\)"):
        lw.compile(lw.from_onnx(model), polymorphic=True)


def test_conv_epilogues_that_read_different_values_are_different_kernels():
    """Two convs of one shape whose epilogues differ only in which of the kernel's own values an Add
    reads (conv + relu(conv) against relu(conv) + relu(conv)): two kernels, each with its own result
    (their structural keys once read both as "an own value", and the second reused the first's)."""
    b = OnnxBuilder(2)
    x = b.conv("input", 3, 16, 3)
    c1 = b.conv(x, 16, 16, 3)
    x = b.node("Add", [c1, b.relu(c1)])
    r2 = b.relu(b.conv(x, 16, 16, 3))
    out = b.node("Add", [r2, r2])
    model = b.model(("N", 3, "H", "W"), out, ("N", 16, "H", "W"), name="epilogue_operands")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert len({c.module.symbol for c in exe.calls}) == len(exe.calls) == 4, [c.module.name for c in exe.calls]
    _check(model, exe, (2, 3, 9, 11))


def test_activations_with_attributes_run_in_conv_epilogues_keyed_by_their_attributes():
    """LeakyRelu, HardSwish and HardSigmoid (YOLO's, MobileNetV3's) compile once inside the convs'
    epilogues; two convs of one shape whose LeakyRelus differ only in their slope are two kernels."""
    b = OnnxBuilder(4, opset=14)
    x = b.node("LeakyRelu", [b.conv("input", 3, 16, 3)], alpha=0.1)
    x = b.node("LeakyRelu", [b.conv(x, 16, 16, 3)], alpha=0.1)
    x = b.node("LeakyRelu", [b.conv(x, 16, 16, 3)], alpha=0.3)
    x = b.node("HardSwish", [b.conv(x, 16, 16, 3)])
    x = b.node("HardSigmoid", [b.conv(x, 16, 24, 1)], alpha=0.25, beta=0.4)
    model = b.model(("N", 3, "H", "W"), x, ("N", 24, "H", "W"), name="attributed_activations")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    symbols = [c.module.symbol for c in exe.calls]
    assert len(symbols) == 6, [c.module.name for c in exe.calls]       # five convs, then NCHW
    assert symbols[1] != symbols[2]
    for shape in ((1, 3, 9, 11), (2, 3, 8, 8), (1, 3, 1, 1)):
        _check(model, exe, shape)


def test_a_global_max_pool_compiles_once():
    """GlobalMaxPool on the blocked map (a classifier head, squeeze-excitation by max), 24 channels
    (padded to two blocks), then a dense layer: one compile, every size, 1x1 included."""
    b = OnnxBuilder(5)
    x = b.node("GlobalMaxPool", [b.relu(b.conv(b.relu(b.conv("input", 3, 16, 3)), 16, 24, 3, stride=2))])
    out = b.gemm(b.node("Flatten", [x], axis=1), 24, 10)
    model = b.model(("N", 3, "H", "W"), out, ("N", 10), name="global_max")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert "poly_global_max_pool" in {c.module.name for c in exe.calls}
    for shape in ((1, 3, 9, 11), (2, 3, 8, 8), (1, 3, 1, 1)):
        _check(model, exe, shape)


def test_math_activations_run_in_conv_epilogues_and_prelu_after_them():
    """Mish (YOLOv4's), Elu, Gelu and Softplus in the convs' epilogues (24 channels: a padded block,
    whose zeros they keep finite), then a PRelu by a per-channel slope: compiled once, every size."""
    b = OnnxBuilder(6, opset=20)
    x = b.node("Mish", [b.conv("input", 3, 16, 3)])
    x = b.node("Elu", [b.conv(x, 16, 24, 3)], alpha=0.5)
    x = b.node("Softplus", [b.node("Gelu", [b.conv(x, 24, 24, 1)], approximate="tanh")])
    x = b.node("PRelu", [x, b.init("slope", b.weight((24, 1, 1), 0.5))])
    model = b.model(("N", 3, "H", "W"), x, ("N", 24, "H", "W"), name="math_activations")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    # three convs with their activations, the NCHW conversion, the PRelu
    assert [c.module.name for c in exe.calls] == ["poly_conv"] * 3 + ["poly_from_blocked", "poly_group"]
    for shape in ((1, 3, 9, 11), (2, 3, 1, 1)):
        _check(model, exe, shape)


def test_instance_norm_and_group_norm_as_torch_exports_it_compile_once():
    """InstanceNormalization after a conv (style transfer's: on the conv's blocked result, 8
    channels padded to a block), then torch's GroupNorm(2, 8) as it exports: a (N, 2, -1) view,
    InstanceNormalization by ones and zeros, the view back, a per-channel scale and shift.
    Statistics over symbolic sizes; a 1x1 map (variance 0) too."""
    b = OnnxBuilder(13)
    x = b.conv("input", 3, 8, 3)
    x = b.node("InstanceNormalization", [x, b.init("s", b.weight((8,), 1.0)), b.init("b", b.weight((8,), 1.0))],
               epsilon=1e-4)
    g = b.node("Reshape", [x, b.const([0, 2, -1], np.int64)])
    g = b.node("InstanceNormalization", [g, b.init("one", np.ones(2, np.float32)),
                                         b.init("zero", np.zeros(2, np.float32))])
    g = b.node("Reshape", [g, b.node("Shape", [x])])
    g = b.node("Add", [b.node("Mul", [g, b.init("gs", b.weight((8, 1, 1), 1.0))]),
                       b.init("gb", b.weight((8, 1, 1), 1.0))])
    model = b.model(("N", 3, "H", "W"), g, ("N", 8, "H", "W"), name="instance_norm")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert [c.module.name for c in exe.calls] == ["poly_conv", "poly_InstanceNormalization", "poly_from_blocked",
                                                   "poly_group_norm", "poly_group"]
    for shape in ((1, 3, 5, 7), (2, 3, 9, 4), (1, 3, 1, 1)):
        _check(model, exe, shape)


def test_group_normalization_compiles_once():
    """GroupNormalization as an op (opset 21: a scale and bias per channel), 4 groups of 3 channels
    (a group is not a whole 16-channel block), over maps of any size."""
    b = OnnxBuilder(15, opset=21)
    x = b.node("GroupNormalization", [b.conv("input", 3, 12, 3), b.init("s", b.weight((12,), 1.0)),
                                      b.init("b", b.weight((12,), 1.0))], num_groups=4, epsilon=1e-3)
    model = b.model(("N", 3, "H", "W"), b.relu(x), ("N", 12, "H", "W"), name="group_norm")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert "poly_group_norm" in {c.module.name for c in exe.calls}
    for shape in ((1, 3, 5, 7), (2, 3, 1, 1)):
        _check(model, exe, shape)


def test_depth_to_space_and_space_to_depth_compile_once():
    """A pixel shuffle both ways (DCR and CRD), then back with SpaceToDepth: the kernels compute
    ``2*H`` from ``H`` and ``H//2`` from ``2*H``; a 1x1 map too."""
    b = OnnxBuilder(14)
    x = b.conv("input", 3, 16, 3)
    up = b.node("Add", [b.node("DepthToSpace", [x], blocksize=2, mode="CRD"),
                        b.node("DepthToSpace", [x], blocksize=2, mode="DCR")])
    model = b.model(("N", 3, "H", "W"), b.node("SpaceToDepth", [up], blocksize=2), ("N", 16, "H", "W"),
                    name="pixel_shuffle")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert {"poly_depth_to_space", "poly_space_to_depth"} <= {c.module.name for c in exe.calls}
    for shape in ((1, 3, 5, 7), (2, 3, 1, 1)):
        _check(model, exe, shape)


def test_local_response_normalization_compiles_once():
    """LRN across the channels after a conv (AlexNet's, GoogLeNet's), over maps of any size."""
    b = OnnxBuilder(16)
    x = b.node("LRN", [b.relu(b.conv("input", 3, 16, 3))], size=5, alpha=1e-3, beta=0.75, bias=2.0)
    model = b.model(("N", 3, "H", "W"), x, ("N", 16, "H", "W"), name="lrn")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert "poly_lrn" in {c.module.name for c in exe.calls}
    for shape in ((1, 3, 5, 7), (2, 3, 1, 1)):
        _check(model, exe, shape)


def test_instance_norm_between_convs_stays_blocked_with_its_relu():
    """conv, InstanceNormalization, ReLU, conv (a style-transfer network's blocks): the norm runs on
    the conv's blocked result with the ReLU as its epilogue, no layout change until the end."""
    b = OnnxBuilder(17)
    x = "input"
    for k, (cin, cout) in enumerate(((3, 32), (32, 32))):
        x = b.relu(b.node("InstanceNormalization", [b.conv(x, cin, cout, 3), b.init("s", b.weight((cout,), 1.0)),
                                                    b.init("b", b.weight((cout,), 1.0))], epsilon=1e-3))
    model = b.model(("N", 3, "H", "W"), x, ("N", 32, "H", "W"), name="style_blocks")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert [c.module.name for c in exe.calls] == ["poly_conv", "poly_InstanceNormalization"] * 2 + ["poly_from_blocked"]
    for shape in ((1, 3, 9, 13), (2, 3, 1, 1)):
        _check(model, exe, shape)


def test_the_style_transfer_net_compiles_once_and_stays_blocked():
    """The fast neural style net with symbolic batch and image size: reflection pads, convs and
    instance norms (with their ReLU and residual adds) all on blocked maps, one from_blocked before
    the last conv, whose 3 output channels run as vector rows of the NCHW map (``conv2d_rows``);
    an image no larger than the first pad (4) is refused by name before anything runs."""
    model = symbolic_sizes(model_zoo.style_transfer(**model_zoo.SMALL["style_transfer"]))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    names = [c.module.name for c in exe.calls]
    assert names.count("poly_from_blocked") == 1 and names[-2:] == ["poly_from_blocked", "poly_conv_rows"]
    assert "poly_to_blocked" not in names and names.count("poly_InstanceNormalization") == 7
    for shape in ((1, 3, 32, 32), (2, 3, 20, 28), (1, 3, 12, 16)):
        _check(model, exe, shape)
    with pytest.raises(lw.ArgumentError, match=r"reflect padding by 4 needs axis 2 larger than that, got H \(here H = 3\)"):
        exe.run({"input": np.zeros((1, 3, 3, 3), np.float32)})


def test_a_conv_after_a_reflection_pad_has_whole_tile_winograd_variants():
    """Reflection pad then a 3x3 conv without padding (the style net's residual blocks): its input
    is two more than whole tiles, so the whole-block Winograd kernels are built over ``k * var + 2``
    and picked where the map (H x W) is even and their blocks divide its rows, as for a padded conv;
    the any-size one over ``var + 2`` by ``var + 15`` (a size var is at least 1: its input holds a
    window, its rows at least a block of 7 tiles)."""
    b = OnnxBuilder(18)
    x = b.conv(b.relu(b.conv("input", 3, 16, 3)), 16, 16, 3)        # blocked, 16 channels
    x = b.relu(b.conv(b.node("Pad", [x, b.const([0, 0, 1, 1, 0, 0, 1, 1], np.int64)], mode="reflect"), 16, 16, 3,
                      pad=0))
    model = b.model(("N", 3, "H", "W"), x, ("N", 16, "H", "W"), name="reflect_conv")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    unpadded = [c for c in exe.calls if c.module.name == "poly_conv" and c.variants][-1]
    assert [v.module.name for v in unpadded.variants][:2] == ["poly_conv_winograd_8", "poly_conv_winograd_7"]

    def picked(h, w):
        return unpadded.module_at({"N": 1, "H": h, "W": w}).name
    assert picked(16, 20) == "poly_conv_winograd_7"     # 8 x 10 tiles: a tail
    assert picked(16, 32) == "poly_conv_winograd_8"     # 8 x 16
    assert picked(15, 28) == "poly_conv_winograd_7"     # an odd height
    assert picked(20, 12) not in ("poly_conv_winograd_8", "poly_conv_winograd_7")    # 6 tiles a row
    assert len([k for k in unpadded.sizes if k.endswith("x1p2")]) == 1         # H + 2
    assert len([k for k in unpadded.sizes if k.endswith("x1p15")]) == 1        # W + 15: 7 tiles at least
    for shape in ((1, 3, 16, 20), (2, 3, 16, 32), (1, 3, 15, 28), (1, 3, 2, 2), (1, 3, 20, 12)):
        _check(model, exe, shape, seed=7)


def test_convs_with_fewer_than_four_output_channels_run_as_vector_rows():
    """A conv to 3 channels (padded, biased) and one to 1 (strided, dilated) after blocked convs:
    vector rows of the NCHW map, the row's tail masked, at widths below, at and above a vector's
    and at 1 x 1."""
    b = OnnxBuilder(19)
    x = b.relu(b.conv("input", 3, 16, 3))
    image = b.conv(x, 16, 3, 3, bias=True)
    mask = b.node("Conv", [x, b.init("w", b.weight((1, 16, 3, 3), 0.3))], kernel_shape=[3, 3], strides=[2, 2],
                  pads=[2, 2, 2, 2], dilations=[2, 2])
    out = b.node("Add", [image, b.node("ReduceMax", [mask], axes=[2, 3], keepdims=1)])
    model = b.model(("N", 3, "H", "W"), out, ("N", 3, "H", "W"), name="few")
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert [c.module.name for c in exe.calls].count("poly_conv_rows") == 2
    for shape in ((1, 3, 1, 1), (2, 3, 5, 7), (1, 3, 9, 40), (1, 3, 4, 33)):
        _check(model, exe, shape, seed=8)


def test_pools_of_maps_whose_channels_are_no_whole_blocks_run_as_they_lie():
    """Max and average pools (padded, strided) and both global pools of an image's 3
    channels: NCHW kernels of their own (``pool2d``, a mean or max over the map), no blocked copy."""
    b = OnnxBuilder(20)
    pooled = b.node("MaxPool", ["input"], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    averaged = b.node("AveragePool", [pooled], kernel_shape=[2, 2], strides=[2, 2], pads=[0, 0, 1, 1])
    spread = b.node("Add", [b.node("GlobalMaxPool", ["input"]), b.node("GlobalAveragePool", ["input"])])
    model = b.model(("N", 3, "H", "W"), b.node("Add", [averaged, spread]), ("N", 3, None, None))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    names = [c.module.name for c in exe.calls]
    assert {"poly_plain_pool", "poly_global_mean_plain", "poly_global_max_plain"} <= set(names)
    assert "poly_to_blocked" not in names
    for shape in ((1, 3, 1, 1), (2, 3, 7, 10), (1, 3, 16, 5)):
        _check(model, exe, shape, seed=9)
