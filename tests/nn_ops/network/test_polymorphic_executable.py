"""The run path of a network compiled once (``network/polymorphic_executable.py``): a feed at shapes
that ran before takes one lookup by its shapes, any other feed is checked; outputs are new arrays,
written by the kernels where an output is all of a kernel's result."""
import numpy as np
import pytest
from onnx import TensorProto, helper

import loopweave as lw
from loopweave.errors import ArgumentError


def _model(nodes, inputs, outputs, inits=()):
    """An ONNX model of float32 values: ``inputs`` and ``outputs`` [(name, shape)]."""
    graph = helper.make_graph(nodes, "run_path", [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s))
                                                  for n, s in inputs],
                              [helper.make_tensor_value_info(n, TensorProto.FLOAT, list(s)) for n, s in outputs],
                              initializer=list(inits))
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    model.ir_version = 8
    return model


@pytest.fixture(scope="module")
def two_inputs():
    """relu(a + b) for a and b [batch, 6], through the graph pipeline."""
    model = _model([helper.make_node("Add", ["a", "b"], ["s"]), helper.make_node("Relu", ["s"], ["y"])],
                   [("a", ("batch", 6)), ("b", ("batch", 6))], [("y", ("batch", 6))])
    return lw.compile(lw.from_onnx(model), pipeline="graph")


def _feed(rng, batch):
    return {"a": rng.standard_normal((batch, 6)).astype(np.float32), "b": rng.standard_normal((batch, 6)).astype(np.float32)}


def _relu_sum(feed):
    return np.maximum(feed["a"] + feed["b"], 0)


def _counting_binds(exe, monkeypatch) -> list:
    """A list that grows by one at each feed checked against the signature (``bind``)."""
    seen = []
    bind = exe.bind

    def counted(feed):
        seen.append({n: a.shape for n, a in feed.items()})
        return bind(feed)
    monkeypatch.setattr(exe, "bind", counted)
    return seen


def test_a_second_run_at_the_same_shapes_is_not_checked_again(two_inputs, monkeypatch):
    exe = two_inputs
    seen = _counting_binds(exe, monkeypatch)
    rng = np.random.default_rng(0)
    for _ in range(3):
        feed = _feed(rng, 2)
        np.testing.assert_array_equal(exe.run(feed)[0], _relu_sum(feed))
    assert len(seen) == 1
    feed = _feed(rng, 5)
    np.testing.assert_array_equal(exe.run(feed)[0], _relu_sum(feed))
    exe.run(feed)
    assert len(seen) == 2                   # other shapes: checked once


def test_a_feed_at_recent_shapes_that_is_not_plain_is_still_checked(two_inputs, monkeypatch):
    """After a run at a binding: the wrong dtype, a missing or unknown input, a wrong size, sizes that
    bind one symbol twice, or a strided array: each goes through the checks, which name what is
    wrong (or convert what they may)."""
    exe = two_inputs
    feed = _feed(np.random.default_rng(1), 2)
    a, b = feed["a"], feed["b"]
    exe.run(feed)
    seen = _counting_binds(exe, monkeypatch)
    with pytest.raises(ArgumentError, match=r"input 'b' must have dtype float32, got float64"):
        exe.run({"a": a, "b": b.astype(np.float64)})
    with pytest.raises(ArgumentError, match=r"missing input\(s\) 'b'"):
        exe.run({"a": a})
    with pytest.raises(ArgumentError, match=r"unknown input\(s\) 'c'"):
        exe.run({"a": a, "b": b, "c": b})
    with pytest.raises(ArgumentError, match=r"input 'b' must have shape \[batch, 6\], got \(2, 5\)"):
        exe.run({"a": a, "b": b[:, :5].copy()})
    with pytest.raises(ArgumentError, match=r"batch"):                 # a binds batch = 2, b 3
        exe.run({"a": a, "b": np.ones((3, 6), np.float32)})
    wide = np.zeros((2, 12), np.float32)
    wide[:, ::2] = b
    np.testing.assert_array_equal(exe.run({"a": a, "b": wide[:, ::2]})[0], _relu_sum(feed))
    assert len(seen) == 3                   # the dtype and names fail before the binding


def test_outputs_are_new_arrays_written_by_the_kernels(two_inputs):
    """The kernel that computes an output writes it into a new array each run (no copy out of the
    arena), so a result is never overwritten by a later run."""
    exe = two_inputs
    rng = np.random.default_rng(2)
    feeds = [_feed(rng, 3) for _ in range(2)]
    first, = exe.run(feeds[0])
    second, = exe.run(feeds[1])
    for got, feed in ((first, feeds[0]), (second, feeds[1])):
        np.testing.assert_array_equal(got, _relu_sum(feed))
        assert got.flags.owndata and not np.shares_memory(got, exe.plan._arena)
    assert exe._tables[((3, 6), (3, 6))].made is None        # every output written in place


