"""choose_conv_layout on random small CNNs, with channel counts that leave partial vectors: whatever
the pass decides (blocks of 8, padding to whole vectors of 16, NCHW), the network computes what
onnxruntime computes."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
hypothesis = pytest.importorskip("hypothesis")
from hypothesis import HealthCheck, given, settings, strategies as st  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.network import passes  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder  # noqa: E402
from loopweave.target import resolve_target  # noqa: E402

CHANNELS = (8, 16, 24, 40)
STEPS = ("conv", "depthwise", "relu", "sigmoid", "residual", "one_minus", "pool", "concat", "div", "instance_norm",
         "avg_pool", "grouped")


def _network(steps, channels, seed):
    """A stem conv, then ``steps`` (each with a channel count from ``channels`` where it makes
    one), then a global average pool; returns the model and its output channel count."""
    b = OnnxBuilder(seed)
    x, c = b.relu(b.conv("input", 8, 16, 3)), 16
    size, earlier = 12, {}
    for step, out in zip(steps, channels):
        if step == "conv":
            x, c = b.conv(x, c, out, 1, bias=True), out
        elif step == "depthwise":
            x = b.conv(x, c, c, 3, groups=c, bias=True)
        elif step in ("relu", "sigmoid"):
            x = b.node(step.capitalize(), [x])
        elif step == "residual" and (c, size) in earlier:
            x = b.node("Add", [x, earlier[(c, size)]])
        elif step == "one_minus":
            x = b.node("Sub", [b.init("one", np.ones((), np.float32)), x])
        elif step == "pool" and size > 3:
            x, size = b.node("MaxPool", [x], kernel_shape=[2, 2], strides=[2, 2]), size // 2
        elif step == "grouped":         # ResNeXt's groups of 4 channels, merged into whole blocks
            x = b.conv(x, c, c, 3, groups=c // 4, bias=True)
        elif step == "avg_pool":        # Inception's branch pool: edge windows divide by their taps inside
            x = b.node("AveragePool", [x], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1],
                       count_include_pad=seed % 2)
        elif step == "concat":
            x, c = b.node("Concat", [x, b.conv(x, c, out, 1)], axis=1), c + out
        elif step == "div":             # x / (1 + sigmoid(conv(x))): a division, well conditioned
            d = b.node("Add", [b.node("Sigmoid", [b.conv(x, c, c, 1)]), b.init("one", np.ones((), np.float32))])
            x = b.node("Div", [x, d])
        elif step == "instance_norm":   # statistics over the map: global pools of the blocked twin
            x = b.node("InstanceNormalization", [x, b.init("s", b.weight((c,), 1.0)), b.init("b", b.weight((c,), 1.0))])
        earlier[(c, size)] = x
    return b.model((1, 8, 12, 12), b.node("GlobalAveragePool", [x]), (1, c, 1, 1)), c


@settings(max_examples=25, deadline=None, derandomize=True, suppress_health_check=[HealthCheck.too_slow])
@given(steps=st.lists(st.sampled_from(STEPS), min_size=2, max_size=6),
       channels=st.lists(st.sampled_from(CHANNELS), min_size=6, max_size=6), seed=st.integers(0, 3))
def test_random_cnns_match_onnxruntime_with_16_lane_blocks(steps, channels, seed):
    """The pass runs as on a 16-lane CPU whatever this machine has (blocks of 16 and 8 both run
    anywhere), so 24 and 40 channels meet its padding rule."""
    model, c = _network(steps, channels, seed)
    original = passes.choose_conv_layout
    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(passes, "choose_conv_layout", lambda g: original(g, lanes=16))
        exe = lw.compile(lw.from_onnx(model), progress=False)
    x = np.random.default_rng(seed).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    got, = exe.run({"input": x})
    assert got.shape == (1, c, 1, 1)
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_an_instance_norm_between_convs_stays_blocked():
    """InstanceNormalization is written as means over H and W and elementwise ops; the means are
    global pools of the blocked twin, so nothing between the two convs changes layout."""
    b = OnnxBuilder(3)
    x = b.node("InstanceNormalization", [b.conv("input", 8, 32, 3), b.init("s", b.weight((32,), 1.0)),
                                         b.init("b", b.weight((32,), 1.0))])
    model = b.model((1, 8, 12, 12), b.conv(b.relu(x), 32, 32, 3), (1, 32, 12, 12))
    exe = lw.compile(lw.from_onnx(model), progress=False)
    ops = [n.op_type for n in exe.graph.nodes]
    assert ops.count("global_avg_pool_blocked") == 2 and ops.count("from_blocked") == 1, ops
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-4, atol=1e-4)


def test_an_average_pool_that_excludes_the_padding_stays_blocked():
    """Inception's branch pool (3x3, stride 1, padding 1, edge windows dividing by their taps inside)
    between convs reads and writes the blocked twins: it ran in NCHW between two transforms, and
    dividing every tap by its count made it 257 us at 768 channels x 17x17."""
    b = OnnxBuilder(4)
    x = b.node("AveragePool", [b.conv("input", 8, 32, 3)], kernel_shape=[3, 3], strides=[1, 1], pads=[1, 1, 1, 1])
    model = b.model((1, 8, 12, 12), b.conv(x, 32, 32, 1), (1, 32, 12, 12))
    exe = lw.compile(lw.from_onnx(model), progress=False)
    ops = [n.op_type for n in exe.graph.nodes]
    assert "pool2d_blocked" in ops and "avg_pool2d" not in ops and ops.count("from_blocked") == 1, ops
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-5, atol=1e-5)


def test_a_grouped_conv_of_small_groups_stays_blocked():
    """RegNet's 3x3 conv in groups of 8 channels (48 of them): pairs of groups merged into 16-channel
    blocks, one blocked kernel with 3 groups (it ran in NCHW at ~65 GFLOPS between two transforms)."""
    b = OnnxBuilder(5)
    x = b.relu(b.conv("input", 8, 48, 3))
    x = b.relu(b.conv(x, 48, 48, 3, stride=2, groups=6, bias=True))
    model = b.model((1, 8, 12, 12), b.conv(x, 48, 32, 1), (1, 32, 6, 6))
    exe = lw.compile(lw.from_onnx(model), progress=False)
    convs = [n for n in exe.graph.nodes if n.op_type == "conv2d_blocked"]
    lanes = resolve_target("llvm").lanes("float32")     # 16-channel blocks: pairs of groups; 8: each its own
    assert [n.attrs.get("groups", 1) for n in convs] == [1, 48 // max(8, lanes), 1], [n.attrs for n in convs]
    assert [n.op_type for n in exe.graph.nodes].count("from_blocked") == 1
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("target, winograd", [("llvm -mcpu=znver4", True),    # one FMA a cycle, 1 MiB L2: to 56x56
                                              ("llvm -mcpu=znver1", False)])  # one, 512 KiB: to 16x16
def test_winograd_is_chosen_by_the_targets_facts(target, winograd):
    """The pass decides for the target it is given (a cross target too), from its FMA rate and L2."""
    b = OnnxBuilder(1)
    x = b.relu(b.conv("input", 8, 32, 3))
    model = b.model((1, 8, 28, 28), b.conv(x, 32, 32, 3), (1, 32, 28, 28))
    g = passes.choose_conv_layout(lw.from_onnx(model), target=target)
    ops = [n.op_type for n in g.nodes]
    assert ("conv2d_winograd_blocked" in ops) is winograd, ops
