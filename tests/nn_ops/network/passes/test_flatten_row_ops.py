"""flatten_row_ops: softmax and layer norm over symbolic leading sizes run on (rows, n) views;
static shapes are left alone."""
import numpy as np
import pytest

from loopweave.nn_ops.network import symbolic as S
from loopweave.nn_ops.network.graph import Graph
from loopweave.nn_ops.network.passes import flatten_row_ops

B, T = S.symbol("batch"), S.symbol("seq")


def _row_op(op, shape, axis=-1):
    g = Graph("rows")
    g.inputs, g.outputs = ["x"], ["y"]
    g.add_value("x", shape)
    inputs = ["x"]
    if op == "layer_norm":
        g.add_initializer("s", np.ones(shape[-1], np.float32))
        inputs.append("s")
    g.add_value("y", shape)
    g.add_node(op, inputs, ["y"], {"axis": axis})
    return g


@pytest.mark.parametrize("op", ["softmax", "layer_norm"])
def test_symbolic_rows_become_a_view(op):
    g = flatten_row_ops(_row_op(op, (B, 2, T, 32)))
    assert [n.op_type for n in g.nodes] == ["reshape", op, "reshape"]
    rows = g.nodes[1]
    assert g.shape(rows.inputs[0]) == (2 * B * T, 32) and g.shape(rows.outputs[0]) == (2 * B * T, 32)
    assert g.nodes[-1].outputs == ["y"] and g.nodes[-1].attrs["shape"] == (B, 2, T, 32)
    g.check()


@pytest.mark.parametrize("shape,axis", [((4, 2, 8, 32), -1), ((B * T, 32), -1), ((B, T, 32), 1)])
def test_static_rows_two_axes_and_other_axes_are_left_alone(shape, axis):
    g = flatten_row_ops(_row_op("softmax", shape, axis))
    assert [n.op_type for n in g.nodes] == ["softmax"]
