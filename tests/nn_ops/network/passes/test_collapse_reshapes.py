"""collapse_reshapes: chains of reshapes read their first input, reshapes to the same shape go; a
stack of 1-d convolutions (2-d ones on rows of height 1 between reshapes) then stays in the blocked
layout from its first conv to its last.  Checked against onnxruntime."""
import numpy as np
import pytest
from onnx import TensorProto, helper, numpy_helper

import loopweave as lw
from loopweave.nn_ops.network.graph import Graph
from loopweave.nn_ops.network.passes import collapse_reshapes, optimize

pytest.importorskip("onnxruntime")

from loopweave.nn_ops.testing.onnxruntime_peer import onnxruntime_session  # noqa: E402


def _conv1d_stack(channels=32, length=256, layers=3, instance_norm=False):
    rng = np.random.default_rng(0)
    nodes, inits, x, cin = [], [], "input", 1
    for i in range(layers):
        w = (rng.standard_normal((channels, cin, 3)) / np.sqrt(cin * 3)).astype(np.float32)
        inits += [numpy_helper.from_array(w, f"w{i}"), numpy_helper.from_array(rng.standard_normal(channels)
                                                                               .astype(np.float32), f"b{i}")]
        nodes.append(helper.make_node("Conv", [x, f"w{i}", f"b{i}"], [f"c{i}"], kernel_shape=[3], pads=[1, 1]))
        if instance_norm:       # wav2vec2's first layer: a norm over the signal, per channel
            inits += [numpy_helper.from_array((1 + 0.1 * rng.standard_normal(channels)).astype(np.float32), f"g{i}"),
                      numpy_helper.from_array((0.1 * rng.standard_normal(channels)).astype(np.float32), f"s{i}")]
            nodes.append(helper.make_node("InstanceNormalization", [f"c{i}", f"g{i}", f"s{i}"], [f"n{i}"]))
            nodes[-2].output[0], nodes[-1].input[0], nodes[-1].output[0] = f"p{i}", f"p{i}", f"c{i}"
        nodes.append(helper.make_node("Relu", [f"c{i}"], [f"r{i}"]))
        x, cin = f"r{i}", channels
    x_info = helper.make_tensor_value_info("input", TensorProto.FLOAT, [1, 1, length])
    graph = helper.make_graph(nodes, "conv1d", [x_info],
                              [helper.make_tensor_value_info(x, TensorProto.FLOAT, [1, channels, length])], inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model


@pytest.mark.parametrize("instance_norm", [False, True])
def test_a_stack_of_1d_convs_stays_blocked_between_its_layers(instance_norm):
    """With instance norms after the convs too (normalised as rows of height 1, as the convs run)."""
    model = _conv1d_stack(instance_norm=instance_norm)
    exe = lw.compile(lw.from_onnx(model), progress=False)
    layouts = [c for c in exe.calls if "from_blocked" in c.ops or "to_blocked" in c.ops]
    assert len(layouts) == 1, [c.ops for c in exe.calls]          # one from_blocked, at the end
    x = np.random.default_rng(1).standard_normal((1, 1, 256)).astype(np.float32)
    want, = onnxruntime_session(model, threads=2).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-4, atol=1e-4)


def test_reshape_chains_collapse_and_same_shape_reshapes_go_but_graph_outputs_stay():
    g = Graph("g")
    g.inputs = ["x"]
    g.add_value("x", (2, 3, 4))
    for name, shape in (("a", (6, 4)), ("b", (2, 12)), ("c", (2, 3, 4)), ("d", (2, 3, 4))):
        g.add_value(name, shape)
    g.add_node("reshape", ["x"], ["a"], {"shape": (6, 4)})
    g.add_node("reshape", ["a"], ["b"], {"shape": (2, 12)})
    g.add_node("reshape", ["b"], ["c"], {"shape": (2, 3, 4)})       # back to x's shape: dropped
    g.add_node("relu", ["c"], ["d"])
    g.add_value("e", (2, 3, 4))
    g.add_node("identity", ["d"], ["e"])                             # a graph output: kept
    g.outputs = ["e"]
    collapse_reshapes(g)
    ops = {n.outputs[0]: (n.op_type, n.inputs) for n in g.nodes}
    assert "c" not in ops and ops["d"] == ("relu", ["x"]) and ops["b"] == ("reshape", ["x"])
    assert ops["e"] == ("identity", ["d"])
    assert [n.op_type for n in optimize(g).nodes] == ["relu", "identity"]
