"""Tuning a network's kernels (autoschedule/network.py), applying the log in lw.compile and the CLI."""
import json

import numpy as np
import pytest

import loopweave as lw
from loopweave import autoschedule as auto, cli

pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

from loopweave.nn_ops.testing.model_zoo import small_cnn  # noqa: E402


def _reference(model, x):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]


def test_tune_network_measures_the_defaults_first_and_compile_applies_the_log(tmp_path):
    model = small_cnn()
    graph = lw.from_onnx(model)
    log = tmp_path / "net.jsonl"
    kernels = lw.extract_tasks(graph, "llvm")
    result = auto.tune_network(kernels, trials=14, log=str(log), progress=False)
    assert len(result.results) == len(kernels) == 9
    records = [json.loads(line) for line in log.read_text().splitlines()]
    assert sum(r["choice"] == {"given": "default schedule"} and not r.get("verified") for r in records) == 9
    assert result.tuned_seconds <= result.default_seconds          # the default is one candidate
    exe = lw.compile(graph, tuning_log=str(log), progress=False)
    assert exe.tuned_kernels == len(exe.kernels)
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(exe.run({"input": x})[0], _reference(model, x), rtol=1e-4, atol=1e-4)
    (tmp_path / "empty.jsonl").write_text("")
    untouched = lw.compile(graph, tuning_log=str(tmp_path / "empty.jsonl"), progress=False)
    assert untouched.tuned_kernels == 0


def test_tune_network_errors(tmp_path):
    graph = lw.from_onnx(small_cnn())
    tasks = lw.extract_tasks(graph)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(lw.ArgumentError, match="cannot be written"):
        auto.tune_network(tasks, trials=1, log=str(blocker / "net.jsonl"), progress=False)
    with pytest.raises(lw.ArgumentError, match="log="):
        auto.tune_network(tasks, trials=1)
    with pytest.raises(lw.ArgumentError, match=r"tune_network\(lw.extract_tasks\(net, target\)"):
        auto.tune_network(graph, trials=1, log="x.jsonl")
    with pytest.raises(lw.ArgumentError, match="no tasks"):
        auto.tune_network([], trials=1, log="x.jsonl")
    with pytest.raises(lw.ArgumentError, match="static network graph"):
        lw.extract_tasks(object())


def test_cli_tune_then_compile_with_the_log(tmp_path, capsys):
    log, out = str(tmp_path / "net.jsonl"), str(tmp_path / "m.lwx")
    assert cli.main(["tune", "zoo:small_cnn", "--trials", "9", "--log", log, "-q"]) == 0
    assert "NetworkTuneResult" in capsys.readouterr().out
    assert cli.main(["compile", "zoo:small_cnn", "-o", out, "--tuning-log", log, "-q"]) == 0
    assert "from tuning records" in capsys.readouterr().out
    assert cli.main(["tune", "zoo:small_cnn", "--log", log, "-q"]) == 2
    assert "--trials" in capsys.readouterr().err
    assert cli.main(["tune", "zoo:small_cnn", "--log", log, "--time-budget", "soon"]) == 2


def test_sampled_schedules_of_every_kernel_of_a_network_compute_the_same():
    """The space's schedules of a CNN's fused kernels (conv + bias/ReLU/residual anchors, pools,
    layout transforms, dense) never change a result: each built sample against the default."""
    import random
    from loopweave.autoschedule.measure import _random_inputs
    from loopweave.autoschedule.space import Space
    from loopweave.autoschedule.task import Task
    graph = lw.from_onnx(small_cnn())
    rng = random.Random(0)
    built = 0
    for k in lw.extract_tasks(graph, "llvm"):
        space = Space(Task(k.args, "llvm"))
        arrays = _random_inputs(k.args)
        lw.build(k.default_schedule(), k.args)(*arrays)
        want = arrays[-1].copy()
        for _ in range(3):
            try:
                mod = lw.build(space.apply(space.sample(rng)), k.args)
            except lw.ScheduleError:
                continue
            arrays[-1][...] = np.nan
            mod(*arrays)
            np.testing.assert_allclose(arrays[-1], want, rtol=1e-4, atol=1e-4, err_msg=k.name)
            built += 1
    assert built >= 15


