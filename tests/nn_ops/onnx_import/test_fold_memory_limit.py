"""Constants folded at import are checked against lw.memory_limit before they are made: a model whose
folded Expand, Tile, Pad, broadcast arithmetic, Gather, Concat, Cast, window or Resize table would not
fit is refused naming the value, and nothing of that size is allocated.  The compile-once arena of a
dynamic executable asks the limit before it grows."""
import tracemalloc

import numpy as np
import pytest
import sympy
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.errors import ArgumentError, OnnxImportError

LIMIT = 1 << 20            # 1 MiB
BIG = 4096                 # 4096 x 4096 float32 = 64 MiB: well past the limit, cheap for the machine


def _const(name, value):
    return numpy_helper.from_array(np.asarray(value), name)


def _hidden(name, values):
    """An int64 vector ONNX shape inference cannot see through (weights are stripped before it runs,
    and a Concat of them is computed only by loopweave's folding)."""
    parts = [f"{name}.{k}" for k in range(len(values))]
    inits = [_const(p, np.array([v], np.int64)) for p, v in zip(parts, values)]
    return inits, [helper.make_node("Concat", parts, [name], axis=0)]


def _model(nodes, inits, rank=2, inputs=()):
    # a long 1-D input turns ONNX's data propagation off (importer._data_prop_is_cheap), as a hostile
    # model may: only loopweave's own folding then knows the folded shapes
    long = helper.make_tensor_value_info("long", TensorProto.FLOAT, [5000])
    graph = helper.make_graph(nodes, "fold", [*inputs, long],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None] * rank)],
                              initializer=inits)
    m = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    m.ir_version = 8
    return m


def _expand():
    inits, nodes = _hidden("shape", [BIG, BIG])
    return _model(nodes + [helper.make_node("Expand", ["x", "shape"], ["y"])],
                  inits + [_const("x", np.ones(1, np.float32))])


def _tile():
    inits, nodes = _hidden("reps", [BIG, BIG])
    return _model(nodes + [helper.make_node("Tile", ["x", "reps"], ["y"])],
                  inits + [_const("x", np.ones((1, 1), np.float32))])


def _pad():
    inits, nodes = _hidden("pads", [0, BIG * BIG])
    return _model(nodes + [helper.make_node("Pad", ["x", "pads"], ["y"])],
                  inits + [_const("x", np.ones(1, np.float32))], rank=1)


def _broadcast_add():
    i1, n1 = _hidden("s1", [BIG, 1])
    i2, n2 = _hidden("s2", [1, BIG])
    nodes = n1 + n2 + [helper.make_node("Reshape", ["a", "s1"], ["a2"]), helper.make_node("Reshape", ["b", "s2"], ["b2"]),
                       helper.make_node("Add", ["a2", "b2"], ["y"])]
    return _model(nodes, i1 + i2 + [_const("a", np.ones(BIG, np.float32)), _const("b", np.ones(BIG, np.float32))])


def _gather():
    inits, nodes = _hidden("s", [BIG])
    nodes += [helper.make_node("Reshape", ["idx", "s"], ["idx2"]), helper.make_node("Gather", ["data", "idx2"], ["y"])]
    return _model(nodes, inits + [_const("data", np.ones((2, BIG), np.float32)), _const("idx", np.zeros(BIG, np.int64))])


def _window():
    inits, nodes = _hidden("n", [BIG * BIG])
    nodes += [helper.make_node("Squeeze", ["n"], ["n0"]), helper.make_node("HannWindow", ["n0"], ["y"])]
    return _model(nodes, inits, rank=1)


def _constant_of_shape():
    """int64 values: 8 bytes an element (the size check counted one)."""
    inits, nodes = _hidden("shape", [LIMIT // 2])
    value = numpy_helper.from_array(np.array([7], np.int64))
    nodes += [helper.make_node("ConstantOfShape", ["shape"], ["y"], value=value)]
    return _model(nodes, inits, rank=1)


def _resize():
    inits, nodes = _hidden("sizes", [1, 1, BIG, BIG])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 1, 2, 2])
    nodes += [helper.make_node("Resize", ["x", "", "", "sizes"], ["y"], mode="nearest")]
    return _model(nodes, inits, rank=4, inputs=[x])


@pytest.mark.parametrize("make", [_expand, _tile, _pad, _broadcast_add, _gather, _window, _constant_of_shape,
                                  _resize])
def test_a_fold_past_the_limit_is_refused_before_it_is_made(make):
    model = make()
    tracemalloc.start()
    try:
        with lw.memory_limit(LIMIT), pytest.raises(OnnxImportError, match="memory limit of 1048576 bytes") as info:
            lw.from_onnx(model)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert "'y'" in str(info.value)
    assert peak < 8 * LIMIT, f"{peak} bytes were allocated"


def test_the_same_folds_within_the_limit_import():
    with lw.memory_limit(1 << 30):
        g = lw.from_onnx(_expand())
    assert g.initializers["y"].shape == (BIG, BIG)


def test_a_dynamic_arena_past_the_limit_is_refused_before_it_grows():
    from loopweave.nn_ops.network.symbolic_plan import SymbolicPlan
    n = sympy.Symbol("n", integer=True, positive=True)
    plan = SymbolicPlan({"a": ((n, 1024), "float32"), "b": ((n, 1024), "float32")},
                        [([], ["a"]), (["a"], ["b"])], {}, keep=["b"])
    with lw.memory_limit(LIMIT):
        assert plan.arrays({"n": 16})["b"].shape == (16, 1024)
        with pytest.raises(ArgumentError, match=r"sizes \(n=4096\) need \d+ bytes .* memory limit of 1048576"):
            plan.arrays({"n": 4096})
    assert plan.arena_bytes < LIMIT


def test_a_symbolic_model_is_checked_too():
    """A model with a symbolic size is specialised to a probe binding at import (and compiled once for
    every shape by the same folders): the fold is refused there, before it is made."""
    inits, nodes = _hidden("shape", [BIG, BIG])
    x = helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])
    long = helper.make_tensor_value_info("long", TensorProto.FLOAT, [5000])     # data propagation off
    nodes += [helper.make_node("Expand", ["one", "shape"], ["big"]), helper.make_node("Relu", ["x"], ["y"])]
    graph = helper.make_graph(nodes, "fold", [x, long],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4]),
                               helper.make_tensor_value_info("big", TensorProto.FLOAT, [None, None])],
                              initializer=inits + [_const("one", np.ones(1, np.float32))])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 18)])
    model.ir_version = 8
    tracemalloc.start()
    try:
        with lw.memory_limit(LIMIT), pytest.raises(OnnxImportError, match="memory limit of 1048576 bytes"):
            lw.compile(lw.from_onnx(model), polymorphic=True, progress=False)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert peak < 8 * LIMIT + (16 << 20), f"{peak} bytes were allocated"
