"""Transformer and integer-matmul ops compiled once (``compile_once/transformer_ops.py``):
Attention (opset 23), RotaryEmbedding, SwiGLU, DynamicQuantizeLinear, MatMulInteger and
QLinearMatMul over symbolic batch, sequence and past lengths, against onnxruntime (or, where it
cannot run the node, the static path), every symbol at 1 too."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402
from loopweave.nn_ops.testing.integer_reference import exact_reference  # noqa: E402

from .test_builder import _ort  # noqa: E402


def _value(name, shape, elem=TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, elem, shape)


def _model(nodes, inputs, outputs, opset, initializers=()):
    graph = helper.make_graph(nodes, "model", inputs, outputs,
                              [numpy_helper.from_array(np.asarray(v), k) for k, v in initializers])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)])
    model.ir_version = 10
    return model


def _compiled_once(model, *kernels):
    """The model compiled once; each of ``kernels`` (``poly_<key>``) among its calls."""
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert set(kernels) <= {c.module.name for c in exe.calls}, [c.module.name for c in exe.calls]
    return exe


def _matches(exe, feeds, reference, exact=False):
    """Every output of ``exe`` equals ``reference(feed)``'s, for each feed (same shapes and dtypes)."""
    for feed in feeds:
        for got, want in zip(exe.run(feed), reference(feed)):
            assert got.shape == want.shape and got.dtype == want.dtype
            if exact:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def _rand(rng, *shape):
    return rng.standard_normal(shape).astype(np.float32)


def test_attention_with_gqa_a_mask_causal_softcap_and_4d_heads_compiles_once():
    """3-d inputs, 4 query heads over 2 kv heads, causal, softcap, an additive mask per head with a
    row all -inf (its probabilities 0, not NaN); and 4-d heads with a bool mask and a scale: the
    walk's head transposes, scores, softmax and product kernels, at one token and several."""
    nodes = [helper.make_node("Attention", ["q", "k", "v", "m"], ["y"], q_num_heads=4, kv_num_heads=2, is_causal=1,
                              softcap=2.0),
             helper.make_node("Attention", ["q4", "k4", "v4", "b"], ["y4"], scale=0.3)]
    model = _model(nodes, [_value("q", ["N", "S", 32]), _value("k", ["N", "S", 16]), _value("v", ["N", "S", 24]),
                           _value("m", ["N", 4, "S", "S"]), _value("q4", ["N", 2, "S", 8]),
                           _value("k4", ["N", 2, "S", 8]), _value("v4", ["N", 2, "S", 6]),
                           _value("b", ["N", 1, "S", "S"], TensorProto.BOOL)],
                   [_value("y", ["N", "S", 48]), _value("y4", ["N", 2, "S", 6])], opset=23)
    exe = _compiled_once(model, "poly_attention_scores", "poly_softmax", "poly_attention_values", "poly_transpose")
    rng = np.random.default_rng(0)

    def feed(n, s):
        mask, keep = _rand(rng, n, 4, s, s), rng.random((n, 1, s, s)) > 0.3
        mask[-1, 2, 0, :] = -np.inf
        keep[0, 0, -1, :] = False
        return {"q": _rand(rng, n, s, 32), "k": _rand(rng, n, s, 16), "v": _rand(rng, n, s, 24), "m": mask,
                "q4": _rand(rng, n, 2, s, 8), "k4": _rand(rng, n, 2, s, 8), "v4": _rand(rng, n, 2, s, 6), "b": keep}
    _matches(exe, [feed(1, 1), feed(2, 5)], lambda f: _ort(model, f))


