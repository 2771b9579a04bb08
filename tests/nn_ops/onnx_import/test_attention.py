"""The ONNX Attention converter (opsets 23-25) against the onnx reference evaluator (and
onnxruntime where it is installed), beyond the backend cases: GQA with causal masking,
a mask and a KV cache together, a dynamic boolean mask shorter than the keys, a constant
mask, per-batch nonpad_kv_seqlen with a sliding window, and clean rejections."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402
from onnx.reference import ReferenceEvaluator  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402

_TYPES = {np.float32: TensorProto.FLOAT, np.float16: TensorProto.FLOAT16, np.bool_: TensorProto.BOOL,
          np.int64: TensorProto.INT64}


def _model(feeds, outputs, opset=23, initializers=None, y_shape=None, **attrs):
    """One Attention node over ``feeds`` (name -> array; '' for absent inputs), ``outputs``
    (names, '' for unused), with its input order Q, K, V, attn_mask, past_key, past_value,
    nonpad_kv_seqlen."""
    names = list(feeds)
    while names and names[-1] == "":
        names.pop()
    node = helper.make_node("Attention", [n if not n.startswith("_") else "" for n in names], outputs, **attrs)
    inputs = [helper.make_tensor_value_info(n, _TYPES[feeds[n].dtype.type], feeds[n].shape)
              for n in names if not n.startswith("_") and n not in (initializers or {})]
    elem = _TYPES[feeds["Q"].dtype.type]
    outs = [helper.make_tensor_value_info(o, elem, y_shape if o == "Y" else None) for o in outputs if o]
    graph = helper.make_graph([node], "attention", inputs, outs,
                              [numpy_helper.from_array(v, k) for k, v in (initializers or {}).items()])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return onnx.shape_inference.infer_shapes(model)     # output shapes, which the checker wants


def _check(model, feeds, rtol=1e-4, atol=1e-5):
    """loopweave's outputs equal the reference evaluator's (and onnxruntime's, when installed)."""
    run_feeds = {k: v for k, v in feeds.items() if k and not k.startswith("_")
                 and k not in {t.name for t in model.graph.initializer}}
    want = ReferenceEvaluator(model).run(None, run_feeds)
    got = lw.compile(lw.from_onnx(model), progress=False).run(run_feeds)
    assert len(got) == len(want)
    for g, w in zip(got, want):
        assert g.shape == w.shape and g.dtype == w.dtype
        np.testing.assert_allclose(g, w, rtol=rtol, atol=atol)
    return want


def _rand(rng, *shape, dtype=np.float32):
    return rng.standard_normal(shape).astype(dtype)


def test_gqa_causal_mask_and_past_4d():
    """4 query heads over 2 kv heads, a float mask broadcast over heads, a KV cache, causal
    from the past length on, and every output (mode 2: the biased scores)."""
    rng = np.random.default_rng(0)
    feeds = {"Q": _rand(rng, 2, 4, 3, 8), "K": _rand(rng, 2, 2, 3, 8), "V": _rand(rng, 2, 2, 3, 6),
             "attn_mask": _rand(rng, 2, 1, 3, 7), "past_key": _rand(rng, 2, 2, 4, 8),
             "past_value": _rand(rng, 2, 2, 4, 6)}
    model = _model(feeds, ["Y", "present_key", "present_value", "qk"], is_causal=1, qk_matmul_output_mode=2)
    want = _check(model, feeds)
    assert np.isneginf(want[3]).any()     # the causal frontier reached the scores output
    ort = pytest.importorskip("onnxruntime")
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(sess.run(None, feeds)[0], want[0], rtol=1e-4, atol=1e-5)


def test_3d_gqa_bool_mask_shorter_than_keys_with_past_and_softcap():
    """3-D inputs (6 query heads, 2 kv heads), a boolean mask covering only the first keys
    (padded as False), softcap and the post-softmax output."""
    rng = np.random.default_rng(1)
    mask = rng.random((4, 5)) > 0.3
    mask[:, 0] = True
    feeds = {"Q": _rand(rng, 2, 4, 24), "K": _rand(rng, 2, 4, 8), "V": _rand(rng, 2, 4, 10),
             "attn_mask": mask, "past_key": _rand(rng, 2, 2, 3, 4), "past_value": _rand(rng, 2, 2, 3, 5)}
    model = _model(feeds, ["Y", "present_key", "present_value", "qk"], q_num_heads=6, kv_num_heads=2,
                   softcap=1.5, qk_matmul_output_mode=3, scale=0.3)
    _check(model, feeds)


def test_constant_mask_with_fully_masked_row_is_zero():
    """A mask given as an initializer folds into one constant bias; a query row with no
    allowed key gives zeros, not NaN."""
    rng = np.random.default_rng(2)
    mask = np.array([[False, False, False], [True, False, True]])
    feeds = {"Q": _rand(rng, 1, 2, 2, 4), "K": _rand(rng, 1, 2, 3, 4), "V": _rand(rng, 1, 2, 3, 4),
             "attn_mask": mask}
    model = _model(feeds, ["Y"], initializers={"attn_mask": mask})
    want = _check(model, feeds)
    assert not np.isnan(want[0]).any() and np.all(want[0][:, :, 0] == 0)


def test_nonpad_kv_seqlen_causal_window_and_mask_fp16():
    """Per-batch valid lengths (opset 25) with bottom-right causal masking, a left window
    and a rank-3 (per-head) mask, in float16 with the softmax in float32."""
    rng = np.random.default_rng(3)
    feeds = {"Q": _rand(rng, 3, 2, 3, 8, dtype=np.float16), "K": _rand(rng, 3, 2, 7, 8, dtype=np.float16),
             "V": _rand(rng, 3, 2, 7, 8, dtype=np.float16), "attn_mask": _rand(rng, 2, 3, 7, dtype=np.float16),
             "_pk": None, "_pv": None, "nonpad_kv_seqlen": np.array([7, 4, 2], np.int64)}
    model = _model(feeds, ["Y"], opset=25, is_causal=1, left_window_size=2, softmax_precision=TensorProto.FLOAT)
    want = _check(model, feeds, rtol=2e-3, atol=2e-3)
    assert np.all(want[0][2, :, 0] == 0)    # batch 2: offset 2 - 3 < 0 leaves query 0 no key


def test_bidirectional_window_with_past():
    rng = np.random.default_rng(4)
    feeds = {"Q": _rand(rng, 1, 2, 4, 8), "K": _rand(rng, 1, 2, 4, 8), "V": _rand(rng, 1, 2, 4, 8),
             "_mask": None, "past_key": _rand(rng, 1, 2, 2, 8), "past_value": _rand(rng, 1, 2, 2, 8)}
    model = _model(feeds, ["Y", "present_key", "present_value"], opset=25, left_window_size=1,
                   right_window_size=1)
    _check(model, feeds)


def test_kv_heads_not_dividing_q_heads_is_rejected():
    rng = np.random.default_rng(5)
    feeds = {"Q": _rand(rng, 1, 3, 2, 4), "K": _rand(rng, 1, 2, 2, 4), "V": _rand(rng, 1, 2, 2, 4)}
    with pytest.raises(OnnxImportError, match=r"Attention \(opset 23\).*3 query heads over 2 key"):
        lw.from_onnx(_model(feeds, ["Y"]))


def test_3d_without_head_counts_is_rejected():
    rng = np.random.default_rng(6)
    feeds = {"Q": _rand(rng, 1, 2, 8), "K": _rand(rng, 1, 2, 8), "V": _rand(rng, 1, 2, 8)}
    with pytest.raises(OnnxImportError, match="q_num_heads and kv_num_heads"):
        lw.from_onnx(_model(feeds, ["Y"], y_shape=[1, 2, 8]))


def test_causal_with_mask_broadcast_over_queries():
    """A [1, Skv] mask with is_causal: the causal frontier still depends on the query row
    (as in the operator's function body; the python reference builds its causal matrix from
    the mask's own query axis, so it is compared here on the mask materialised to [Sq, Skv])."""
    rng = np.random.default_rng(7)
    mask = _rand(rng, 1, 6)
    feeds = {"Q": _rand(rng, 2, 2, 3, 4), "K": _rand(rng, 2, 2, 6, 4), "V": _rand(rng, 2, 2, 6, 4),
             "attn_mask": mask}
    full = dict(feeds, attn_mask=np.broadcast_to(mask, (3, 6)).copy())
    want = ReferenceEvaluator(_model(full, ["Y"], is_causal=1)).run(None, full)
    got = lw.compile(lw.from_onnx(_model(feeds, ["Y"], is_causal=1)), progress=False).run(feeds)
    np.testing.assert_allclose(got[0], want[0], rtol=1e-4, atol=1e-5)
