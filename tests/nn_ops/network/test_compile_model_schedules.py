"""``lw.compile(net, schedules="model")``: each kernel gets the cost model's pick, nothing measured."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.autoschedule.search import PICK_MARGIN

onnx = pytest.importorskip("onnx")
pytest.importorskip("lightgbm")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402


def _dense_relu():
    rng = np.random.default_rng(3)
    w = rng.standard_normal((64, 48)).astype(np.float32)
    b = rng.standard_normal(48).astype(np.float32)
    graph = helper.make_graph(
        [helper.make_node("Gemm", ["input", "w", "b"], ["y"]), helper.make_node("Relu", ["y"], ["out"])], "dense",
        [helper.make_tensor_value_info("input", TensorProto.FLOAT, [32, 64])],
        [helper.make_tensor_value_info("out", TensorProto.FLOAT, [32, 48])],
        [numpy_helper.from_array(w, "w"), numpy_helper.from_array(b, "b")])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    return lw.from_onnx(model), w, b


@pytest.mark.parametrize("default_last", [False, True])
def test_schedules_model_applies_the_picks_and_computes_the_same(monkeypatch, default_last):
    """As shipped, and with the model's scores replaced by ones that rank the default schedule (scored
    alone, before the proposals) far below every proposal, so that every kernel takes a pick."""
    def default_last_scores(self, X):
        return np.array([-1e9]) if len(X) == 1 else -np.arange(len(X), dtype=float)
    if default_last:
        monkeypatch.setattr(auto.CostModel, "predict", default_last_scores)
    graph, w, b = _dense_relu()
    picks = auto.tune_network(lw.extract_tasks(graph), trials=0)
    assert len(picks.results) == len(lw.extract_tasks(graph))
    assert all(r.history == [] for r in picks.results)          # nothing measured
    if default_last:
        assert all(s is not None for s in picks.schedules)
    # a pick replaces a default only where the model ranks it more than the margin above it
    for r in picks.results:
        if r.trace is not None:
            assert r.best_record["predicted"] > r.best_record["default_predicted"] + PICK_MARGIN
    exe = lw.compile(graph, schedules="model", progress=False)
    # the same picks (deterministic: seeded proposals, one model) reach the compiled kernels
    assert exe.tuned_kernels == sum(s is not None for s in picks.schedules)
    x = np.random.default_rng(4).standard_normal((32, 64)).astype(np.float32)
    out = exe.run({"input": x})[0]
    np.testing.assert_allclose(out, np.maximum(x @ w + b, 0), rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(out, lw.compile(graph, progress=False).run({"input": x})[0], rtol=1e-5, atol=1e-5)


def test_schedules_argument_is_checked(tmp_path):
    graph, _, _ = _dense_relu()
    with pytest.raises(lw.ArgumentError, match="schedules takes 'model'"):
        lw.compile(graph, schedules="fast")
    (tmp_path / "log.jsonl").write_text("")
    with pytest.raises(lw.ArgumentError, match="not both"):
        lw.compile(graph, schedules="model", tuning_log=str(tmp_path / "log.jsonl"))