def test_outputs_that_share_memory_are_inputs_or_are_read_again_are_their_own_arrays():
    """y = relu(x) is an output that a later kernel reads, z = y + 1 an output with a view of it as
    another output, and the input itself an output: all correct, none sharing memory with another
    output, the feed or a later run's results."""
    one = helper.make_tensor("one", TensorProto.FLOAT, [], [1.0])
    shape = helper.make_tensor("shape", TensorProto.INT64, [1], [-1])
    model = _model([helper.make_node("Relu", ["x"], ["y"]), helper.make_node("Add", ["y", "one"], ["z"]),
                    helper.make_node("Reshape", ["z", "shape"], ["flat"]), helper.make_node("Identity", ["x"], ["same"])],
                   [("x", ("batch", 6))], [("y", ("batch", 6)), ("z", ("batch", 6)), ("flat", ("6*batch",)),
                                           ("same", ("batch", 6))], [one, shape])
    exe = lw.compile(lw.from_onnx(model), pipeline="graph")
    rng = np.random.default_rng(3)
    for batch in (1, 4, 4, 2):
        x = rng.standard_normal((batch, 6)).astype(np.float32)
        outs = exe.run({"x": x})
        y = np.maximum(x, 0)
        for got, want in zip(outs, (y, y + 1, (y + 1).reshape(-1), x)):
            np.testing.assert_array_equal(got, want)
        for k, got in enumerate(outs):
            assert not np.shares_memory(got, x)
            assert not any(np.shares_memory(got, other) for other in outs[k + 1:])
        again = exe.run({"x": x + 1})
        np.testing.assert_array_equal(outs[0], y)
        assert not any(np.shares_memory(o, a) for o, a in zip(outs, again))


def test_a_convs_variants_are_built_by_the_first_run_that_picks_them(monkeypatch, tmp_path):
    """A compile-once conv's Winograd and row-block kernels are deferred: the compile builds the
    general kernels only, a run builds (in one ``build_many``) the variants its binding picks, a run at
    a binding that picks none of the others builds nothing, and ``save`` builds the rest."""
    ort = pytest.importorskip("onnxruntime")
    from loopweave.nn_ops.network import pending_kernels
    from loopweave.nn_ops.network.pending_kernels import Deferred
    from loopweave.nn_ops.testing.onnx_builder import OnnxBuilder

    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(tmp_path / "cache"))      # nothing built before
    b = OnnxBuilder(0)
    x = b.relu(b.conv("input", 3, 32, 3, bias=True))
    model = b.model(("N", 3, "H", "W"), b.conv(x, 32, 32, 3, bias=True), ("N", 32, "H", "W"))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    deferred = {id(v.module): v.module for c in exe.calls for v in c.variants}
    assert len(deferred) >= 4 and all(isinstance(m, Deferred) for m in deferred.values())
    built = []
    build_many = pending_kernels.backend_build.build_many
    monkeypatch.setattr(pending_kernels.backend_build, "build_many",
                        lambda jobs, *a, **k: built.append([j[2] for j in jobs]) or build_many(jobs, *a, **k))
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])

    def check(shape):
        x = np.random.default_rng(sum(shape)).standard_normal(shape).astype(np.float32)
        np.testing.assert_allclose(exe.run({"input": x})[0], session.run(None, {"input": x})[0], rtol=1e-4, atol=1e-4)
    binding = {"N": 1, "H": 28, "W": 28}
    picked = {c.module_at(binding).name for c in exe.calls if isinstance(c.module_at(binding), Deferred)}
    assert picked
    check((1, 3, 28, 28))
    assert [sorted(names) for names in built] == [sorted(picked)]
    check((1, 3, 28, 28))
    check((2, 3, 5, 8))                                     # general kernels only
    assert len(built) == 1
    left = [m for c in exe.calls for v in c.variants for m in [v.module] if isinstance(m, Deferred)]
    assert left and len(deferred) == len(picked) + len({id(m) for m in left})
    exe.save(tmp_path / "net.lwx")
    assert len(built) == 2 and not any(isinstance(v.module, Deferred) for c in exe.calls for v in c.variants)
    loaded = lw.load(tmp_path / "net.lwx")
    x = np.random.default_rng(1).standard_normal((1, 3, 20, 40)).astype(np.float32)
    np.testing.assert_array_equal(loaded.run({"input": x})[0], exe.run({"input": x})[0])
