"""Tuning a whole network: its distinct kernels as tasks, trials shared by expected gain.

``tune_network(lw.extract_tasks(graph, target), ...)``: the network compiler, a layer above,
lists a network's distinct kernels (each with its compute DAG, its target, its default
schedule and how often one run calls it, as TVM's ``auto_scheduler.extract_tasks`` does), so
the tuner takes plain tasks and never imports it.  Each kernel's default schedule is measured
first as one candidate, so a tuned network is never slower than an untuned one; then
``tune_tasks`` spends the remaining trials where the end-to-end latency gains most.
``lw.compile(graph, tuning_log=log)`` applies the best record of each kernel.
"""
from __future__ import annotations

import html
from typing import List, Optional

from ..errors import ArgumentError
from .canonical import translate
from .task import Task
from .task_scheduler import tune_tasks
from .tune import TuneResult


class NetworkTuneResult:
    """Per-kernel results of a network's tuning, with the estimated latency before and after."""

    def __init__(self, names: List[str], weights: List[int], results: List[TuneResult], log):
        self.names, self.weights, self.results, self.log = names, weights, results, log

    def _estimate(self, pick) -> Optional[float]:
        times = [pick(r) for r in self.results]
        if any(t is None for t in times):
            return None
        return sum(w * t for w, t in zip(self.weights, times))

    @property
    def schedules(self) -> list:
        """Per kernel, the schedule of its best record or pick (a Schedule of its own tensors), or None
        where the default schedule stays (no record beat it, or the model ranked it first)."""
        return [r.schedule if r.trace is not None else None for r in self.results]

    @property
    def default_seconds(self) -> Optional[float]:
        """Sum over kernels of calls x the default schedule's measured time (None if one is missing)."""
        return self._estimate(_default_seconds)

    @property
    def tuned_seconds(self) -> Optional[float]:
        """Sum over kernels of calls x the best measured time."""
        return self._estimate(lambda r: r.best_seconds)

    def __repr__(self) -> str:
        d, t = self.default_seconds, self.tuned_seconds
        est = (f"kernel time per run {d * 1e3:.2f} ms with the default schedules -> {t * 1e3:.2f} ms tuned "
               f"({d / t:.2f}x)" if d and t else "some kernels have no successful measurement")
        trials = sum(len(r.history) for r in self.results)
        return f"<NetworkTuneResult {len(self.results)} kernels, {trials} trials; {est}; log {self.log}>"

    def _repr_html_(self) -> str:
        rows = "".join(
            f"<tr><td>{html.escape(n)}</td><td>{w}</td><td>{_ms(_default_seconds(r))}</td>"
            f"<td>{_ms(r.best_seconds)}</td><td>{len(r.history)}</td></tr>"
            for n, w, r in zip(self.names, self.weights, self.results))
        return (f"<div>{html.escape(repr(self))}<table><tr><th>kernel</th><th>calls</th><th>default ms</th>"
                f"<th>best ms</th><th>trials</th></tr>{rows}</table></div>")


class ModelPicks:
    """The cost model's picks for a network's kernels (``tune_network(..., trials=0)``), applied by
    the network compiler like a tuning log (``lw.compile(net, schedules="model")``): a kernel of the
    same computation (its task key) gets the pick, translated to its own tensors."""

    def __init__(self, result: NetworkTuneResult):
        self.result = result
        self._picks = {r.task.key: r.best_record for r in result.results if r.trace is not None}

    def __len__(self) -> int:
        return len(self._picks)

    def schedule_for(self, task: Task):
        """A schedule of ``task``'s tensors from the pick for its computation, or None (the default stays)."""
        r = self._picks.get(task.key)
        return None if r is None else translate(r["trace"], r.get("names"), task.args)

    def __repr__(self) -> str:
        return f"<ModelPicks for {len(self)} of {len(self.result.results)} kernels>"


def _default_seconds(result: TuneResult) -> Optional[float]:
    for r in result.records:
        if r.get("choice") == {"given": "default schedule"}:
            return r.get("seconds")
    return None


def _ms(seconds) -> str:
    return "-" if seconds is None else f"{seconds * 1e3:.3f}"


def tune_network(tasks, trials: Optional[int] = 256, time_budget: Optional[float] = None, log=None,
                 executor=None, seed: int = 0, progress=None, timeout: float = 60.0, model=None) -> NetworkTuneResult:
    """Tune a network's kernels, ``tasks`` from ``lw.extract_tasks(graph, target)``; records go to ``log``.

    Each task has ``args`` (the kernel's placeholders, then its output), ``target``, ``weight``
    (calls per run), ``name`` and ``default_schedule()``.  ``trials`` counts measured candidates
    over the whole network (the default schedules included); ``time_budget`` (seconds) stops the
    search earlier; ``trials=None`` with a ``time_budget`` searches until the budget is spent.
    Tuning again with the same log resumes without measuring again what it holds.  One cost model
    (``model``, by default the shipped one) ranks every kernel's candidates and learns from all of
    them.  ``trials=0`` measures nothing: each kernel gets the model's pick where the model ranks it
    above the default schedule (``NetworkTuneResult.schedules``).
    """
    if log is None and trials != 0:
        raise ArgumentError("tune_network: give log='net.jsonl' (the records are what lw.compile(..., "
                            "tuning_log=...) applies)")
    if not isinstance(tasks, (list, tuple)):
        raise ArgumentError(f"tune_network takes a network's kernels as tasks, got {type(tasks).__name__}: "
                            f"auto.tune_network(lw.extract_tasks(net, target), ...)")
    if not tasks:
        raise ArgumentError("tune_network: no tasks (the network has no kernel to tune)")
    targets = {k.target.key() for k in tasks}
    if len(targets) != 1:
        raise ArgumentError(f"tune_network tunes one target at a time; the tasks are for {len(targets)} targets")
    target = tasks[0].target
    searched = [Task(k.args, target, weight=float(k.weight), name=k.name) for k in tasks]
    baselines = [k.default_schedule().trace.to_json() for k in tasks]
    results = tune_tasks(searched, target=target, trials=trials, time_budget=time_budget, log=log,
                         executor=executor, seed=seed, progress=progress, timeout=timeout, baselines=baselines,
                         model=model)
    return NetworkTuneResult([k.name for k in tasks], [k.weight for k in tasks], results, log)
