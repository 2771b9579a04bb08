"""Sharing trials among several tasks (the kernels of a network).

``tune_tasks(tasks, trials=...)`` gives every task a few warm-up rounds in turn
(``WARMUP_ROUNDS``), then keeps giving the next round to the task whose end-to-end gain is
expected to be largest: its weight (calls per run) times its current best time times the
recent relative improvement per round of its search (Ansor's backward-window gradient, with
a floor so no task starves while it still has unmeasured candidates).  A task is ``(args, weight)`` or a ``Task``; records are
matched by the task's structural key, so a fresh copy of the same DAG gets them too.  When a
task's search finds a new best, the tasks whose spaces have the same decisions (the convs of one
kind at other sizes) measure that choice, adapted to their sizes, in their next round.
"""
from __future__ import annotations

import time
from typing import Dict, List, Optional, Sequence

from ..errors import ArgumentError
from . import records
from .cost_model import CostModel
from .search import TaskTuner, open_measurer
from .task import Task
from .tune import TuneResult, _check_trials, _progress_bar, check_model


def _as_task(t, target) -> Task:
    if isinstance(t, Task):
        return t
    if isinstance(t, tuple) and len(t) == 2:
        args, weight = t
        return Task(list(args), target, weight=float(weight))
    raise ArgumentError(f"tune_tasks: a task is a Task or (args, weight), got {type(t).__name__}")


#: rounds every task gets in turn before the expected gains decide (fewer when the trials would
#: not cover them); with budget-only tuning, three rounds of 8 for each kernel
WARMUP_ROUNDS = 3


def _searched_bests(tuner: TaskTuner) -> List[float]:
    """The best time among the searched candidates after each of them (a given schedule, the
    network's default, is left out: it says where the search must get to, not how it moves)."""
    out, best = [], float("inf")
    for h in tuner.history:
        if h.get("given"):
            continue
        if h["seconds"] and not h["error"]:
            best = min(best, h["seconds"])
        out.append(best)
    return out


def expected_gain(tuner: TaskTuner, window: int = 2, floor: float = 0.02) -> float:
    """Seconds per network run this task is expected to save with one more round.

    weight x best time x the recent relative improvement per round of the *search's* own
    best (Ansor's backward gradient).  Measured against the overall best, a search still far
    above a hand-written default would show no progress and starve after one round (a
    ResNet-18 tuning gave one kernel 1472 of 1730 trials and 17 to each other)."""
    best = tuner.best["seconds"] if tuner.best else None
    if best is None:
        return float("inf")
    bests = _searched_bests(tuner)
    per_round = tuner.batch * window
    if len(bests) > per_round and bests[-per_round - 1] < float("inf"):
        old, new = bests[-per_round - 1], bests[-1]
        slope = max(0.0, (old - new) / old) / window
    else:
        slope = 1.0
    # a stalled search's floor shrinks with the rounds it has had: among stalled tasks, rounds
    # then go in proportion to each one's share of the run time (weight x best), not all to the
    # largest (an encoder's 12-call dense kernel got 24 trials while two others took 4000)
    rounds = max(1.0, len(bests) / tuner.batch)
    return tuner.task.weight * best * max(slope, floor / rounds)


def _share(tuners, members: List[int], i: int, best: Optional[dict]) -> None:
    """Offer task ``i``'s best searched choice to the other ``members`` of its family."""
    if best is None:
        return
    for j in members:
        if j != i:
            tuners[j].offer(best["choice"])


def _status(tuners, t0: float, time_budget: Optional[float]) -> str:
    """The progress bar's note: estimated kernel time per network run with the best schedules
    so far (calls x best time), and the time budget left."""
    bests = [t.task.weight * t.best["seconds"] for t in tuners if t.best]
    note = f"kernels {sum(bests) * 1e3:.2f} ms/run" if len(bests) == len(tuners) else ""
    if time_budget is not None:
        note += f", {max(0.0, time_budget - (time.perf_counter() - t0)):.0f}s left"
    return note.lstrip(", ")