def test_attention_with_a_kv_cache_compiles_once():
    """An LLM's decoder step: past_key/past_value of a symbolic length P in front of the new keys
    (the present outputs), causal from P on, a mask over the P + S keys of its own symbol T (at most
    P + S, checked at run time; -inf past its end): one compile, at P = S = 1 and more."""
    node = helper.make_node("Attention", ["q", "k", "v", "m", "pk", "pv"], ["y", "pk2", "pv2"], q_num_heads=4,
                            kv_num_heads=2, is_causal=1)
    model = _model([node], [_value("q", ["N", "S", 32]), _value("k", ["N", "S", 16]), _value("v", ["N", "S", 16]),
                            _value("m", ["N", 1, "S", "T"]), _value("pk", ["N", 2, "P", 8]),
                            _value("pv", ["N", 2, "P", 8])],
                   [_value("y", ["N", "S", 32]), _value("pk2", ["N", 2, None, 8]), _value("pv2", ["N", 2, None, 8])],
                   opset=23)
    exe = _compiled_once(model, "poly_concat", "poly_attention_scores")
    rng = np.random.default_rng(1)

    def feed(n, s, p, t=None):
        return {"q": _rand(rng, n, s, 32), "k": _rand(rng, n, s, 16), "v": _rand(rng, n, s, 16),
                "m": _rand(rng, n, 1, s, t or p + s), "pk": _rand(rng, n, 2, p, 8), "pv": _rand(rng, n, 2, p, 8)}
    _matches(exe, [feed(1, 1, 1), feed(2, 3, 4)], lambda f: _ort(model, f))
    # a mask shorter than the keys (ONNX pads it with -inf; onnxruntime refuses it): as the static path
    short = [feed(1, 2, 3, t=4), feed(2, 1, 2, t=1)]
    _matches(exe, short, lambda f: lw.compile(lw.from_onnx(model), polymorphic=False, progress=False).run(f))
    with pytest.raises(lw.ArgumentError, match=r"attn_mask's last axis \(T\) is longer than the P \+ S keys"):
        exe.run(feed(1, 2, 3, t=6))


def test_attention_with_a_bool_mask_shorter_than_the_keys_matches_the_static_path():
    """A mask [1, 5] over 6 keys (ONNX pads it with -inf; onnxruntime refuses it): the static
    compile at each shape is the reference."""
    node = helper.make_node("Attention", ["q", "k", "v", "m"], ["y"])
    model = _model([node], [_value("q", ["N", 2, "S", 8]), _value("k", ["N", 2, 6, 8]), _value("v", ["N", 2, 6, 8]),
                            _value("m", [1, 5], TensorProto.BOOL)], [_value("y", ["N", 2, "S", 8])], opset=23)
    exe = _compiled_once(model, "poly_attention_scores")
    rng = np.random.default_rng(2)
    feeds = [{"q": _rand(rng, n, 2, s, 8), "k": _rand(rng, n, 2, 6, 8), "v": _rand(rng, n, 2, 6, 8),
              "m": np.array([[True, False, True, True, False]])} for n, s in ((1, 1), (2, 5))]
    _matches(exe, feeds, lw.compile(lw.from_onnx(model)).run)


def test_an_attention_output_of_the_scores_is_refused_by_name():
    node = helper.make_node("Attention", ["q", "k", "v"], ["y", "", "", "qk"], qk_matmul_output_mode=1)
    model = _model([node], [_value(n, ["N", 2, "S", 8]) for n in "qkv"],
                   [_value("y", ["N", 2, "S", 8]), _value("qk", ["N", 2, "S", "S"])], opset=23)
    with pytest.raises(OnnxImportError, match=r"Attention: the qk_matmul_output output"):
        lw.compile(lw.from_onnx(model), polymorphic=True)


def test_rotary_embedding_compiles_once():
    """RotaryEmbedding of a 3-d input with num_heads and a partial rotation, its caches constants
    read at run-time position ids; and of a 4-d input, interleaved, its caches inputs per (batch,
    sequence)."""
    rng = np.random.default_rng(3)
    nodes = [helper.make_node("RotaryEmbedding", ["x", "cos", "sin", "pos"], ["y"], num_heads=2,
                              rotary_embedding_dim=8),
             helper.make_node("RotaryEmbedding", ["x4", "c", "s"], ["y4"], interleaved=1)]
    model = _model(nodes, [_value("x", ["N", "S", 32]), _value("pos", ["N", "S"], TensorProto.INT64),
                           _value("x4", ["N", 2, "S", 8]), _value("c", ["N", "S", 4]), _value("s", ["N", "S", 4])],
                   [_value("y", ["N", "S", 32]), _value("y4", ["N", 2, "S", 8])], opset=23,
                   initializers=[("cos", _rand(rng, 16, 4)), ("sin", _rand(rng, 16, 4))])
    exe = _compiled_once(model, "poly_rotary")
    feeds = [{"x": _rand(rng, n, s, 32), "pos": rng.integers(0, 16, (n, s)).astype(np.int64),
              "x4": _rand(rng, n, 2, s, 8), "c": _rand(rng, n, s, 4), "s": _rand(rng, n, s, 4)}
             for n, s in ((1, 1), (2, 5))]
    _matches(exe, feeds, lambda f: _ort(model, f))


