"""sink_reshapes: an elementwise op after a reshape that keeps the last axis moves above it, also
over symbolic sizes, where sizes are compared as expressions."""
import numpy as np

from loopweave.nn_ops.network import symbolic as S
from loopweave.nn_ops.network.graph import Graph
from loopweave.nn_ops.network.passes import sink_reshapes

B, T = S.symbol("batch"), S.symbol("seq")


def _dense_then_bias(rows, shape, bias=4):
    g = Graph("bias")
    g.inputs, g.outputs = ["x"], ["z"]
    g.add_value("x", (rows, 8))
    g.add_initializer("w", np.ones((4, 8), np.float32))
    g.add_initializer("b", np.ones(bias, np.float32))
    g.add_value("y2", (rows, 4))
    g.add_value("y", shape)
    g.add_value("z", shape)
    g.add_node("dense", ["x", "w"], ["y2"])
    g.add_node("reshape", ["y2"], ["y"], {"shape": shape})
    g.add_node("add", ["y", "b"], ["z"])
    return g


def test_a_bias_after_a_symbolic_reshape_moves_into_the_dense_rows():
    g = sink_reshapes(_dense_then_bias(B * T, (B, T, 4)))     # (the old reshape is left to dead-code removal)
    (add,) = [n for n in g.nodes if n.op_type == "add"]
    assert add.inputs == ["y2", "b"] and g.shape(add.outputs[0]) == (B * T, 4)
    assert g.producer_map()["z"].op_type == "reshape" and g.shape("z") == (B, T, 4)


def test_a_reshape_that_changes_the_last_axis_stays():
    g = sink_reshapes(_dense_then_bias(B * T, (B, T * 2, 2), bias=2))
    assert [n.op_type for n in g.nodes] == ["dense", "reshape", "add"] and g.producer_map()["z"].inputs[0] == "y"
