"""choose_dense_layout: constant dense weights transposed once, and packed in column panels on the
CPU where the register-blocked matmul runs (many rows, whole panels)."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.nn_ops.network.passes import choose_dense_layout, optimize
from loopweave.nn_ops.ops.matmul import panel_width


def _gemm_model(rows: int, k: int, n: int, seed: int = 0):
    rng = np.random.default_rng(seed)
    w = rng.standard_normal((n, k)).astype(np.float32)
    b = rng.standard_normal(n).astype(np.float32)
    node = helper.make_node("Gemm", ["x", "w", "b"], ["y"], transB=1)
    graph = helper.make_graph([node], "dense", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [rows, k])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [rows, n])],
                              [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]), w, b


def _dense_node(g):
    (node,) = [n for n in g.nodes if n.op_type == "dense_kn"]
    return node, g.initializers[node.inputs[1]]


@pytest.mark.parametrize("rows,n", [(40, 64), (197, 96), (8, 64), (40, 50), (40, 8), (19, 1000), (1, 64), (2, 64),
                                    (7, 50), (3, 1000)])
def test_dense_layers_give_the_same_values_with_and_without_panels(rows, n):
    model, w, b = _gemm_model(rows, 24, n)
    nr = panel_width(lw.target.host_target().lanes("float32"))
    node, weight = _dense_node(optimize(lw.from_onnx(model)))
    packed = n >= nr
    assert node.attrs.get("panels") == (nr if packed else None)
    assert weight.shape == ((-(-n // nr), 24, nr) if packed else (24, n))      # the last panel zero-padded
    x = np.random.default_rng(1).standard_normal((rows, 24)).astype(np.float32)
    got, = lw.compile(lw.from_onnx(model), progress=False).run({"x": x})
    np.testing.assert_allclose(got, x @ w.T + b, rtol=1e-4, atol=1e-4)


def test_panels_hold_each_column_block_row_after_row():
    model, w, _ = _gemm_model(40, 24, 64)
    g = choose_dense_layout(lw.from_onnx(model).copy(), lanes=8)          # panels of 16 columns
    node, weight = _dense_node(g)
    assert node.attrs["panels"] == 16
    np.testing.assert_array_equal(weight[2, 5], w.T[5, 32:48])


def test_a_partial_last_panel_is_zero_padded():
    model, w, _ = _gemm_model(40, 24, 50)
    node, weight = _dense_node(choose_dense_layout(lw.from_onnx(model).copy(), lanes=8))
    assert node.attrs == {"panels": 16, "columns": 50} and weight.shape == (4, 24, 16)
    np.testing.assert_array_equal(weight[3, :, :2], w.T[:, 48:])
    assert not weight[3, :, 2:].any()


def test_other_targets_keep_the_transposed_weight():
    model, _, _ = _gemm_model(40, 24, 64)
    node, weight = _dense_node(choose_dense_layout(lw.from_onnx(model).copy(), lanes=None))
    assert "panels" not in node.attrs and weight.shape == (24, 64)


@pytest.mark.parametrize("n", [3, 15, 16, 24, 40])
def test_int8_products_take_panels_and_fewer_columns_than_a_vector_one_vectors_worth(n):
    """The int8 product's words (``matmul_u8s8``): panels of a register tile from two vectors of
    columns; fewer than one vector: one vector's panel, computed whole, then a slice to the n real
    columns; in between: unpacked (its schedule's one-vector panels)."""
    rng = np.random.default_rng(n)
    w = rng.integers(-128, 128, (24, n)).astype(np.int8)
    node = helper.make_node("MatMulInteger", ["a", "w"], ["y"])
    graph = helper.make_graph([node], "q", [helper.make_tensor_value_info("a", TensorProto.UINT8, [40, 24])],
                              [helper.make_tensor_value_info("y", TensorProto.INT32, [40, n])],
                              [numpy_helper.from_array(w, "w")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    g = optimize(lw.from_onnx(model))
    (product,) = [nd for nd in g.nodes if nd.op_type == "matmul_u8s8"]
    lanes = lw.target.host_target().lanes("int32")
    want_panels = panel_width(lanes) if n >= panel_width(lanes) else lanes if n < lanes else None
    assert product.attrs.get("panels") == want_panels
    assert ("slice" in [nd.op_type for nd in g.nodes]) == (n < lanes)
    a = rng.integers(0, 256, (40, 24)).astype(np.uint8)
    got, = lw.compile(lw.from_onnx(model), progress=False).run({"a": a})
    np.testing.assert_array_equal(got, a.astype(np.int32) @ w.astype(np.int32))


def test_a_symbolic_row_count_gets_panels():
    """Rows known only as a sympy size (a model with symbolic batch and sequence): one kernel serves
    every row count, so the weight is packed in panels as for a known count."""
    from loopweave.nn_ops.network import symbolic as S
    from loopweave.nn_ops.network.graph import Graph
    nr = panel_width(lw.target.host_target().lanes("float32"))
    g = Graph("dense")
    rows = S.symbol("batch") * S.symbol("seq")
    g.inputs, g.outputs = ["x"], ["y"]
    g.add_value("x", (rows, 24))
    g.add_initializer("w", np.ones((nr + 3, 24), np.float32))
    g.add_value("y", (rows, nr + 3))
    g.add_node("dense", ["x", "w"], ["y"])
    node, weight = _dense_node(choose_dense_layout(g, lw.target.host_target().lanes("float32")))
    assert node.attrs["panels"] == nr and node.attrs["columns"] == nr + 3
    assert weight.shape == (2, 24, nr)