def test_swiglu_joins_a_dense_layer_s_epilogue():
    """Llama's gated FFN, ``SwiGLU(x @ W_gate, x @ W_up)`` (opset 28, which onnxruntime cannot run
    yet: the static compile is the reference): the SwiGLU in the up projection's kernel."""
    rng = np.random.default_rng(4)
    nodes = [helper.make_node("MatMul", ["x", "wg"], ["gate"]), helper.make_node("MatMul", ["x", "wu"], ["up"]),
             helper.make_node("SwiGLU", ["gate", "up"], ["y"], alpha=1.5)]
    model = _model(nodes, [_value("x", ["N", "S", 6])], [_value("y", ["N", "S", 16])], opset=28,
                   initializers=[("wg", _rand(rng, 6, 16)), ("wu", _rand(rng, 6, 16))])
    exe = _compiled_once(model)
    assert len(exe.calls) == 2, [c.module.name for c in exe.calls]
    _matches(exe, [{"x": _rand(rng, n, s, 6)} for n, s in ((1, 1), (2, 5))], lw.compile(lw.from_onnx(model)).run)


@pytest.mark.vector_width
def test_a_dynamically_quantized_dense_layer_and_qlinear_matmul_compile_once():
    """What onnxruntime's ``quantize_dynamic`` writes for a MatMul (DynamicQuantizeLinear, then
    MatMulInteger by the int8 weight, Cast, Mul by the scales' product): exactly ONNX's reference
    values and quantization parameters (onnxruntime's u8 x s8 product is not exact without VNNI:
    ``nn_ops/testing/integer_reference.py``); QLinearMatMul exactly the static path's (which
    requantizes in float64 as ONNX's reference does; onnxruntime is 1 off at some roundings)."""
    rng = np.random.default_rng(5)
    nodes = [helper.make_node("DynamicQuantizeLinear", ["x"], ["q", "qs", "qz"]),
             helper.make_node("MatMulInteger", ["q", "w", "qz", "wz"], ["acc"]),
             helper.make_node("Cast", ["acc"], ["accf"], to=TensorProto.FLOAT),
             helper.make_node("Mul", ["qs", "ws"], ["scale"]), helper.make_node("Mul", ["accf", "scale"], ["y"])]
    model = _model(nodes, [_value("x", ["N", "S", 12])],
                   [_value("y", ["N", "S", 40]), _value("q", ["N", "S", 12], TensorProto.UINT8),
                    _value("qs", []), _value("qz", [], TensorProto.UINT8)], opset=13,
                   initializers=[("w", rng.integers(-127, 128, (12, 40)).astype(np.int8)),
                                 ("wz", np.array(0, np.int8)), ("ws", np.array(0.02, np.float32))])
    exe = _compiled_once(model, "poly_dynamic_quantize_range", "poly_dynamic_quantize", "poly_integer_matmul")
    _matches(exe, [{"x": _rand(rng, n, s, 12) * 3} for n, s in ((1, 1), (2, 5))],
             lambda f: exact_reference(model, f), exact=True)
    # all zeros: the scale is 1/255 as ONNX's reference and the static path have it (onnxruntime says 1)
    _matches(exe, [{"x": np.zeros((1, 2, 12), np.float32)}], lw.compile(lw.from_onnx(model)).run, exact=True)
    # a last axis of symbolic size: its range reduced over the flat values
    flat = _model(nodes[:1], [_value("x", ["N", "S"])], [_value("q", ["N", "S"], TensorProto.UINT8), _value("qs", []),
                                                        _value("qz", [], TensorProto.UINT8)], opset=13)
    exe = _compiled_once(flat, "poly_dynamic_quantize_range")
    _matches(exe, [{"x": _rand(rng, n, s) * 3} for n, s in ((1, 1), (3, 7))], lambda f: _ort(flat, f), exact=True)
    node = helper.make_node("QLinearMatMul", ["a", "as", "az", "w", "ws", "wz", "ys", "yz"], ["y"])
    model = _model([node], [_value("a", ["N", "S", 12], TensorProto.UINT8)],
                   [_value("y", ["N", "S", 40], TensorProto.UINT8)], opset=13,
                   initializers=[("w", rng.integers(0, 256, (12, 40)).astype(np.uint8)),
                                 ("as", np.array(0.05, np.float32)), ("az", np.array(120, np.uint8)),
                                 ("ws", np.array(0.01, np.float32)), ("wz", np.array(130, np.uint8)),
                                 ("ys", np.array(0.3, np.float32)), ("yz", np.array(100, np.uint8))])
    exe = _compiled_once(model, "poly_integer_matmul")
    feeds = [{"a": rng.integers(0, 256, (n, s, 12)).astype(np.uint8)} for n, s in ((1, 1), (2, 5))]
    _matches(exe, feeds, lw.compile(lw.from_onnx(model)).run, exact=True)


