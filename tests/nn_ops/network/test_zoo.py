"""The wider model zoo: each architecture's small variant compiled and checked against
onnxruntime; the full-size builders checked for the shapes and sizes of the networks they copy."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.testing import model_zoo  # noqa: E402
from loopweave.nn_ops.testing.onnxruntime_peer import onnxruntime_session, random_feed  # noqa: E402

VARIANTS = [(name, {}) for name in model_zoo.SMALL] + [
    ("efficientnet_lite", {"act": "hardswish"}),
    ("unet", {"up": "nearest"}),
    ("unet", {"up": "linear"}),
    ("gpt2", {"mask": "add"}),
    ("inception_v3", {"count_include_pad": 0}),      # TensorFlow's branch pools: edge windows divide by fewer
]


def _id(variant):
    name, extra = variant
    return name + "".join(f"-{v}" for v in extra.values())


def _check(model, exe, feed):
    want = onnxruntime_session(model, threads=2).run(None, feed)
    got = exe.run(feed)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(b).max())))


@pytest.mark.parametrize("variant", VARIANTS, ids=_id)
def test_small_variant_matches_onnxruntime(variant):
    name, extra = variant
    kwargs = dict(model_zoo.SMALL[name], **extra)
    model = getattr(model_zoo, name)(**kwargs)
    onnx.checker.check_model(model)
    exe = lw.compile(lw.from_onnx(model), progress=False)
    feed = random_feed(exe)
    if name in ("gpt2", "lstm_lm"):      # token ids over the whole vocabulary (random_feed's are small, some negative)
        _check(model, exe, feed)
        shape = (1, kwargs["seq"]) if name == "gpt2" else (kwargs["seq"], kwargs["batch"])
        feed = {"input": np.random.default_rng(1).integers(0, kwargs["vocab"], shape, dtype=np.int64)}
    _check(model, exe, feed)


# (name, parameters, output shape) of the full-size builders: the published networks' sizes
FULL = [
    ("squeezenet1_1", 1_235_496, (1, 1000)),
    ("vit_tiny", 5_717_600, (1, 1000)),
    ("efficientnet_lite", 5_330_564, (1, 1000)),
    ("convnext", 28_589_190, (1, 1000)),
    ("densenet", 8_062_504, (1, 1000)),
    ("unet", 7_768_962, (1, 2, 256, 256)),
    ("gpt2", 82_011_116, (1, 128, 50257)),
    ("mlp_mixer", 18_528_315, (1, 1000)),
    ("style_transfer", 1_679_371, (1, 3, 256, 256)),     # torch's TransformerNet: 1,679,235, and the pads
    ("lstm_lm", 6_182_674, (35, 1, 10000)),
    # torchvision's 2,278,604 and 23,834,568 (without the auxiliary head), and the batch norms' running
    # means and variances (torch's buffers), and ShuffleNet's Split and Reshape sizes
    ("shufflenet_v2", 2_294_954, (1, 1000)),
    ("inception_v3", 23_869_000, (1, 1000)),
    ("resnet50", 25_610_152, (1, 1000)),        # torchvision's 25,557,032 and the running statistics
]


@pytest.mark.parametrize("kwargs,params", [(dict(groups=32, width=4), 25_028_904 + 68_224),
                                           (dict(width=128), 68_883_240 + 68_224)])
def test_resnet50_builder_makes_resnext_and_wide_resnet(kwargs, params):
    """torchvision's resnext50_32x4d and wide_resnet50_2 (their parameters and the batch norms' running
    statistics, 68,224 values) from the same builder."""
    model = model_zoo.resnet50(**kwargs)
    assert sum(int(np.prod(t.dims)) for t in model.graph.initializer) == params


@pytest.mark.parametrize("name,params,out_shape", FULL, ids=[f[0] for f in FULL])
def test_full_size_builders(name, params, out_shape):
    model = getattr(model_zoo, name)()
    onnx.checker.check_model(model)
    assert sum(int(np.prod(t.dims)) for t in model.graph.initializer) == params
    dims = [d.dim_value for d in model.graph.output[0].type.tensor_type.shape.dim]
    assert tuple(dims) == out_shape


def test_every_zoo_model_is_a_zoo_name():
    from loopweave.nn_ops.models import load_onnx_model, zoo_names
    assert zoo_names() == model_zoo.NAMES
    assert set(model_zoo.SMALL) <= set(model_zoo.NAMES)
    assert all(callable(getattr(model_zoo, name)) for name in model_zoo.NAMES)
    assert load_onnx_model("zoo:squeezenet1_1").graph.name == "squeezenet1_1"


@pytest.mark.parametrize("kernel,bias", [((2, 2), True), ((3, 2), False)])
def test_conv_transpose_with_kernel_equal_to_stride_runs_as_1x1_conv_and_depth_to_space(kernel, bias):
    """U-Net's up-convolution: each input pixel writes its own output tile, so the importer emits a
    1x1 conv to OC*KH*KW channels and the CRD depth-to-space reshape/transpose (no gather-form kernel)."""
    b = model_zoo.OnnxBuilder(seed=3)
    w = b.init("w", b.weight((16, 8) + kernel, 0.3))
    inputs = ["input", w] + ([b.init("b", b.weight(8, 0.1))] if bias else [])
    out = b.node("ConvTranspose", inputs, kernel_shape=list(kernel), strides=list(kernel))
    model = b.model((1, 16, 5, 7), out, (1, 8, 5 * kernel[0], 7 * kernel[1]))
    graph = lw.from_onnx(model)
    ops = {n.op_type for n in graph.nodes}
    assert "conv2d_transpose" not in ops and "conv2d" in ops
    exe = lw.compile(graph, progress=False)
    _check(model, exe, random_feed(exe))


def test_silu_fuses_and_squeeze_excitation_stays_blocked():
    """x * Sigmoid(x) is one swish node (a conv epilogue), and SE's per-channel Mul runs in the blocked
    layout: the only NCHW conversions left are the global pools' (SE squeeze and head)."""
    from loopweave.nn_ops.network.passes import optimize
    model = model_zoo.efficientnet_lite(**model_zoo.SMALL["efficientnet_lite"])
    onnx_ops = [n.op_type for n in model.graph.node]
    se_blocks = onnx_ops.count("GlobalAveragePool") - 1          # the head's pool has no gate
    g = optimize(lw.from_onnx(model))
    ops = [n.op_type for n in g.nodes]
    assert ops.count("swish") == onnx_ops.count("Sigmoid") - se_blocks     # every SiLU; the SE gates stay
    assert ops.count("sigmoid") == se_blocks
    assert ops.count("from_blocked") == ops.count("global_avg_pool_blocked") == se_blocks + 1