def test_cli_tune_with_only_a_time_budget_runs_until_it_is_spent(tmp_path, capsys):
    """`loopweave tune MODEL --time-budget 20m` (the README's command) needs no --trials."""
    import time
    log = str(tmp_path / "budget.jsonl")
    t0 = time.perf_counter()
    assert cli.main(["tune", "zoo:small_cnn", "--time-budget", "6s", "--log", log, "-q"]) == 0
    assert time.perf_counter() - t0 < 60
    lines = open(log).read().splitlines()
    assert len(lines) > 9        # more than the default schedules alone
    with pytest.raises(lw.ArgumentError, match="trials, time_budget"):
        auto.tune_network(lw.extract_tasks(lw.from_onnx(small_cnn())), trials=None, log=log)


def test_a_search_still_above_the_default_schedule_is_not_starved():
    """The gain comes from the search's own progress: a kernel whose searched candidates went
    from 30 ms to 2 ms while its default takes 0.6 ms keeps getting rounds."""
    from types import SimpleNamespace
    from loopweave.autoschedule.task_scheduler import expected_gain

    def history(times, given_first=True):
        h = [{"seconds": 0.6e-3, "error": None, "given": True}] if given_first else []
        return h + [{"seconds": t, "error": None, "given": False} for t in times]
    improving = SimpleNamespace(best={"seconds": 0.6e-3}, batch=2, task=SimpleNamespace(weight=1.0),
                                history=history([30e-3, 20e-3, 10e-3, 8e-3, 4e-3, 2e-3]))
    stuck = SimpleNamespace(best={"seconds": 0.6e-3}, batch=2, task=SimpleNamespace(weight=1.0),
                            history=history([2e-3] * 6))
    assert expected_gain(improving) > 10 * expected_gain(stuck)
    assert expected_gain(stuck) > 0          # the floor: never starved outright


def test_stalled_tasks_share_rounds_by_their_part_of_the_run_time():
    """Two stalled searches: the one that has had many rounds yields to a smaller one that has
    had few, so trials follow weight x time instead of all going to the largest kernel."""
    from types import SimpleNamespace
    from loopweave.autoschedule.task_scheduler import expected_gain

    def stalled(weight, seconds, rounds):
        h = [{"seconds": seconds, "error": None, "given": True}]
        h += [{"seconds": seconds * 1.5, "error": None, "given": False}] * (8 * rounds)
        return SimpleNamespace(best={"seconds": seconds}, batch=8, task=SimpleNamespace(weight=weight), history=h)
    big_and_well_tuned = stalled(4, 0.2e-3, rounds=300)
    small_and_fresh = stalled(12, 0.046e-3, rounds=3)
    assert expected_gain(small_and_fresh) > expected_gain(big_and_well_tuned)


def test_compile_uses_checked_records_of_an_older_version_and_skips_stale_ones(tmp_path):
    """A log of an older loopweave: per kernel a stale record (its trace names an axis that is not
    there), fastest, and a valid one; lw.compile warns about the stale ones and uses the valid ones."""
    from loopweave.autoschedule import records
    from loopweave.autoschedule.task import Task
    model = small_cnn()
    graph = lw.from_onnx(model)
    log = tmp_path / "old.jsonl"
    rows = []
    for k in lw.extract_tasks(graph, "llvm"):
        task = Task(k.args, "llvm")
        stale = json.dumps({"version": 1, "steps": [{"primitive": "split", "stage": k.args[-1].name,
                                                     "args": {"parent": "no_such_axis", "factor": 4}}]})
        for trace, seconds in ((stale, 1e-6), (k.default_schedule().trace.to_json(), 1e-4)):
            r = records.make_record(task.key, task.target, {}, trace, seconds, None, 1, names=task.names)
            rows.append(dict(r, version="0.0.1-old"))
    records.append(str(log), rows)
    with pytest.warns(auto.RecordWarning, match="no longer apply.*no_such_axis") as caught:
        exe = lw.compile(graph, tuning_log=str(log), progress=False)
    assert all("0.0.1-old" in str(w.message) for w in caught if issubclass(w.category, auto.RecordWarning))
    assert exe.tuned_kernels == len(exe.kernels)
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.testing.assert_allclose(exe.run({"input": x})[0], _reference(model, x), rtol=1e-4, atol=1e-4)
