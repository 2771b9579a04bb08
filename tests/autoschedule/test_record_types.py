"""A tuning-log line whose fields have the wrong types is skipped with a warning naming its line,
never an AttributeError or KeyError from deep inside the tuner or the compiler."""
import json
import warnings

import pytest

from loopweave.autoschedule import records
from loopweave.autoschedule.records import RecordWarning
from loopweave.dsl.trace import TRACE_VERSION
from loopweave.target import host_target

GOOD_TRACE = json.dumps({"version": TRACE_VERSION, "steps": [{"primitive": "parallel", "stage": "C",
                                                               "args": {"axis": "i"}}]})


def _good(seconds=1e-3):
    return records.make_record("task-1", host_target(), {"tile": 8}, GOOD_TRACE, seconds, None, 1)


BAD = {
    "target_a_number": lambda r: dict(r, target=1),
    "target_without_cpu": lambda r: dict(r, target={"features": ""}),
    "trace_a_list": lambda r: dict(r, trace=[1, 2]),
    "trace_steps_not_a_list": lambda r: dict(r, trace=json.dumps({"version": TRACE_VERSION, "steps": 5})),
    "trace_step_not_a_step": lambda r: dict(r, trace=json.dumps({"version": TRACE_VERSION, "steps": [3]})),
    "trace_not_json": lambda r: dict(r, trace="{nope"),
    "seconds_a_string": lambda r: dict(r, seconds="fast"),
    "seconds_negative": lambda r: dict(r, seconds=-1.0),
    "task_a_list": lambda r: dict(r, task=["task-1"]),
    "choice_a_string": lambda r: dict(r, choice="tile"),
    "error_a_number": lambda r: dict(r, error=7),
    "names_a_string": lambda r: dict(r, names="A,B,C"),
    "names_axes_not_strings": lambda r: dict(r, names=[["A", []], ["C", [0, 1]]]),
    "shapes_not_lists": lambda r: dict(r, shapes=[64, 64]),
    "shapes_of_a_negative_size": lambda r: dict(r, shapes=[[64, -1]]),
    "a_list": lambda r: [r],
}


def test_wrongly_typed_lines_are_skipped_with_their_line_named(tmp_path):
    log = tmp_path / "tune.jsonl"
    lines = [json.dumps(_good(2e-3))] + [json.dumps(change(_good(1e-6))) for change in BAD.values()]
    log.write_text("\n".join(lines) + "\n")
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always", RecordWarning)
        found = records.best(str(log), host_target(), "task-1")
    assert found is not None and found["seconds"] == 2e-3
    messages = [str(w.message) for w in caught if issubclass(w.category, RecordWarning)]
    assert len(messages) == len(BAD), messages
    for lineno, (name, message) in enumerate(zip(BAD, messages), 2):
        assert message.startswith(f"{log}:{lineno}: skipped a corrupt tuning record"), (name, message)


@pytest.mark.parametrize("name", sorted(BAD))
def test_each_problem_is_said(name):
    problem = records.record_problem(BAD[name](_good()))
    assert problem is not None
    assert records.record_problem(_good()) is None


def test_a_tasks_records_carry_its_sizes(tmp_path):
    """The key is a hash: the record says the sizes it was measured at (what the compile-once
    compiler matches kernels of symbolic sizes by); the tuner writes them into every record."""
    import loopweave as lw
    from loopweave import autoschedule as auto
    from loopweave.autoschedule.task import Task
    A = lw.placeholder((12, 7), name="A")
    B = lw.compute((12, 7), lambda i, j: A[i, j] + 1, name="B")
    task = Task([A, B], "llvm")
    assert task.shapes == [[12, 7], [12, 7]]
    r = records.make_record(task.key, task.target, {}, GOOD_TRACE, 1e-3, None, 1, shapes=task.shapes)
    assert r["shapes"] == [[12, 7], [12, 7]] and records.record_problem(r) is None
    assert "shapes" not in records.make_record(task.key, task.target, {}, GOOD_TRACE, 1e-3, None, 1)
    log = tmp_path / "t.jsonl"
    auto.tune([A, B], trials=2, log=str(log), progress=False, measure_untuned=False)
    written = list(records.read(str(log), any_version=True))
    assert written and all(w["shapes"] == [[12, 7], [12, 7]] for w in written)
