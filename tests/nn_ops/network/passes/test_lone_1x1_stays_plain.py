"""lone_1x1_stays_plain: a lone 1x1 conv on an NCHW value takes the form that ran faster on each
vector width (MobileNetV2's layers, timed both ways), and the network computes what onnxruntime does."""
import numpy as np
import pytest
import sympy

import loopweave as lw
from loopweave.nn_ops.network.passes import optimize
from loopweave.nn_ops.network.passes.lone_1x1_stays_plain import _split_share, lone_1x1_stays_plain
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder
from loopweave.target import resolve_target

AVX512 = resolve_target("llvm -mcpu=x86-64-v4")
AVX2 = resolve_target("llvm -mcpu=x86-64-v3")


def _plain(target, c, oc, hw, stride=1):
    out = (hw - 1) // stride + 1
    return lone_1x1_stays_plain(c, oc, (1, oc, out, out), (stride, stride), target)


@pytest.mark.parametrize("target, c, oc, hw, plain", [
    # 16-lane vectors: a 14x14 plane's pixel tiles of 32 leave an eighth idle and 3 in 4 of its vectors
    # straddle cache lines; blocked ran 64->384 1.11x and 96->576 1.10x faster
    (AVX512, 64, 384, 14, False), (AVX512, 96, 576, 14, False), (AVX512, 64, 32, 14, False),
    (AVX512, 16, 96, 112, True), (AVX512, 24, 144, 56, True), (AVX512, 32, 192, 28, True),
    (AVX512, 960, 320, 7, False),
    # 8-lane vectors: tiles of 16 fill a 14x14 plane better, and the blocked rows of 14 take blocks of 5
    # shifted; plain ran 64->384 1.08x and 96->576 1.06x faster, blocked 192->64 1.10x (few accumulators)
    (AVX2, 64, 384, 14, True), (AVX2, 96, 576, 14, True), (AVX2, 192, 64, 14, False),
    (AVX2, 16, 96, 112, True), (AVX2, 960, 320, 7, False),
])
def test_the_form_that_ran_faster_at_each_width(target, c, oc, hw, plain):
    assert _plain(target, c, oc, hw) == plain


@pytest.mark.parametrize("target", [AVX512, AVX2])
def test_a_strided_1x1_goes_blocked(target):
    assert not _plain(target, 64, 128, 56, stride=2)
    assert not _plain(target, 16, 96, 112, stride=2)


def test_a_map_of_symbolic_size_is_weighed_as_a_large_one():
    h = sympy.Symbol("h", positive=True, integer=True)
    assert lone_1x1_stays_plain(16, 96, (1, 96, h, h), (1, 1), AVX512)
    assert lone_1x1_stays_plain(960, 320, (1, 320, h, 7), (1, 1), AVX512)     # whole tiles: 1 % apart
    assert not lone_1x1_stays_plain(192, 64, (1, 64, h, h), (1, 1), AVX2)     # 4 x 2 blocks on AVX2


def test_vectors_split_across_cache_lines():
    assert _split_share(28 * 28, 16) == 0 and _split_share(56 * 56, 8) == 0
    assert _split_share(14 * 14, 16) == 0.75        # planes start 16, 32 or 48 bytes into a line
    assert _split_share(14 * 14, 8) == 0.25         # a 32-byte vector straddles one only from byte 48


@pytest.mark.parametrize("c, oc, hw", [(64, 32, 14), (16, 32, 28), (96, 32, 14)])
def test_the_compiled_network_takes_the_form_and_computes_the_conv(c, oc, hw):
    ort = pytest.importorskip("onnxruntime")
    b = OnnxBuilder()
    model = b.model((1, c, hw, hw), b.relu(b.conv("input", c, oc, 1, bias=True)), (1, oc, hw, hw))
    counts = optimize(lw.from_onnx(model)).op_counts()
    blocked = not _plain(resolve_target("llvm"), c, oc, hw)
    assert ("conv2d_blocked" in counts) == blocked and ("from_blocked" in counts) == blocked, counts
    exe = lw.compile(lw.from_onnx(model), progress=False)
    x = np.random.default_rng(1).standard_normal((1, c, hw, hw)).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want[0], rtol=1e-4, atol=1e-4)
