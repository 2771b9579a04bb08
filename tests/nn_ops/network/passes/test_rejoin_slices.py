"""rejoin_slices and blocked channel slices: YOLOv8's C2f block (a Split into halves, a bottleneck on
the second, a Concat of both halves and its output) runs without layout transforms, slice copies or
a concat copy, and computes what onnxruntime computes."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.nn_ops.network.graph import Graph
from loopweave.nn_ops.network.passes import rejoin_slices
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder

pytest.importorskip("onnxruntime")

from loopweave.nn_ops.testing.onnxruntime_peer import onnxruntime_session  # noqa: E402


def _c2f(channels=32, size=12):
    b = OnnxBuilder(3)
    y = b.relu(b.conv("input", 8, channels, 3))
    half = channels // 2
    a, c = b.node("Split", [y, b.init("split", np.array([half, half], np.int64))], n_out=2, axis=1)
    z = b.relu(b.conv(c, half, half, 3))
    out = b.conv(b.node("Concat", [a, c, z], axis=1), 3 * half, 16, 1)
    return b.model((1, 8, size, size), out, (1, 16, size, size))


def test_a_c2f_block_runs_without_copies_or_transforms():
    model = _c2f()
    exe = lw.compile(lw.from_onnx(model), progress=False)
    names = [c.name for c in exe.calls]
    assert not [n for n in names if n in ("slice", "concat", "to_blocked")], names
    assert sum("from_blocked" in c.ops for c in exe.calls) == 1, names     # the graph output's
    x = np.random.default_rng(0).standard_normal((1, 8, 12, 12)).astype(np.float32)
    want, = onnxruntime_session(model, threads=2).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-4, atol=1e-4)


def test_only_slices_that_cover_their_source_in_order_are_rejoined():
    g = Graph("g")
    g.inputs = ["x"]
    g.add_value("x", (1, 6, 4))
    cuts = {"a": (0, 2), "b": (2, 6), "c": (2, 4), "d": (4, 6)}
    for name, (lo, hi) in cuts.items():
        g.add_value(name, (1, hi - lo, 4))
        g.add_node("slice", ["x"], [name], {"begin": (0, lo, 0), "end": (1, hi, 4), "step": (1, 1, 1)})
    for name, parts in (("whole", ["a", "b", "x"]), ("three", ["a", "c", "d"]), ("swapped", ["b", "a"]),
                        ("partial", ["c", "d"])):
        g.add_value(name, (1, sum(g.shape(p)[1] for p in parts), 4))
        g.add_node("concat", parts, [name], {"axis": 1})
    g.outputs = ["whole", "three", "swapped", "partial"]
    rejoin_slices(g)
    inputs = {n.outputs[0]: n.inputs for n in g.nodes if n.op_type == "concat"}
    assert inputs == {"whole": ["x", "x"], "three": ["x"], "swapped": ["b", "a"], "partial": ["c", "d"]}
