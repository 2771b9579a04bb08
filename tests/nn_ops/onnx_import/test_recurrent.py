"""ONNX LSTM, GRU and RNN (``converters/recurrent.py``), unrolled over the sequence: every option
against onnxruntime (layout=1, which onnxruntime refuses, against its layout-0 result transposed),
one compiled kernel per step kind, the per-step slices read as views, and clear errors."""
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import helper  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402
from loopweave.nn_ops.testing import zoo_recurrent  # noqa: E402

GATES = zoo_recurrent.GATES
recurrent_model = zoo_recurrent.recurrent_layer


def onnxruntime_result(kind, feed, **options):
    """onnxruntime's outputs; for ``layout=1`` (which it refuses) the layout-0 model's, transposed."""
    if not options.get("layout"):
        model, _ = recurrent_model(kind, **options)
        return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    model, _ = recurrent_model(kind, **dict(options, layout=0))
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    seq_first = {k: v if k == "L" else np.ascontiguousarray(v.transpose(1, 0, 2)) for k, v in feed.items()}
    return [r.transpose(2, 0, 1, 3) if r.ndim == 4 else r.transpose(1, 0, 2) for r in sess.run(None, seq_first)]


CASES = [
    {}, {"direction": "reverse"}, {"direction": "bidirectional"}, {"initial": True},
    {"layout": 1, "direction": "bidirectional", "initial": True},
    {"lens": [5, 3]}, {"lens": [2, 5], "direction": "bidirectional", "initial": True},
    {"lens": [0, 4], "direction": "reverse"}, {"clip": 0.7}, {"outputs": ["Y"]}, {"outputs": ["", "Y_h"]},
    {"B": 1, "S": 1},
]
EXTRA = [
    ("LSTM", {"peepholes": True}), ("LSTM", {"peepholes": True, "clip": 0.5, "lens": [4, 2], "initial": True}),
    ("LSTM", {"input_forget": 1}), ("GRU", {"linear_before_reset": 1}),
    ("GRU", {"linear_before_reset": 1, "direction": "bidirectional", "lens": [3, 5]}),
    ("LSTM", {"activations": ["HardSigmoid", "LeakyRelu", "ScaledTanh"], "activation_alpha": [0.3, 0.2, 0.9],
              "activation_beta": [0.4, 0.7]}),
    ("GRU", {"activations": ["Sigmoid", "Affine", "HardSigmoid", "Elu"], "direction": "bidirectional",
             "activation_alpha": [0.5, 0.3, 0.8], "activation_beta": [0.1, 0.6]}),
    ("RNN", {"activations": ["Relu"]}),
    ("RNN", {"activations": ["Softsign", "Softplus"], "direction": "bidirectional"}),
    ("RNN", {"activations": ["ThresholdedRelu"], "activation_alpha": [0.2]}),
]


@pytest.mark.parametrize("kind, options", [(k, c) for k in GATES for c in CASES] + EXTRA,
                         ids=lambda v: v if isinstance(v, str) else ",".join(f"{k}={v[k]}" for k in v) or "default")
def test_recurrent_layers_match_onnxruntime(kind, options):
    model, feed = recurrent_model(kind, **options)
    got = lw.compile(lw.from_onnx(model), progress=False).run(feed)
    want = onnxruntime_result(kind, feed, **options)
    assert len(got) == len(want) == len(model.graph.output)
    for g, w in zip(got, want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_long_sequence_compiles_each_step_kernel_once_and_reads_its_slices_as_views():
    """24 steps: two kernels a step, each compiled once; no copy per step."""
    model, feed = recurrent_model("LSTM", S=24, B=3, I=16, H=32, scale=0.2, lens=[24, 7, 0])
    exe = lw.compile(lw.from_onnx(model), progress=False)
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    for g, w in zip(exe.run(feed), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)
    for ops in (("dense_kn", "add"), ("lstm_cell",)):           # every step runs the same two kernels
        steps = [c.symbol for c in exe.calls if c.ops == ops]
        assert len(steps) == 24 and len(set(steps)) == 1, ops
    # the steps' rows are views; the cells write their states into one buffer in place (no concat),
    # from which one strided copy takes Y (and one copy each Y_h and Y_c): no copy per step
    assert sum("slice" in c.ops for c in exe.calls) == 3 and not any("concat" in c.ops for c in exe.calls)
    # the recurrent weight is packed once for all 24 steps
    assert exe.weights.nbytes < 3 * (16 + 32) * 4 * 32 * 4


def test_a_symbolic_sequence_compiles_per_shape_and_says_so():
    model, _ = recurrent_model("GRU", S=4, B=2)
    dims = model.graph.input[0].type.tensor_type.shape.dim
    dims[0].dim_param, dims[1].dim_param = "S", "B"
    y_dims, h_dims = (out.type.tensor_type.shape.dim for out in model.graph.output)
    y_dims[0].dim_param, y_dims[2].dim_param, h_dims[1].dim_param = "S", "B", "B"
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        exe = lw.compile(lw.from_onnx(model), progress=False)
    assert any("GRU" in str(w.message) for w in caught)
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seq, batch in ((4, 2), (1, 1), (7, 3)):
        x = np.random.default_rng(seq).standard_normal((seq, batch, 3)).astype(np.float32)
        for g, w in zip(exe.run({"X": x}), sess.run(None, {"X": x})):
            np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("change, message", [
    ({"activations": ["Sigmoid", "Gelu", "Tanh"]}, "activation 'Gelu'"),
    ({"activations": ["Sigmoid"]}, r"1 activations \(3 per direction"),
    ({"direction": "sideways"}, "direction 'sideways'"),
    ({"clip": -1.0}, "clip -1.0"),
    ({"hidden_size": 5}, r"W of shape \(1, 16, 3\); .* must be \(1, 20, 3\)"),
])
def test_bad_recurrent_attributes_are_refused_by_name(change, message):
    model, _ = recurrent_model("LSTM")
    node = model.graph.node[0]
    for name, value in change.items():
        for a in list(node.attribute):
            if a.name == name:
                node.attribute.remove(a)
        node.attribute.append(helper.make_attribute(name, value))
    with pytest.raises(OnnxImportError, match=message):
        lw.compile(lw.from_onnx(model), progress=False)


def test_a_thousand_steps_compile_in_seconds():
    """Before the balanced concat and the in-place states, 1000 steps nested 1000 selects (a
    RecursionError) and then took 11 s to compile."""
    import time
    model, feed = recurrent_model("RNN", S=1000, B=1, I=8, H=16, scale=0.25)
    start = time.perf_counter()
    exe = lw.compile(lw.from_onnx(model), progress=False)
    assert time.perf_counter() - start < 30
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)
    for g, w in zip(exe.run(feed), want):
        np.testing.assert_allclose(g, w, rtol=1e-5, atol=1e-5)


def test_a_sequence_longer_than_the_unrolling_limit_is_refused_before_anything_is_built():
    from loopweave.nn_ops.onnx_import.converters.recurrent import MAX_UNROLLED_STEPS
    model, _ = recurrent_model("LSTM", S=MAX_UNROLLED_STEPS + 1, B=1, I=2, H=2)
    with pytest.raises(OnnxImportError, match=f"{MAX_UNROLLED_STEPS + 1} steps.*in chunks"):
        lw.from_onnx(model)
