"""The autoscheduler: tuned schedules are correct, records resume, errors are clear."""
from __future__ import annotations

import json
import random
import warnings

import numpy as np
import pytest

import loopweave as lw
from loopweave import autoschedule as auto
from loopweave.autoschedule import records
from loopweave.autoschedule.measure import LocalMeasurer, _TASKS, measure_one
from loopweave.autoschedule.space import Space
from loopweave.autoschedule.task import Task


def matmul(n=64, m=48, kk=32):
    A = lw.placeholder((n, kk), name="A")
    B = lw.placeholder((kk, m), name="B")
    k = lw.reduce_axis((0, kk), name="k")
    C = lw.compute((n, m), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    return [A, B, C]


def blur(h=40, w=72):
    I = lw.placeholder((h, w), name="I")
    bx = lw.compute((h, w - 2), lambda y, x: (I[y, x] + I[y, x + 1] + I[y, x + 2]) / 3.0, name="bx")
    by = lw.compute((h - 2, w - 2), lambda y, x: (bx[y, x] + bx[y + 1, x] + bx[y + 2, x]) / 3.0, name="by")
    return [I, by]


def blur_ref(img):
    bx = (img[:, :-2] + img[:, 1:-1] + img[:, 2:]) / 3
    return (bx[:-2] + bx[1:-1] + bx[2:]) / 3


def run(mod, args, *inputs):
    out = np.full([int(getattr(d, "value", d)) for d in args[-1].shape], np.nan, "float32")
    mod(*inputs, out)
    return out


def test_tuned_matmul_is_correct_and_prints_as_code(tmp_path):
    args = matmul()
    res = auto.tune(args, trials=8, log=str(tmp_path / "mm.jsonl"), progress=False)
    assert len(res.history) == 8 and res.best_seconds > 0
    assert "s[C" in str(res.trace)
    a = np.random.default_rng(501).random((64, 32)).astype("float32")
    b = np.random.default_rng(511).random((32, 48)).astype("float32")
    np.testing.assert_allclose(run(res.build(), args, a, b), a @ b, rtol=1e-4)
    np.testing.assert_allclose(run(lw.build(res.schedule, args), args, a, b), a @ b, rtol=1e-4)
    assert "TuneResult" in repr(res) and "GFLOPS" in repr(res)
    assert res.untuned_seconds and res.speedup > 0


def test_tuned_blur_is_correct():
    args = blur()
    res = auto.tune(args, trials=6, progress=False, seed=3)
    img = np.random.default_rng(611).random((40, 72)).astype("float32")
    np.testing.assert_allclose(run(res.build(), args, img), blur_ref(img), rtol=1e-5)


def test_resume_does_not_measure_again(tmp_path):
    log = tmp_path / "r.jsonl"
    args = matmul(32, 32, 16)
    first = auto.tune(args, trials=5, log=str(log), progress=False, measure_untuned=False)
    lines = log.read_text().splitlines()
    assert len(lines) == 5
    again = auto.tune(args, trials=5, log=str(log), progress=False, measure_untuned=False)
    assert log.read_text().splitlines() == lines
    assert again.best_seconds == first.best_seconds
    more = auto.tune(args, trials=8, log=str(log), progress=False, measure_untuned=False)
    assert len(log.read_text().splitlines()) == 8
    assert more.best_seconds <= first.best_seconds
    keys = [json.dumps(json.loads(line)["choice"], sort_keys=True) for line in log.read_text().splitlines()]
    assert len(set(keys)) == 8


def test_apply_best_on_a_fresh_copy_of_the_dag(tmp_path):
    log = str(tmp_path / "a.jsonl")
    auto.tune(matmul(), trials=4, log=log, progress=False, measure_untuned=False)
    fresh = matmul()                     # new tensor objects, same computation
    s = auto.apply_best(log, fresh, target="llvm")
    assert s is not None
    a = np.random.default_rng(871).random((64, 32)).astype("float32")
    b = np.random.default_rng(881).random((32, 48)).astype("float32")
    np.testing.assert_allclose(run(lw.build(s, fresh), fresh, a, b), a @ b, rtol=1e-4)
    assert auto.apply_best(log, matmul(64, 48, 16), target="llvm") is None   # other shapes: other task


def test_corrupt_line_is_skipped_with_its_number(tmp_path):
    log = tmp_path / "c.jsonl"
    auto.tune(matmul(), trials=3, log=str(log), progress=False, measure_untuned=False)
    with open(log, "a") as fh:
        fh.write('{"task": "trunc\n')
    with pytest.warns(auto.RecordWarning, match=r"c\.jsonl:4"):
        s = auto.apply_best(str(log), matmul())
    assert s is not None


def test_records_of_another_target_are_ignored(tmp_path):
    """(Records of another loopweave version are checked and used: test_old_records_replayed.py.)"""
    log = tmp_path / "t.jsonl"
    auto.tune(matmul(), trials=3, log=str(log), progress=False, measure_untuned=False)
    rows = [json.loads(line) for line in log.read_text().splitlines()]
    other_cpu = [dict(r, target={"cpu": "some-other-cpu", "features": r["target"]["features"]}) for r in rows]
    log.write_text("".join(json.dumps(r) + "\n" for r in other_cpu))
    assert auto.apply_best(str(log), matmul()) is None
    log.write_text("".join(json.dumps(r) + "\n" for r in rows))
    assert auto.apply_best(str(log), matmul()) is not None


def test_errors(tmp_path):
    A = lw.placeholder((4, 4), name="A")
    with pytest.raises(lw.ArgumentError, match="no outputs"):
        auto.tune([A], trials=1, progress=False)
    with pytest.raises(lw.ArgumentError, match="trials must be >= 0"):
        auto.tune(matmul(), trials=-1, progress=False)
    with pytest.raises(lw.ArgumentError, match="trials must be an integer"):
        auto.tune(matmul(), trials=2.5, progress=False)
    with pytest.raises(lw.ArgumentError, match="unknown target"):
        auto.tune(matmul(), target="tpu", trials=1, progress=False)
    bad = tmp_path / "bad.jsonl"
    bad.write_bytes(b"\x89PNG\r\n binary")
    with pytest.raises(lw.ArgumentError, match="not JSON Lines"):
        auto.tune(matmul(), trials=1, log=str(bad), progress=False)
    with pytest.raises(lw.ArgumentError, match="not JSON Lines"):
        auto.apply_best(str(bad), matmul())


def test_a_log_in_a_new_folder_is_created_and_an_unwritable_one_fails_before_tuning(tmp_path):
    log = tmp_path / "new" / "folder" / "t.jsonl"
    auto.tune(matmul(), trials=2, log=str(log), progress=False, measure_untuned=False)
    assert len(log.read_text().splitlines()) == 2
    with pytest.raises(lw.ArgumentError, match="is a directory"):
        auto.tune(matmul(), trials=1, log=str(tmp_path), progress=False)
    blocker = tmp_path / "a_file"
    blocker.write_text("")
    with pytest.raises(lw.ArgumentError, match="cannot be written"):
        auto.tune(matmul(), trials=1, log=str(blocker / "t.jsonl"), progress=False)


def test_zero_trials_measures_nothing():
    res = auto.tune(matmul(), trials=0, progress=False)
    assert res.history == [] and res.best_seconds is None and res.untuned_seconds is None


def test_mutation_changes_one_decision_and_stays_in_the_space():
    space = Space(Task(matmul(), "llvm"))
    rng = random.Random(0)
    legal = dict(space.decisions)
    for _ in range(50):
        c = space.sample(rng)
        m = space.mutate(c, rng)
        changed = [n for n in c if c[n] != m[n]]
        assert len(changed) == 1
        assert all(m[n] in legal[n] for n in m)


def test_mutants_of_a_legal_schedule_build_correct_code():
    args = matmul(24, 40, 12)
    space = Space(Task(args, "llvm"))
    rng = random.Random(1)
    a = np.random.default_rng(1681).random((24, 12)).astype("float32")
    b = np.random.default_rng(1691).random((12, 40)).astype("float32")
    built = 0
    for _ in range(6):
        c = space.mutate(space.sample(rng), rng)
        try:
            s = space.apply(c)
            mod = lw.build(s, args)
        except lw.ScheduleError:
            continue          # refused by the schedule API: dropped before any build
        np.testing.assert_allclose(run(mod, args, a, b), a @ b, rtol=1e-4)
        built += 1
    assert built >= 3


def test_space_holds_the_hand_schedule_structure():
    """The op library's matmul structure (6x16 register block, packed B, shift tails) is one point."""
    space = Space(Task(matmul(96, 96, 64), "llvm"))
    choice = {"nr": space.task.target.lanes("float32") * 2 if space.task.target.lanes("float32") <= 32 else 16,
              "tile:i": 6, "order": "cols_outer", "cache_write": True, "pack": 1, "ksplit": 0,
              "parallel": "outer", "unroll_rows": True}
    text = str(space.apply(choice).trace)
    for piece in ("cache_write(C, 'local')", "cache_read(B, 'local', [C_local])", "tail='shift'",
                  "s[C_local].unroll(i_c)", "s[C_local].vectorize(j_c)", "s[C].parallel(j_outer)",
                  "s[B_local].compute_at(s[C], j_outer)", "s[B_local].vectorize(ax1_inner)"):
        assert piece in text


def test_crash_and_hang_cost_one_candidate_each():
    args = matmul(16, 16, 8)
    task = Task(args, "llvm")
    from loopweave.dsl.trace import Trace
    job = dict(key=task.key, task_bytes=task.to_bytes(), trace_json=Trace().to_json(), repeat=1, min_seconds=0.0)
    m = LocalMeasurer(timeout=2.0)
    try:
        crashed, ok1, hung, ok2 = m.run([dict(job, crash=True), job, dict(job, hang=30.0), job])
    finally:
        m.close()
    assert crashed.seconds is None and "crashed" in crashed.error
    assert hung.seconds is None and "timeout" in hung.error
    assert ok1.error is None and ok1.seconds > 0
    assert ok2.error is None and ok2.seconds > 0


def test_a_side_by_side_job_times_both_schedules_in_one_worker_call():
    """A 128^3 matmul: the untuned loops against a vectorized, parallel schedule, alternately;
    the ratio says which is faster, whatever the load between calls."""
    args = matmul(128, 128, 128)
    task = Task(args, "llvm")
    from loopweave.dsl.trace import Trace
    s = lw.create_schedule(task.outputs)
    C = task.outputs[0]
    i, j = C.op.axis
    k = C.op.reduce_axis[0]
    jo, ji = s[C].split(j, factor=16)
    s[C].reorder(i, jo, k, ji)
    s[C].vectorize(ji)
    s[C].parallel(i)
    job = dict(key=task.key, task_bytes=task.to_bytes(), trace_json=s.trace.to_json(),
               versus=Trace().to_json(), pairs=5)
    m = LocalMeasurer(timeout=60.0)
    try:
        (r,) = m.run([job])
    finally:
        m.close()
    assert r.error is None and r.seconds > 0 and r.versus_seconds > 0
    assert r.ratio > 1.5, r            # the vectorized schedule wins by far more than noise


def test_wrong_answer_is_caught():
    args = matmul(16, 16, 8)
    task = Task(args, "llvm")
    from loopweave.dsl.trace import Trace
    _TASKS.pop(task.key, None)
    try:
        r = measure_one(task.key, task.to_bytes(), Trace().to_json(), check_below=float("inf"), repeat=1,
                        min_seconds=0.0)
        assert r["error"] is None                        # the untuned build agrees with itself
        _TASKS[task.key]["reference"] = [np.zeros((16, 16), "float32")]   # a reference it cannot match
        r = measure_one(task.key, task.to_bytes(), Trace().to_json(), check_below=float("inf"), repeat=1,
                        min_seconds=0.0)
        assert r["seconds"] is None and "wrong answer" in r["error"]
    finally:
        _TASKS.pop(task.key, None)


def test_records_round_trip(tmp_path):
    task = Task(matmul(), "llvm")
    r = records.make_record(task.key, task.target, {"nr": 16}, '{"version": 1, "steps": []}', 1e-3, None, 1)
    log = tmp_path / "x.jsonl"
    records.append(str(log), [r])
    back = list(records.read(str(log), task.target, task.key))
    assert back == [json.loads(json.dumps(r))]


def softmax(m=6, n=200):
    X = lw.placeholder((m, n), name="X")
    k1 = lw.reduce_axis((0, n), name="k1")
    mx = lw.compute((m,), lambda i: lw.max(X[i, k1], axis=k1), name="mx")
    e = lw.compute((m, n), lambda i, j: lw.exp(X[i, j] - mx[i]), name="e")
    k2 = lw.reduce_axis((0, n), name="k2")
    sm = lw.compute((m,), lambda i: lw.sum(e[i, k2], axis=k2), name="sm")
    return [X, lw.compute((m, n), lambda i, j: e[i, j] / sm[i], name="Y")]


def softmax_ref(x):
    t = np.exp(x - x.max(axis=1, keepdims=True))
    return t / t.sum(axis=1, keepdims=True)


def test_row_reductions_may_be_factored_into_vector_partials():
    """rfactor of a long row reduction is a decision; its partial-result stage is vectorized."""
    args = softmax()
    space = Space(Task(args, "llvm"))
    names = dict(space.decisions)
    assert names["rfactor:mx"] == [True, False] and names["rfactor:sm"] == [True, False]
    choice = {n: c[0] for n, c in space.decisions}
    choice.update({"place:mx": "tile", "place:e": "tile", "place:sm": "tile", "parallel": "outer", "tile:i": 2})
    s = space.apply(choice)
    text = str(s.trace)
    assert "s.rfactor(mx," in text and "s.rfactor(sm," in text
    assert "s[mx_rf].vectorize(k1_inner_rf)" in text and "s[e].vectorize(j_inner)" in text
    x = np.random.default_rng(2901).random((6, 200)).astype("float32")
    np.testing.assert_allclose(run(lw.build(s, args), args, x), softmax_ref(x), rtol=1e-5, atol=1e-7)


def test_every_sampled_softmax_schedule_is_correct_or_refused():
    args = softmax(5, 131)
    space = Space(Task(args, "llvm"))
    rng = random.Random(2)
    x = np.random.default_rng(2981).random((5, 131)).astype("float32")
    built = 0
    for _ in range(12):
        try:
            mod = lw.build(space.apply(space.sample(rng)), args)
        except lw.ScheduleError:
            continue
        np.testing.assert_allclose(run(mod, args, x), softmax_ref(x), rtol=1e-5, atol=1e-7)
        built += 1
    assert built >= 4


def dense_bias_relu(n=24, m=40, kk=20):
    A = lw.placeholder((n, kk), name="A")
    B = lw.placeholder((kk, m), name="B")
    bias = lw.placeholder((m,), name="bias")
    k = lw.reduce_axis((0, kk), name="k")
    C = lw.compute((n, m), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="C")
    E = lw.compute((n, m), lambda i, j: C[i, j] + bias[j], name="E")
    return [A, B, bias, lw.compute((n, m), lambda i, j: lw.max(E[i, j], 0.0), name="D")]


def test_reduction_under_an_elementwise_epilogue_is_the_register_tile_anchor():
    """A conv/dense under bias + ReLU: the reduction is computed at the output's register
    tile with the epilogue inlined, like the op library's fused schedules."""
    args = dense_bias_relu()
    space = Space(Task(args, "llvm"))
    assert space.anchor.name == "C" and [t.name for t in space.epilogue] == ["E"]
    assert dict(space.decisions)["place:C"] == ["register", "tile", "root"]
    choice = {n: c[0] for n, c in space.decisions}
    choice.update({"place:C": "register", "tile:i": 4, "unroll_rows": True})
    text = str(space.apply(choice).trace)
    for piece in ("s[E].compute_inline()", "s[C].compute_at(s[D], ", "s[C].unroll(i)", "s[C].vectorize(j)"):
        assert piece in text, text
    assert dict(space.decisions)["pack"] == [None, 0, 1]       # A or B packed per panel
    packed = str(space.apply(dict(choice, pack=1)).trace)
    assert "B_local = s.cache_read(B, 'local', [C])" in packed and "s[B_local].compute_at(s[D], " in packed
    rng = np.random.default_rng(3351)
    a, b = rng.random((24, 20)).astype("float32"), rng.random((20, 40)).astype("float32")
    bias = np.random.default_rng(3361).standard_normal((40,)).astype("float32")
    want = np.maximum(a @ b + bias, 0)
    rng = random.Random(4)
    built = 0
    for c in [choice, dict(choice, pack=1)] + [space.sample(rng) for _ in range(10)]:
        try:
            mod = lw.build(space.apply(c), args)
        except lw.ScheduleError:
            continue
        np.testing.assert_allclose(run(mod, args, a, b, bias), want, rtol=1e-4, atol=1e-5)
        built += 1
    assert built >= 5


def test_sampled_register_tiles_fit_the_vector_registers():
    space = Space(Task(dense_bias_relu(64, 256, 32), "llvm"))
    rng = random.Random(0)
    for _ in range(40):
        c = space.sample(rng)
        if space.register_tiled(c):
            assert space.tile_vectors(c) <= 32
        m = space.mutate(c, rng)
        if space.register_tiled(m):
            assert space.tile_vectors(m) <= 32


def test_rfactor_is_offered_for_row_reductions_only():
    """Partial results pay for a reduction along rows (softmax), not for a matmul's k."""
    mm = Space(Task(dense_bias_relu(24, 40, 128), "llvm"))
    assert not any(n.startswith("rfactor:") for n, _ in mm.decisions)
    sm = Space(Task(softmax(), "llvm"))
    assert {n for n, _ in sm.decisions if n.startswith("rfactor:")} == {"rfactor:mx", "rfactor:sm"}


def test_a_gather_over_a_short_axis_is_tuned_with_ids_in_range():
    """Measured inputs of an index tensor stay below the axis it indexes (the kernel checks)."""
    from loopweave.nn_ops.ops.index import gather
    table = lw.placeholder((3, 64), name="table")
    ids = lw.placeholder((40,), name="ids", dtype="int64")
    out = gather(table, ids, axis=0)
    from loopweave.autoschedule.measure import _random_inputs
    drawn = _random_inputs([table, ids, out])[1]
    assert drawn.min() >= 0 and drawn.max() < 3
    res = auto.tune([table, ids, out], trials=3, progress=False, measure_untuned=False)
    assert res.best_seconds and not any(h["error"] for h in res.history), res.history


def test_fresh_samples_favour_the_register_tiled_sketch():
    rng = random.Random(5)
    space = Space(Task(dense_bias_relu(), "llvm"))
    share = sum(space.register_tiled(space.sample(rng)) for _ in range(200)) / 200
    assert share > 0.55           # uniform draws gave one in three


def _tuner_with_side_by_side(tmp_path, side_by_side_seconds):
    """A tuner over a fake measurer: the default takes 1.0 s; a searched candidate 0.5 s when
    measured alone (a lucky moment) and ``side_by_side_seconds`` beside the default."""
    from types import SimpleNamespace
    from loopweave.autoschedule.search import TaskTuner
    args = matmul(16, 16, 8)
    task = Task(args, "llvm")
    default_trace = lw.create_schedule(task.outputs).trace.to_json()
    pairs_asked = []

    class Fake:
        def run(self, jobs):
            out = []
            for j in jobs:
                if j.get("versus") is not None:
                    assert j["versus"] == default_trace
                    pairs_asked.append(j["pairs"])
                    out.append(SimpleNamespace(seconds=side_by_side_seconds, error=None, build_seconds=0.0,
                                               versus_seconds=1.0, ratio=1.0 / side_by_side_seconds))
                else:
                    t = 1.0 if j["trace_json"] == default_trace else 0.5
                    out.append(SimpleNamespace(seconds=t, error=None, build_seconds=0.0, versus_seconds=None,
                                               ratio=None))
            return out
    log = tmp_path / "v.jsonl"
    tuner = TaskTuner(task, Fake(), log=str(log), seed=0, batch=2)
    tuner.measure_given(default_trace, "default schedule")
    tuner.round(2)
    assert tuner.best["seconds"] == 0.5                       # a lucky first measurement
    tuner.verify_against(default_trace)
    assert pairs_asked and all(p >= 10 for p in pairs_asked)
    return task, default_trace, log, tuner, Fake


def test_verification_keeps_the_default_when_the_pick_loses_side_by_side(tmp_path):
    """Each pick is timed alternately with the default in one worker call; one slower there is
    rejected (records.best then skips it), on resume too."""
    from loopweave.autoschedule.search import TaskTuner
    task, default_trace, log, tuner, Fake = _tuner_with_side_by_side(tmp_path, 2.0)
    assert tuner.best["trace"] == default_trace
    assert records.best(str(log), task.target, task.key)["trace"] == default_trace
    again = TaskTuner(task, Fake(), log=str(log), seed=0, batch=2)    # resumed: the verified times
    assert again.best["trace"] == default_trace


def test_verification_needs_a_margin_over_the_default(tmp_path):
    task, default_trace, log, tuner, _ = _tuner_with_side_by_side(tmp_path, 1.0 / 1.01)   # 1 % faster: noise
    assert tuner.best["trace"] == default_trace
    rejected = [r for r in records.read(str(log), task.target, task.key) if r.get("ratio_to_default")]
    assert rejected and all("side by side" in r["error"] for r in rejected)


def test_verification_keeps_a_pick_that_wins_side_by_side(tmp_path):
    task, default_trace, log, tuner, _ = _tuner_with_side_by_side(tmp_path, 0.8)
    assert tuner.best["trace"] != default_trace and tuner.best["verified"]
    assert tuner.best["seconds"] == 0.8 and tuner.best["ratio_to_default"] == 1.25
    assert records.best(str(log), task.target, task.key)["trace"] == tuner.best["trace"]


def test_a_pick_that_won_side_by_side_outranks_a_later_faster_timing_of_the_default(tmp_path):
    """Medians of two verification runs are not comparable: the winner is kept by its ratio."""
    from loopweave.autoschedule.search import TaskTuner
    task, default_trace, log, tuner, Fake = _tuner_with_side_by_side(tmp_path, 0.8)
    default = next(r for r in records.read(str(log), task.target, task.key) if r["trace"] == default_trace)
    later = records.make_record(task.key, task.target, default["choice"], default_trace, 0.7, None, 99)
    later["verified"] = True
    records.append(str(log), [later])
    assert records.best(str(log), task.target, task.key)["trace"] == tuner.best["trace"] != default_trace
    assert TaskTuner(task, Fake(), log=str(log), seed=0, batch=2).best["trace"] == tuner.best["trace"]


def test_the_space_holds_the_fused_winograd_schedule():
    """Winograd's input transform -> 16 matmuls -> output transform per row of output tiles, the
    matmuls in their own register tile: a choice of the space built from the compute alone
    gives the op library's fused schedule's loops and its values."""
    from loopweave.nn_ops.ops import winograd
    X = lw.placeholder((1, 2, 8, 8, 16), name="X")
    U = lw.placeholder((16, 2, 2, 16, 16), name="U")
    Y = winograd.conv2d_winograd_blocked(X, U)
    args = [X, U, Y]
    space = Space(Task(args, "llvm"))
    names = dict(space.decisions)
    assert names["place:conv2d.wino_gemm"] == ["tile", "root", "outer"] and "regtile:conv2d.wino_gemm" in names
    assert names["unroll:conv2d.wino_in"] == [False, True]
    rows = [a.var.name for a in Y.op.axis]
    choice = {"place:conv2d.pad": "root", "place:conv2d.wino_in": "outer", "unroll:conv2d.wino_in": True,
              "place:conv2d.wino_gemm": "outer", "regtile:conv2d.wino_gemm": True,
              "tile:conv2d.wino_gemm.ob": 2, "tile:conv2d.wino_gemm.t": 4,
              "singles_first:conv2d.wino_gemm": True, "tile_order:conv2d.wino_gemm": "reversed",
              f"tile:{rows[2]}": 2, f"tile:{rows[3]}": 2, "lead": rows[2], "nr": 16, "order": "rows_outer",
              "parallel": "outer", "unroll_rows": True}
    s = space.apply(choice)
    text = str(lw.lower(s, args))
    # the transform and the matmuls are computed inside the parallel loop over output rows
    parallel_at = text.index("# parallel", text.index("conv2d.pad"))
    assert parallel_at < text.index("conv2d.wino_in = allocate") < text.index("conv2d.wino_gemm.local = allocate")
    rng = np.random.default_rng(0)
    x = rng.standard_normal((1, 2, 8, 8, 16)).astype("float32")
    u = rng.standard_normal((16, 2, 2, 16, 16)).astype("float32")
    got, want = np.empty((1, 2, 8, 8, 16), "float32"), np.empty((1, 2, 8, 8, 16), "float32")
    lw.build(s, args)(x, u, got)
    lw.build(lw.nn_ops.schedule(Y), args)(x, u, want)
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_sampled_producer_register_tiles_are_correct_or_refused():
    """Every sampled schedule of a two-matmul chain (the first one a producer that may get its
    own register tile, computed at root, per output row or at the outer loop) computes A @ B @ C."""
    A = lw.placeholder((24, 16), name="A")
    B = lw.placeholder((16, 32), name="B")
    C = lw.placeholder((32, 48), name="C")
    k = lw.reduce_axis((0, 16), name="k")
    AB = lw.compute((24, 32), lambda i, j: lw.sum(A[i, k] * B[k, j], axis=k), name="AB")
    r = lw.reduce_axis((0, 32), name="r")
    D = lw.compute((24, 48), lambda i, j: lw.sum(AB[i, r] * C[r, j], axis=r), name="D")
    args = [A, B, C, D]
    space = Space(Task(args, "llvm"))
    assert "regtile:AB" in dict(space.decisions)
    rng = random.Random(3)
    rng = np.random.default_rng(5091)
    a, b, c = (rng.random(sh).astype("float32") for sh in ((24, 16), (16, 32), (32, 48)))
    built = tiled = 0
    for _ in range(16):
        choice = space.sample(rng)
        try:
            mod = lw.build(space.apply(choice), args)
        except lw.ScheduleError:
            continue
        np.testing.assert_allclose(run(mod, args, a, b, c), a @ b @ c, rtol=1e-4)
        built += 1
        tiled += bool(choice.get("regtile:AB"))
    assert built >= 6 and tiled >= 2


def test_a_compiler_bug_on_one_candidate_skips_it_with_a_warning(monkeypatch):
    """An InternalError while lowering a candidate costs that candidate, not the tuning."""
    from loopweave.autoschedule import search
    from loopweave.errors import InternalError
    args = matmul(16, 16, 8)
    real, calls = search.lower, []

    def flaky(s, a):
        calls.append(1)
        if len(calls) % 2:
            raise InternalError("isl gave up")
        return real(s, a)
    monkeypatch.setattr(search, "lower", flaky)
    with pytest.warns(lw.LoopweaveWarning, match="loopweave bug"):
        res = auto.tune(args, trials=4, progress=False)
    assert len(res.history) == 4 and res.best_seconds > 0



def test_a_choice_adapts_to_a_task_of_the_same_family_at_other_sizes():
    """A matmul's choice at 64x48 becomes one of the space at 24x40: values that space offers are
    kept, tile sizes it does not offer become the nearest it does; the result builds correct code."""
    big, small = Space(Task(matmul(64, 48, 32), "llvm")), Space(Task(matmul(24, 40, 16), "llvm"))
    assert big.family() == small.family()
    rng = random.Random(3)
    legal = dict(small.decisions)
    adapted = []
    for _ in range(40):
        c = big.sample(rng)
        a = small.adapt(c)
        if a is None:
            continue
        adapted.append(a)
        assert set(a) == set(legal) and all(a[n] in legal[n] for n in a)
        for name, options in small.decisions:
            if c.get(name) in options:
                assert a[name] == c[name]
    assert adapted
    args = matmul(24, 40, 16)
    a_np = np.random.default_rng(0).standard_normal((24, 16)).astype("float32")
    b_np = np.random.default_rng(1).standard_normal((16, 40)).astype("float32")
    for a in adapted[:4]:
        s = Space(Task(args, "llvm")).apply(a)
        np.testing.assert_allclose(run(lw.build(s, args), args, a_np, b_np), a_np @ b_np, rtol=1e-4, atol=1e-4)


def test_a_tasks_best_is_measured_by_the_other_tasks_of_its_family(tmp_path):
    """tune_tasks: when one task's search finds a new best, the tasks of the same family measure it
    (adapted) in their next round: ResNet-18's direct convs, 224 trials, searched/default went
    0.79-0.81 -> 0.90-1.04 (geometric mean over 7 tasks, Zen 5)."""
    from loopweave.autoschedule.task_scheduler import tune_tasks
    tasks = [Task(matmul(64, 48, 32), "llvm", name="big"), Task(matmul(32, 48, 16), "llvm", name="small")]
    results = tune_tasks(tasks, trials=48, log=str(tmp_path / "t.jsonl"), progress=False, batch=8)
    seeded = [sum(1 for h in r.history if h.get("seeded")) for r in results]
    assert sum(seeded) >= 1, seeded
    for r in results:
        assert r.best_seconds is not None
