"""The int8 product over packed words (``ops/int8_matmul``) against numpy, with its default schedules."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.errors import ExprError
from loopweave.nn_ops.ops.int8_matmul import (matmul_u8s8, matmul_u8s8_pair_panels, matmul_u8s8_panels, pack_words,
                                             pairs_of_words)
from loopweave.nn_ops.ops.matmul import pack_panels


def test_pack_words_puts_four_rows_in_a_word_little_endian():
    b = np.arange(-6, 6, dtype=np.int8).reshape(6, 2)
    words = pack_words(b)
    assert words.shape == (2, 2) and words.dtype == np.int32
    assert list(words[0, 0].tobytes()) == list(b[:4, 0].view(np.uint8))
    assert list(words[1, 1].tobytes()) == list(b[4:, 1].view(np.uint8)) + [0, 0]    # rows past K are zero


def _operands(rng, m, k, n, a_dtype):
    a = rng.integers(0, 256, (m, k)).astype(np.uint8).view(a_dtype)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    want = (a.astype(np.int64) + (128 if a_dtype == "int8" else 0)) @ b.astype(np.int64)
    return a, b, want.astype(np.int32)


@pytest.mark.parametrize("a_dtype", ["uint8", "int8"])
@pytest.mark.parametrize("panels", [False, True])
@pytest.mark.parametrize("m,k,n", [(128, 768, 96), (1, 64, 3072 // 16), (7, 20, 33), (33, 4, 5)])
def test_matmul_u8s8_matches_numpy(a_dtype, panels, m, k, n):
    """Register tiles whole and shifted, one row, fewer columns than a panel; an int8 A counts each
    byte + 128."""
    a, b, want = _operands(np.random.default_rng(m + k + n), m, k, n, a_dtype)
    A = lw.placeholder((m, k), name="A", dtype=a_dtype)
    words = pack_words(b)
    if panels:
        words = pack_panels(words, 32)
        W = lw.placeholder(words.shape, name="Wp", dtype="int32")
        D = matmul_u8s8_panels(A, W, n)
    else:
        W = lw.placeholder(words.shape, name="Ww", dtype="int32")
        D = matmul_u8s8(A, W)
    f = lw.build(nn_ops.schedule(D, "llvm"), [A, W, D])
    out = np.full((m, n), np.iinfo(np.int32).min, np.int32)
    f(a, words, out)
    np.testing.assert_array_equal(out, want)


def test_matmul_u8s8_names_what_is_wrong_with_its_operands():
    W = lw.placeholder((5, 8), name="W", dtype="int32")
    with pytest.raises(ExprError, match="A has 19 columns where B's 5 words of four rows need 20; pad A"):
        matmul_u8s8(lw.placeholder((3, 19), name="A", dtype="uint8"), W)
    with pytest.raises(ExprError, match="uint8 or int8"):
        matmul_u8s8(lw.placeholder((3, 20), name="A", dtype="float32"), W)
    with pytest.raises(ExprError, match="B's words must be a 2-d int32"):
        matmul_u8s8(lw.placeholder((3, 20), name="A", dtype="uint8"), lw.placeholder((5, 8), name="W"))
    with pytest.raises(ExprError, match="2-d int8 array"):
        pack_words(np.zeros((4, 4), np.uint8))


@pytest.mark.vector_width
@pytest.mark.parametrize("cpu,instruction", [("x86-64-v2", "pmaddwd"), ("x86-64-v3", "vpmaddwd"),
                                             ("x86-64-v4", "vpmaddwd"), ("icelake-server", "vpdpbusd"),
                                             ("alderlake", "vpdpbusd")])
def test_each_x86_level_multiplies_bytes_exactly_with_its_dot_product_instruction(cpu, instruction):
    """Without VNNI the bytes are widened to int16 and multiplied in pairs (``pmaddwd``: a pair of
    255 x -128 products, -65280, would saturate ``vpmaddubsw``'s int16), not widened to int32 and
    multiplied one by one (``vpmulld``, five times slower); the extremes and random bytes are exact."""
    from loopweave.target import compiling_for, parse_target
    target = parse_target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    m, k, n = 13, 64, 40
    rng = np.random.default_rng(7)
    a = rng.integers(0, 256, (m, k)).astype(np.uint8)
    b = rng.integers(-128, 128, (k, n)).astype(np.int8)
    a[:4], b[:, :8] = 255, -128         # the largest pair sums, both signs
    b[:, 8:16] = 127
    want = (a.astype(np.int64) @ b.astype(np.int64)).astype(np.int32)
    with compiling_for(target):
        A = lw.placeholder((m, k), name="A", dtype="uint8")
        words = pack_panels(pack_words(b), 2 * target.lanes("int32"))
        W = lw.placeholder(words.shape, name="Wp", dtype="int32")
        D = matmul_u8s8_panels(A, W, n)
        f = lw.build(nn_ops.schedule(D, target), [A, W, D], target=target)
    asm = f.get_source("asm")
    assert instruction in asm and "pmulld" not in asm
    if not target.runs_here():
        pytest.skip(f"this CPU cannot run {cpu} code (its instructions were checked)")
    out = np.zeros((m, n), np.int32)
    f(a, words, out)
    np.testing.assert_array_equal(out, want)


def test_pairs_of_words_hold_two_rows_widened_to_int16():
    b = np.arange(-20, 20, dtype=np.int8).reshape(8, 5)
    halves = pairs_of_words(pack_words(b)).view(np.int16).reshape(4, 5, 2)
    np.testing.assert_array_equal(halves[..., 0], b[0::2])
    np.testing.assert_array_equal(halves[..., 1], b[1::2])
    panels = pack_panels(pack_words(b), 4)
    np.testing.assert_array_equal(pairs_of_words(panels), pack_panels(pairs_of_words(pack_words(b)), 4))


@pytest.mark.vector_width
@pytest.mark.parametrize("cpu", ["x86-64-v2", "x86-64-v3", "x86-64-v4"])
@pytest.mark.parametrize("a_dtype", ["uint8", "int8"])
def test_the_pairs_product_is_exact_with_one_pmaddwd_a_vector(cpu, a_dtype):
    """The product over int16 pairs (x86 without VNNI): no byte widening left in the loop (A's pairs are
    broadcast from its widened copy, one load each), exact at the extremes."""
    import re
    from loopweave.target import compiling_for, parse_target
    target = parse_target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    m, k, n = 11, 48, 40
    a, b, want = _operands(np.random.default_rng(11), m, k, n, a_dtype)
    a[:3] = np.array(255, np.uint8).view(a_dtype) if a_dtype == "uint8" else np.int8(127)
    b[:, :8] = -128
    want = ((a.astype(np.int64) + (128 if a_dtype == "int8" else 0)) @ b.astype(np.int64)).astype(np.int32)
    with compiling_for(target):
        words = pairs_of_words(pack_panels(pack_words(b), 2 * target.lanes("int32")))
        A = lw.placeholder((m, k), name="A", dtype=a_dtype)
        W = lw.placeholder(words.shape, name="Wp", dtype="int32")
        D = matmul_u8s8_pair_panels(A, W, n)
        f = lw.build(nn_ops.schedule(D, target), [A, W, D], target=target)
    asm = f.get_source("asm")
    assert "pmaddwd" in asm and "pmovsxbw" not in asm and "pmulld" not in asm
    assert cpu == "x86-64-v2" or re.search(r"vpbroadcastd\s+-?\d*\(%", asm) and "movzbl" not in asm
    if not target.runs_here():
        pytest.skip(f"this CPU cannot run {cpu} code (its instructions were checked)")
    out = np.zeros((m, n), np.int32)
    f(a, words, out)
    np.testing.assert_array_equal(out, want)


@pytest.mark.vector_width
@pytest.mark.parametrize("cpu,pairs", [("x86-64-v3", True), ("x86-64-v4", True), ("icelake-server", False)])
@pytest.mark.parametrize("rows", [16, 1])
def test_the_network_packs_int8_weights_as_pairs_where_the_cpu_has_no_byte_dot_product(cpu, pairs, rows):
    """(and the layer has a register tile's rows at least: for one row twice the weight's bytes cost more)"""
    pairs = pairs and rows >= 8
    from onnx import TensorProto, helper, numpy_helper
    from loopweave.nn_ops.network.passes import optimize
    from loopweave.target import compiling_for, parse_target
    rng = np.random.default_rng(2)
    w = rng.integers(-128, 128, (64, 48)).astype(np.int8)
    graph = helper.make_graph([helper.make_node("MatMulInteger", ["a", "w"], ["y"])], "mi",
                              [helper.make_tensor_value_info("a", TensorProto.UINT8, [rows, 64])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [rows, 48])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)], ir_version=8)
    target = parse_target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    with compiling_for(target):
        g = optimize(lw.from_onnx(model))
    node = next(nd for nd in g.nodes if nd.op_type == "matmul_u8s8")
    assert bool(node.attrs.get("pairs")) == pairs
    if target.runs_here():
        a = rng.integers(0, 256, (rows, 64)).astype(np.uint8)
        got = lw.compile(lw.from_onnx(model), target=target, progress=False).run({"a": a})[0]
        np.testing.assert_array_equal(got, a.astype(np.int64) @ w.astype(np.int64))
