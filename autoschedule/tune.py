"""``tune`` and ``apply_best``: the user's entry points, and ``TuneResult``."""
from __future__ import annotations

import html
import numbers
import time
from collections import deque
from typing import List, Optional

from ..backends.build import build as _build
from ..extras import require_extra
from ..dsl.schedule import create_schedule
from ..dsl.trace import Trace
from ..errors import ArgumentError, BuildError
from ..target import resolve_target
from . import records
from .replay import best_schedule
from .cost_model import CostModel
from .search import TaskTuner, open_measurer
from .task import Task


class TuneResult:
    """The best schedule found for one task, with its history."""

    def __init__(self, task: Task, tuner: TaskTuner, elapsed: float):
        self.task = task
        self.history: List[dict] = list(tuner.history)
        self.records: List[dict] = list(tuner.measured.values())     # every measured candidate's record
        self.untuned_seconds = tuner.untuned_seconds
        self.model_quality = list(tuner.model_quality)
        self.rejected = tuner.rejected
        self.elapsed = elapsed
        best = tuner.best
        self.best_record = best
        self.best_seconds: Optional[float] = best["seconds"] if best else None
        self.trace: Optional[Trace] = Trace.from_json(best["trace"]) if best else None
        self.choice = best["choice"] if best else None
        self.predicted: Optional[float] = best.get("predicted") if best else None   # a trials=0 pick's score

    @property
    def schedule(self):
        """A Schedule over the task's own tensors, with the best schedule found applied; an
        ``ArgumentError`` if no candidate was measured or picked (the time budget ran out first, or
        ``trials=0`` found no pick: an untrained model, or none of its picks computed the same)."""
        if self.trace is None:
            raise ArgumentError(f"tune: no schedule was found for {self.task!r} ({self._summary()}); tune with "
                                f"trials >= 1 (or a longer time_budget), or build the untuned kernel with "
                                f"lw.build(lw.create_schedule(outputs), args)")
        s = create_schedule(self.task.outputs)
        self.trace.apply(s)
        return s

    def build(self):
        """The kernel built with the best schedule found (see ``schedule``)."""
        return _build(self.schedule, self.task.args, target=self.task.target)

    @property
    def speedup(self) -> Optional[float]:
        if self.untuned_seconds and self.best_seconds:
            return self.untuned_seconds / self.best_seconds
        return None

    def plot(self, ax=None):
        """The best time after each trial (and each measured time) on ``ax``, or a new figure's axes."""
        require_extra("matplotlib", "TuneResult.plot")
        import matplotlib.pyplot as plt
        if ax is None:
            _, ax = plt.subplots(figsize=(6, 3.5))
        xs = [h["trial"] for h in self.history if h["best_seconds"]]
        ys = [h["best_seconds"] * 1e3 for h in self.history if h["best_seconds"]]
        ax.step(xs, ys, where="post", label="best so far")
        pts = [(h["trial"], h["seconds"] * 1e3) for h in self.history if h["seconds"]]
        if pts:
            ax.scatter(*zip(*pts), s=6, alpha=0.4, label="measured")
        if self.untuned_seconds:
            ax.axhline(self.untuned_seconds * 1e3, color="gray", ls="--", label="untuned")
        ax.set_yscale("log")
        ax.set_xlabel("trial")
        ax.set_ylabel("ms")
        ax.set_title(f"tuning {', '.join(t.name for t in self.task.outputs)}")
        ax.legend()
        return ax

    def _summary(self) -> str:
        if self.predicted is not None:
            return f"picked by the cost model (score {self.predicted:.3f}), not measured"
        if self.best_seconds is None:
            return f"no successful candidate in {len(self.history)} trials"
        gf = self.task.flops() / self.best_seconds / 1e9
        sp = f", {self.speedup:.1f}x untuned" if self.speedup else ""
        return (f"best {self.best_seconds * 1e3:.3f} ms ({gf:.1f} GFLOPS){sp} after {len(self.history)} trials "
                f"({sum(1 for h in self.history if h['error'])} failed)")

    def __repr__(self):
        return f"TuneResult({self.task!r}: {self._summary()})"

    def _repr_html_(self) -> str:
        code = html.escape(str(self.trace)) if self.trace is not None else ""
        img = ""
        try:
            import base64
            import io
            import matplotlib
            import matplotlib.pyplot as plt
            with matplotlib.rc_context({"backend": "agg"}):
                ax = self.plot()
                buf = io.BytesIO()
                ax.figure.savefig(buf, format="png", dpi=80, bbox_inches="tight")
                plt.close(ax.figure)
            img = f'<img src="data:image/png;base64,{base64.b64encode(buf.getvalue()).decode()}"/>'
        except Exception:   # matplotlib is an optional extra; the text stays useful without it
            img = ""
        return (f"<div><b>TuneResult</b> {html.escape(repr(self.task))}<br>{html.escape(self._summary())}"
                f"<pre>{code}</pre>{img}</div>")


def _check_trials(trials):
    if isinstance(trials, bool) or not isinstance(trials, numbers.Integral):
        raise ArgumentError(f"tune: trials must be an integer >= 0, got {trials!r}")
    if trials < 0:
        raise ArgumentError(f"tune: trials must be >= 0, got {trials}")