@pytest.mark.parametrize("name", ["densenet", "squeezenet1_1"])
def test_channel_concats_and_batch_norms_stay_blocked(name):
    """DenseNet's and SqueezeNet's channel Concats join blocked values on their channel-block axis, and
    DenseNet's BN-ReLU before each conv (an unfolded per-channel scale and shift) runs blocked too:
    the only NCHW conversion left is at the head."""
    from loopweave.nn_ops.network.passes import optimize
    g = optimize(lw.from_onnx(getattr(model_zoo, name)(**model_zoo.SMALL[name])))
    concats = [n for n in g.nodes if n.op_type == "concat"]
    assert concats and all(len(g.shape(n.outputs[0])) == 5 for n in concats)
    assert [n.op_type for n in g.nodes].count("from_blocked") == 1


def test_unet_skip_concats_are_blocked_and_large_maps_skip_winograd():
    """U-Net's skip Concat joins the blocked encoder map with the (plain) up-sampled one through a
    to_blocked; Winograd stays within the map sizes it pays on (<= 56x56 on a Zen 4)."""
    from loopweave.nn_ops.network.passes import optimize
    from loopweave.nn_ops.ops.winograd import winograd_pays
    g = optimize(lw.from_onnx(model_zoo.unet(**model_zoo.SMALL["unet"])))
    concats = [n for n in g.nodes if n.op_type == "concat"]
    assert len(concats) == model_zoo.SMALL["unet"]["depth"] and all(len(g.shape(n.outputs[0])) == 5 for n in concats)
    assert winograd_pays((3, 3), (1, 1), (1, 1), (56, 56), 64, 64, "llvm -mcpu=znver4")
    assert not winograd_pays((3, 3), (1, 1), (1, 1), (64, 64), 64, 64, "llvm -mcpu=znver4")


def test_tanh_gelu_is_one_node():
    """GPT-2's gelu_new (Pow, Mul, Add, Mul, Tanh, Add, Mul, Mul) is one tanh-approximate gelu node."""
    from loopweave.nn_ops.network.passes import optimize
    kwargs = model_zoo.SMALL["gpt2"]
    g = optimize(lw.from_onnx(model_zoo.gpt2(**kwargs)))
    gelus = [n for n in g.nodes if n.op_type == "gelu"]
    assert len(gelus) == kwargs["layers"] and all(n.attrs["approximate"] == "tanh" for n in gelus)
    assert not any(n.op_type in ("tanh", "pow_const") for n in g.nodes)


def test_nhwc_transpose_reads_the_blocked_twin():
    """ConvNeXt's depthwise conv -> Transpose(0, 2, 3, 1): one transpose of the blocked value (no
    from_blocked before it)."""
    from loopweave.nn_ops.network.passes import optimize
    g = optimize(lw.from_onnx(model_zoo.convnext(**model_zoo.SMALL["convnext"])))
    producers = g.producer_map()
    transposes = [n for n in g.nodes if n.op_type == "transpose"]
    blocked_reads = [n for n in transposes if len(g.shape(n.inputs[0])) == 5]
    assert len(blocked_reads) == sum(model_zoo.SMALL["convnext"]["depths"])
    assert not any(producers[n.inputs[0]].op_type == "from_blocked" for n in transposes)


def test_style_transfer_pads_and_instance_norms_stay_blocked():
    """The fast neural style net: every reflection pad after the first (the image's) pads the blocked
    twin, every instance norm's means are global pools of it; one from_blocked, before the last conv
    (3 output channels: vector rows, not blocks of one channel)."""
    from loopweave.nn_ops.network.passes import optimize
    g = optimize(lw.from_onnx(model_zoo.style_transfer(**model_zoo.SMALL["style_transfer"])))
    ops = [n.op_type for n in g.nodes]
    pads = [len(g.shape(n.outputs[0])) for n in g.nodes if n.op_type == "pad_index"]
    assert pads == [4] + [5] * (len(pads) - 1)
    assert ops.count("global_avg_pool_blocked") == 2 * 7 and ops.count("from_blocked") == 1
    assert ops.count("to_blocked") == 0 and ops.count("conv2d") == 1 and ops.index("from_blocked") < ops.index("conv2d")
