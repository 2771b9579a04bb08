"""Ops whose cost grows faster than their output (MatMul, Gemm, Einsum, CumSum, TopK, recurrent
layers) are bounded at import like the windowed ops: inputs of a size the memory allows can still
ask for days of compute, and such a node is refused naming its shapes."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.errors import OnnxImportError
from loopweave.nn_ops.onnx_import.work_bound import MAX_NODE_WORK

BIG = 1 << 16          # 65536^3 multiply-adds = 2^48, far past the bound; each operand 16 GiB


def _model(nodes, inputs, inits=()):
    values = [helper.make_tensor_value_info(n, TensorProto.FLOAT, s) for n, s in inputs]
    graph = helper.make_graph(nodes, "work", values, [helper.make_tensor_value_info("y", TensorProto.FLOAT,
                                                                                    [None, None])],
                              initializer=list(inits))
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


CASES = {
    "MatMul": lambda: _model([helper.make_node("MatMul", ["a", "b"], ["y"])], [("a", [BIG, BIG]), ("b", [BIG, BIG])]),
    "Gemm": lambda: _model([helper.make_node("Gemm", ["a", "b"], ["y"], transB=1)],
                           [("a", [BIG, BIG]), ("b", [BIG, BIG])]),
    "Einsum": lambda: _model([helper.make_node("Einsum", ["a", "b"], ["y"], equation="ij,jk->ik")],
                             [("a", [BIG, BIG]), ("b", [BIG, BIG])]),
    "CumSum": lambda: _model([helper.make_node("CumSum", ["a", "axis"], ["y"])], [("a", [1, 1 << 30])],
                             [numpy_helper.from_array(np.array(1, np.int64), "axis")]),
    "TopK": lambda: _model([helper.make_node("TopK", ["a", "k"], ["y", "i"])], [("a", [4, 1 << 28])],
                           [numpy_helper.from_array(np.array([1], np.int64), "k")]),
}


@pytest.mark.parametrize("op", sorted(CASES))
def test_a_node_past_the_work_bound_is_refused(op):
    with lw.memory_limit(1 << 40), pytest.raises(OnnxImportError, match="operations, more than the limit") as info:
        lw.from_onnx(CASES[op]())
    assert op in str(info.value)


def test_the_bound_lets_large_real_layers_through():
    from loopweave.nn_ops.onnx_import.work_bound import _einsum_work, _matmul_work
    assert _matmul_work([1, 128, 768], [768, 3072]) < MAX_NODE_WORK / 1000     # a BERT feed-forward
    assert _matmul_work([8, 2048, 2048], [8, 2048, 2048]) < MAX_NODE_WORK
    assert _einsum_work("bhqd,bhkd->bhqk", [[1, 12, 512, 64], [1, 12, 512, 64]]) < MAX_NODE_WORK / 1000