def _progress_bar(progress, total, desc):
    from tqdm.auto import tqdm
    return tqdm(total=total, desc=desc, disable=(progress is False), unit="trial", leave=True)


def tune(args, target="llvm", trials: int = 256, time_budget: Optional[float] = None, log=None, executor=None,
         seed: int = 0, progress=None, timeout: float = 60.0, batch: int = 8, measure_untuned: bool = True,
         measurer=None, model=None):
    """Search a fast schedule for the kernel computing the outputs in ``args``.

    ``args`` is the list ``lw.build`` takes (placeholders, then outputs).  ``trials``
    candidates are measured (records already in ``log`` for this task and target count,
    and are not measured again), or fewer if ``time_budget`` seconds run out.  Candidates are
    built and timed in an isolated worker process, through ``executor`` (a process executor, a Dask
    client) when given, or by ``measurer`` (see ``search.open_measurer``).  ``trials=0`` measures
    nothing: the cost model's first pick, checked against the untuned build, is the result
    (``TuneResult.predicted``).  ``model``: a ``CostModel`` (default: one starting from the shipped,
    pre-trained model).
    """
    _check_trials(trials)
    if time_budget is not None and (not isinstance(time_budget, numbers.Real) or time_budget <= 0):
        raise ArgumentError(f"tune: time_budget must be a positive number of seconds or None, got {time_budget!r}")
    task = Task(list(args), target)
    records.prepare(log)
    t0 = time.perf_counter()
    if trials == 0:
        tuner = TaskTuner(task, None, log=log, seed=seed, batch=batch, model=check_model(model, "tune"))
        tuner.best = tuner.pick_by_model()
        return TuneResult(task, tuner, time.perf_counter() - t0)
    measurer, owned = open_measurer("tune", executor, timeout, measurer)
    tuner = TaskTuner(task, measurer, log=log, seed=seed, batch=batch, model=check_model(model, "tune"))
    bar = _progress_bar(progress, trials, f"tune {task.outputs[-1].name}")
    bar.update(min(tuner.n_measured, trials))
    try:
        if measure_untuned and trials > 0:
            tuner.measure_untuned()
        # a measurer that submits (an executor's) gets the next round while one is measured, so
        # its workers never wait for the tuner's proposals and model fits
        depth = 2 if callable(getattr(measurer, "submit", None)) else 1
        out: deque = deque()
        stalls = 0
        while True:
            while (len(out) < depth and stalls < 3 and tuner.n_measured + tuner.n_in_flight < trials
                   and (time_budget is None or time.perf_counter() - t0 <= time_budget)):
                started = tuner.start_round(min(batch, trials - tuner.n_measured - tuner.n_in_flight))
                # none three times running: the space is exhausted (or every proposal is refused)
                stalls = stalls + 1 if started is None else 0
                if started is not None:
                    out.append(started)
            if not out:
                break
            got = tuner.finish_round(out.popleft())
            bar.update(len(got))
            if tuner.best:
                bar.set_postfix(best_ms=f"{tuner.best['seconds'] * 1e3:.3f}",
                                gflops=f"{task.flops() / tuner.best['seconds'] / 1e9:.1f}")
    finally:
        bar.close()
        if owned:
            measurer.close()
    check_some_succeeded(task, tuner, log)
    return TuneResult(task, tuner, time.perf_counter() - t0)


def check_model(model, who: str):
    """``model`` when it is a CostModel or None; else an ``ArgumentError``."""
    if model is not None and not isinstance(model, CostModel):
        raise ArgumentError(f"{who}(model=...) takes a loopweave CostModel (autoschedule.CostModel), "
                            f"got {type(model).__name__}")
    return model


def check_some_succeeded(task: Task, tuner: TaskTuner, log=None) -> None:
    """A ``BuildError`` when candidates were measured and every one of them failed: such a run found
    nothing, and its result must not pass for one (its ``build()`` would have nothing to apply)."""
    failed = [h["error"] for h in tuner.history if h["error"]]
    if tuner.best is not None or not failed or len(failed) < len(tuner.history):
        return
    first = str(failed[0]).strip().splitlines()
    where = f"; every error is in the log {log}" if log else ""
    raise BuildError(f"tune: all {len(failed)} measured candidates of {task!r} failed; the first: "
                     f"{' / '.join(first[-3:])}{where}")


def apply_best(log, args, target="llvm"):
    """The best recorded schedule for the kernel of ``args`` on ``target``, or None when the log has
    no usable record for it; a log that does not exist is an ``ArgumentError``.  Records of the same
    computation written with other tensor or axis names apply (the key ignores names), and records
    of another loopweave version are checked before use (``replay.best_schedule``).  ``log`` may also
    be the cost model's picks for a network (``network.ModelPicks``)."""
    picks = hasattr(log, "schedule_for")     # the cost model's picks (network.ModelPicks), not a file
    if not picks:
        records.check_exists(log, "apply_best")
    task = Task(list(args), resolve_target(target) if not isinstance(target, str) else target)
    return log.schedule_for(task) if picks else best_schedule(log, task)
