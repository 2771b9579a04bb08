"""Channel concats of one image computed in place (``passes/concats_in_place.py``): the kernels
producing the parts write straight into their slice of the concat's buffer and no copy runs; where
that cannot be (a part that is a graph input, a batch of several images, a value used twice), the
copy stays.  Every case is checked against onnxruntime."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder  # noqa: E402


def _fire(batch: int = 1, parts=("e1", "e3")):
    """SqueezeNet's fire module after a stem: squeeze 1x1, expand 1x1 and 3x3, a concat of ``parts``
    (names among e1, e3 and input), a 1x1 conv; returns the model and the names of the parts."""
    b = OnnxBuilder(1)
    s = b.relu(b.conv(b.relu(b.conv("input", 3, 32, 3)), 32, 16, 1, bias=True))
    named = {"e1": b.relu(b.conv(s, 16, 32, 1, bias=True)), "e3": b.relu(b.conv(s, 16, 32, 3, bias=True)),
             "input": "input"}
    channels = {"e1": 32, "e3": 32, "input": 3}
    cat = b.node("Concat", [named[p] for p in parts], axis=1)
    out = b.conv(cat, sum(channels[p] for p in parts), 16, 1)
    return b.model((batch, 3, 10, 10), out, (batch, 16, 10, 10)), [named[p] for p in parts], cat


def _compiled_and_checked(model, batch: int):
    exe = lw.compile(lw.from_onnx(model), progress=False)
    x = np.random.default_rng(batch).standard_normal((batch, 3, 10, 10)).astype(np.float32)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-4, atol=1e-4)
    return exe


def test_a_fire_module_concat_is_computed_in_place():
    model, parts, cat = _fire()
    exe = _compiled_and_checked(model, 1)
    assert not any("concat" in c.ops for c in exe.calls)
    # the two expand convs write one after the other into the buffer that the next conv reads
    (reader,) = [c for c in exe.calls if any(i.startswith(cat) for i in c.inputs)]
    producers = [next(c for c in exe.calls if p + "_node" in c.nodes) for p in parts]
    spans = [(c.args[-1], int(np.prod(c.shape)) * 4) for c in producers]
    (space, start), nbytes = spans[0]
    assert space == "arena" and reader.args[0] == (space, start)
    assert spans[1][0] == (space, start + nbytes)


@pytest.mark.parametrize("batch, parts", [(2, ("e1", "e3")), (1, ("e1", "input")), (1, ("e1", "e1"))],
                         ids=["a batch of two", "a graph input among the parts", "one value twice"])
def test_concats_that_cannot_be_computed_in_place_keep_their_copy(batch, parts):
    model, _, _ = _fire(batch, parts)
    exe = _compiled_and_checked(model, batch)
    assert any("concat" in c.ops for c in exe.calls)


def test_tuning_tasks_do_not_include_a_copy_the_network_does_not_run():
    model, _, _ = _fire()
    names = [t.name for t in lw.extract_tasks(lw.from_onnx(model))]
    assert names and not any("concat" in n for n in names)
    model, _, _ = _fire(2)                  # a batch of two keeps its copy, and so its task
    assert any("concat" in t.name for t in lw.extract_tasks(lw.from_onnx(model)))


def test_a_dense_blocks_growing_concats_are_views_of_its_last_one():
    """DenseNet: each layer concatenates the features so far (batch norm + ReLU on the concat, then
    a conv); every concat is a prefix of the block's last, so each feature map is written once into
    that buffer and each layer's batch norm reads its prefix as one tensor: no concat kernel runs."""
    b = OnnxBuilder(2)
    x = b.relu(b.conv("input", 3, 16, 3))
    features = [x]
    for _ in range(3):
        cat = features[0] if len(features) == 1 else b.node("Concat", features, axis=1)
        features.append(b.conv(b.relu(b.bn(cat, 16 * len(features))), 16 * len(features), 16, 3))
    block = b.node("Concat", features, axis=1)
    out = b.conv(b.relu(b.bn(block, 64)), 64, 16, 1)
    model = b.model((1, 3, 10, 10), out, (1, 16, 10, 10))
    exe = _compiled_and_checked(model, 1)
    assert not any("concat" in c.ops for c in exe.calls), [c.ops for c in exe.calls]
    convs = [c for c in exe.calls if any(f + "_node" in c.nodes for f in features[1:])]
    starts = sorted(c.args[-1][1] for c in convs)
    size = int(np.prod(convs[0].shape)) * 4
    assert len(convs) == 3 and all(c.args[-1][0] == "arena" for c in convs)
    assert starts[1] - starts[0] == size and starts[2] - starts[1] == size     # one after another