@pytest.mark.parametrize("a_dtype,w_dtype,w_zero,depth", [("int8", "int8", 0, 16), ("uint8", "uint8", 128, 12),
                                                         ("int8", "uint8", 3, 8), ("uint8", "int8", 0, 10)])
def test_integer_products_compile_once_over_packed_words_or_widened(a_dtype, w_dtype, w_zero, depth):
    """The int8 product over words where A's rows are whole words and B's zero point is its int8
    offset (int8 A counted + 128, a uint8 B - 128); the widened product otherwise: exactly the static
    path's values either way."""
    rng = np.random.default_rng(depth)
    info_a, info_w = np.iinfo(a_dtype), np.iinfo(w_dtype)
    node = helper.make_node("MatMulInteger", ["a", "w", "az", "wz"], ["y"])
    model = _model([node], [_value("a", ["N", depth], onnx.helper.np_dtype_to_tensor_dtype(np.dtype(a_dtype))),
                            _value("az", [], onnx.helper.np_dtype_to_tensor_dtype(np.dtype(a_dtype)))],
                   [_value("y", ["N", 24], TensorProto.INT32)], opset=13,
                   initializers=[("w", rng.integers(info_w.min, info_w.max + 1, (depth, 24)).astype(w_dtype)),
                                 ("wz", np.array(w_zero, w_dtype))])
    exe = _compiled_once(model, "poly_integer_matmul")
    lowered = next(c.module for c in exe.calls if c.module.name == "poly_integer_matmul").get_source("lowered")
    packed = "dot2_i16(" in lowered or "dot4_u8s8(" in lowered       # (int16 pairs on x86 without VNNI)
    assert packed == (depth % 4 == 0 and w_zero == (128 if w_dtype == "uint8" else 0)), lowered
    feeds = [{"a": rng.integers(info_a.min, info_a.max + 1, (n, depth)).astype(a_dtype),
              "az": np.array(rng.integers(info_a.min, info_a.max + 1), a_dtype)} for n in (1, 9)]
    _matches(exe, feeds, lw.compile(lw.from_onnx(model)).run, exact=True)


def test_a_matmul_integer_of_two_computed_operands_is_refused_by_name():
    node = helper.make_node("MatMulInteger", ["a", "b"], ["y"])
    model = _model([node], [_value("a", ["N", 4, 8], TensorProto.UINT8), _value("b", ["N", 8, 4], TensorProto.UINT8)],
                   [_value("y", ["N", 4, 4], TensorProto.INT32)], opset=13)
    with pytest.raises(OnnxImportError, match=r"MatMulInteger: MatMulInteger other than of a computed A by a constant"):
        lw.compile(lw.from_onnx(model), polymorphic=True)
