"""materialize_output_copies: every non-empty graph output is written by a kernel of its own."""
import numpy as np

from loopweave.nn_ops.network.graph import Graph
from loopweave.nn_ops.network.passes import materialize_output_copies


def _graph():
    g = Graph()
    g.add_value("x", (2, 3))
    g.inputs = ["x"]
    g.add_initializer("w", np.ones((2, 3), np.float32))
    g.add_value("y", (2, 3))
    g.add_node("relu", ["x"], ["y"])
    g.add_value("r", (3, 2))
    g.add_node("reshape", ["y"], ["r"], {"shape": (3, 2)})
    g.add_value("e", (0, 3))
    g.add_initializer("e", np.zeros((0, 3), np.float32))
    return g


def test_a_reshape_output_is_computed_into_the_output():
    g = _graph()
    g.outputs = ["r", "y"]
    materialize_output_copies(g)
    assert g.outputs == ["r", "y"]
    assert [n.op_type for n in g.nodes] == ["relu", "reshape_copy"]


def test_inputs_constants_and_repeated_outputs_get_a_copy_and_an_empty_output_none():
    g = _graph()
    g.outputs = ["x", "w", "y", "y", "e"]
    materialize_output_copies(g)
    assert g.outputs == ["x.out", "w.out", "y", "y.out", "e"]
    copies = [(n.op_type, n.inputs, n.outputs) for n in g.nodes[2:]]
    assert copies == [("copy", ["x"], ["x.out"]), ("copy", ["w"], ["w.out"]), ("copy", ["y"], ["y.out"])]
    assert g.values["w.out"].shape == (2, 3) and g.values["w.out"].dtype == "float32"