def tune_tasks(tasks: Sequence, target="llvm", trials: Optional[int] = 256, time_budget: Optional[float] = None, log=None,
               executor=None, seed: int = 0, progress=None, timeout: float = 60.0, batch: int = 8,
               baselines: Optional[Sequence[Optional[str]]] = None, measurer=None,
               model=None) -> List[TuneResult]:
    """Tune ``tasks`` with ``trials`` measurements in all (``None``: until ``time_budget`` runs
    out); one TuneResult per task, in order.

    ``baselines``: per task, the JSON trace of a schedule to measure first as a candidate (a
    network's default schedule), or None; these measurements count as trials.  ``executor`` and
    ``measurer`` say where candidates are measured, as for ``tune``.  One cost model ranks the
    candidates of every task (``model``, a ``CostModel``; by default one starting from the shipped
    model), retrained on all of them as they are measured.  ``trials=0`` measures nothing: each
    task gets the model's first pick, checked against its untuned build, unless the model ranks
    its baseline first (then it has no pick and keeps the baseline)."""
    if trials is None:      # as many as the time budget allows
        if time_budget is None:
            raise ArgumentError("tune_tasks: give trials, time_budget (seconds), or both")
        limit = float("inf")
    else:
        _check_trials(trials)
        limit = trials
    tasks = [_as_task(t, target) for t in tasks]
    if not tasks:
        raise ArgumentError("tune_tasks: no tasks")
    records.prepare(log)
    model = check_model(model, "tune_tasks") or CostModel(seed)
    t0 = time.perf_counter()
    if trials == 0:
        return _picks_by_model(tasks, baselines, log, seed, batch, model, t0)
    measurer, owned = open_measurer("tune_tasks", executor, timeout, measurer)
    tuners = [TaskTuner(t, measurer, log=log, seed=seed + i, batch=batch, model=model) for i, t in enumerate(tasks)]
    spent = 0
    bar = _progress_bar(progress, trials, f"tune {len(tasks)} tasks")   # no total: until the budget
    exhausted: Dict[int, int] = {}
    try:
        for tuner, trace_json in zip(tuners, baselines or []):
            if trace_json is not None and spent < limit:
                before = tuner.n_measured
                tuner.measure_given(trace_json, "default schedule")
                spent += tuner.n_measured - before
                bar.update(tuner.n_measured - before)
        by_family: Dict[tuple, List[int]] = {}
        for j, tuner in enumerate(tuners):
            by_family.setdefault(tuner.space.family(), []).append(j)
        family = [by_family[tuner.space.family()] for tuner in tuners]     # per task, its family's tasks
        for j, tuner in enumerate(tuners):          # a resumed search's best, too
            _share(tuners, family[j], j, tuner.best_searched())
        rounds = [0] * len(tuners)
        warmup = max(1, min(WARMUP_ROUNDS, int(min(limit, 10 ** 9) - spent) // (batch * len(tuners))))
        while spent < limit:
            if time_budget is not None and time.perf_counter() - t0 > time_budget:
                break
            live = [i for i in range(len(tuners)) if exhausted.get(i, 0) < 3]
            if not live:
                break
            young = [j for j in live if rounds[j] < warmup]
            # every task first gets a few rounds in turn, so that the gradient has something to go on
            i = young[0] if young else max(live, key=lambda j: expected_gain(tuners[j]))
            rounds[i] += 1
            before = tuners[i].best_searched()
            got = tuners[i].round(int(min(batch, limit - spent)))
            after = tuners[i].best_searched()
            if after is not None and after is not before:
                _share(tuners, family[i], i, after)
            exhausted[i] = exhausted.get(i, 0) + 1 if not got else 0
            spent += len(got)
            bar.set_postfix_str(_status(tuners, t0, time_budget), refresh=False)
            bar.update(len(got))
        for tuner, trace_json in zip(tuners, baselines or []):
            if trace_json is not None:
                tuner.verify_against(trace_json)
    finally:
        bar.close()
        if owned:
            measurer.close()
    elapsed = time.perf_counter() - t0
    return [TuneResult(t.task, t, elapsed) for t in tuners]


def _picks_by_model(tasks: List[Task], baselines, log, seed: int, batch: int, model: CostModel,
                    t0: float) -> List[TuneResult]:
    """``tune_tasks(trials=0)``: each task's pick by the shared model alone (``TaskTuner.pick_by_model``)."""
    results = []
    for i, task in enumerate(tasks):
        tuner = TaskTuner(task, None, log=log, seed=seed + i, batch=batch, model=model)
        given = baselines[i] if baselines else None
        tuner.best = tuner.pick_by_model(given=given)
        results.append(TuneResult(task, tuner, time.perf_counter() - t0))
    return results
