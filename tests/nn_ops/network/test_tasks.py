"""A network's kernels as tuning tasks (nn_ops/network/tasks.py, ``lw.extract_tasks``): what the autoscheduler tunes."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.trace import Trace

pytest.importorskip("onnx")

from loopweave.nn_ops.testing.model_zoo import small_cnn, transformer_encoder  # noqa: E402


@pytest.mark.parametrize("make", [small_cnn, lambda: transformer_encoder(layers=1)])
def test_tasks_cover_every_kernel_call_once_per_distinct_kernel(make):
    graph = lw.from_onnx(make())
    exe = lw.compile(graph, progress=False)
    tasks = lw.extract_tasks(graph, "llvm")
    assert sum(t.weight for t in tasks) == len(exe.calls)
    assert len(tasks) == len({c.symbol for c in exe.calls}) == len({t.signature for t in tasks})
    assert sorted(g for t in tasks for g in t.groups) == sorted(c.name for c in exe.calls)


def test_a_task_builds_and_its_default_trace_replays_on_a_fresh_schedule():
    """The tuner gets the compute DAG alone; the default schedule is a trace it can replay as a candidate."""
    graph = lw.from_onnx(small_cnn())
    for task in lw.extract_tasks(graph, "llvm"):
        default = task.default_schedule()
        fresh = lw.create_schedule([task.args[-1]])
        Trace.from_json(default.trace.to_json()).apply(fresh)
        assert str(lw.lower(fresh, task.args)) == str(lw.lower(default, task.args)), task.name
    task = lw.extract_tasks(graph, "llvm")[0]
    f = lw.build(lw.create_schedule([task.args[-1]]), task.args)           # untuned: every stage at root
    g = lw.build(task.default_schedule(), task.args)
    rng = np.random.default_rng(0)
    ins = [rng.standard_normal([int(d.value) for d in t.shape]).astype(t.dtype) for t in task.args[:-1]]
    outs = [np.full([int(d.value) for d in task.args[-1].shape], np.nan, task.args[-1].dtype) for _ in range(2)]
    f(*ins, outs[0])
    g(*ins, outs[1])
    np.testing.assert_allclose(outs[1], outs[0], rtol=1e-4, atol=1e-4)
