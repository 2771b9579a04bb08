"""Evolutionary search over a sketch's decisions, ranked by the cost model.

``TaskTuner`` keeps one task's state (measured candidates, the model, the best) and
measures one batch per ``round()``: children of the best measured candidates (one
decision mutated, or two parents crossed) and fresh samples, filtered through the
schedule API and lowering (a candidate either refuses is dropped before any build),
ranked by the model; the top of the ranking plus a few random ones are measured.
The task scheduler interleaves rounds of several TaskTuners.
"""
from __future__ import annotations

import dataclasses
import json
import random
import time
import warnings
from typing import List, Optional

import numpy as np

from ..dsl.trace import Trace
from ..errors import ArgumentError, InternalError, LoopweaveError, LoopweaveWarning
from ..lowering.lower import lower
from . import records
from .cost_model import CostModel, ranking_quality, shipped_pick_margin
from .features import extract, untuned_features
from .measure import LocalMeasurer
from .space import Space
from .task import Task, timing_cpu


#: how far (in predicted log throughput) a pick must rank above a given default schedule to replace it
#: with nothing measured, learned from the shipped model's data (``dataset.default_margin``): the
#: smallest margin at which no task of the zoo's logs, scored by a model that had not seen its kernel,
#: would have taken a candidate slower than its default.  The defaults are hand schedules, near their
#: tasks' best, and of the candidates such a model scored above their default only 38 % were faster:
#: unmeasured, the model rarely beats a hand schedule.  ``python -m benchmarks.train_cost_model
#: train`` writes it beside the shipped model (``cost_model.PRETRAINED_FACTS``; a test holds it to
#: the committed data set).
PICK_MARGIN = shipped_pick_margin()


def _key(choice: dict) -> str:
    return json.dumps(choice, sort_keys=True)


class TaskTuner:
    def __init__(self, task: Task, measurer, log=None, seed: int = 0, batch: int = 8, n_random: int = 2,
                 population: int = 64, model: Optional[CostModel] = None):
        self.task, self.space, self.measurer, self.log = task, Space(task), measurer, log
        self.rng = random.Random(seed)
        self.batch, self.n_random, self.population = batch, n_random, population
        # one model for every task of a run (tune_tasks passes it): what one task measured ranks
        # the candidates of the others
        self.model = model if model is not None else CostModel(seed)
        self.task_bytes = task.to_bytes()
        self.target_fields = dataclasses.asdict(task.target)
        self.measured = {}            # choice key -> record
        self.features = {}            # choice key -> feature vector
        self.history: List[dict] = []
        self.best: Optional[dict] = None
        self.rejected = 0
        self.internal_errors: List[str] = []   # loopweave bugs met while lowering candidates (skipped)
        self._cands = {}              # choice key -> (key, choice, trace json, features), None if refused
        self._lowered = {}            # trace json -> features, or what lowering raised (_schedule_features)
        self._in_flight = {}          # choice key -> trace json: sent out by start_round, not yet recorded
        self.model_quality: List[dict] = []
        self.untuned_seconds: Optional[float] = None
        self.seeds: List[dict] = []   # other tasks' best choices, adapted to this space, to measure
        self.timing_cpu = timing_cpu(task.target)   # a time from another CPU model does not count
        self.untuned = untuned_features(task)       # what each candidate's features are measured from
        self._resume()

    # -- state ---------------------------------------------------------------
    def _resume(self):
        """Take in the log's records of this task, version and spelling (their decisions name this
        spelling's stages and axes), a log written under the old key scheme's included."""
        if not self.log:
            return self._refit()
        for r in records.read(self.log, self.task.target, records.task_keys(self.log, self.task)):
            if not isinstance(r.get("choice"), dict):
                continue
            if r["task"] == self.task.key and r.get("names") not in (None, self.task.names):
                continue
            k = _key(r["choice"])
            if k in self.measured:
                if r.get("verified"):        # a re-measurement supersedes the first time
                    self.measured[k] = r
                continue
            self.measured[k] = r
            self._note(r, resumed=True)
        self.best = self._fastest_measured()
        self._refit()

    def _fastest_measured(self) -> Optional[dict]:
        """The fastest record among ``measured`` (each schedule at its newest time), by the rule
        ``records.best`` applies to a log."""
        return records.fastest(self.measured.values())

    def _note(self, r: dict, resumed: bool = False):
        if r.get("seconds") is not None and not r.get("error"):
            if self.best is None or r["seconds"] < self.best["seconds"]:
                self.best = r
        self.history.append({"trial": len(self.history) + 1, "seconds": r.get("seconds"),
                             "best_seconds": self.best["seconds"] if self.best else None,
                             "error": r.get("error"), "resumed": resumed,
                             "given": "given" in (r.get("choice") or {})})

    @property
    def n_measured(self) -> int:
        return len(self.history)

    def _candidate(self, choice):
        k = _key(choice)
        if k in self.measured or k in self._in_flight:
            return None
        if k in self._cands:
            return self._cands[k]
        self._cands[k] = self._lowered_candidate(k, choice)
        return self._cands[k]

    def _lowered_candidate(self, k, choice):
        try:
            s = self.space.apply(choice)
            trace_json = s.trace.to_json()
            feats = self._schedule_features(s, trace_json)
        except LoopweaveError:
            self.rejected += 1
            return None
        except InternalError as exc:
            # a compiler bug on one candidate costs that candidate, not the tuning (minutes of a
            # network's); it is reported once per task so that it gets fixed
            self.rejected += 1
            if not self.internal_errors:
                warnings.warn(f"tune {self.task.name}: a candidate hit a loopweave bug and was skipped: "
                              f"{str(exc)[:300]}", LoopweaveWarning, stacklevel=2)
            self.internal_errors.append(str(exc)[:300])
            return None
        return k, choice, trace_json, feats

    def _schedule_features(self, s, trace_json: str) -> np.ndarray:
        """The features of schedule ``s`` (whose trace is ``trace_json``), lowered once per distinct
        trace: assignments that differ only in a decision the others make moot give one schedule
        (5-13 % of a search's proposals), and lowering is most of the tuner's own time.  What lowering
        raised for a trace is raised again."""
        if trace_json not in self._lowered:
            try:
                self._lowered[trace_json] = extract(lower(s, self.task.args), self.task.target, self.untuned)
            except (LoopweaveError, InternalError) as exc:
                self._lowered[trace_json] = exc.with_traceback(None)     # not its frames' IR
        got = self._lowered[trace_json]
        if isinstance(got, Exception):
            raise got
        return got

    def _feature_of(self, k, trace_json: str):
        if k not in self.features:
            self.features[k] = self._trace_features(trace_json)
        return self.features[k]

    def _trace_features(self, trace_json: str):
        """The features of a schedule given as its trace (a resumed record, a given default)."""
        try:
            s = self.task.schedule()
            Trace.from_json(trace_json).apply(s)
            return self._schedule_features(s, s.trace.to_json())
        except (LoopweaveError, InternalError):
            return None

    def _refit(self):
        """Give the model this task's measured candidates (a given default's too: the features are
        of the lowered IR, whatever made the schedule) and retrain it."""
        X, y = [], []
        for k, r in self.measured.items():
            if r.get("seconds") is None or r.get("error"):
                continue
            f = self._feature_of(k, r["trace"])
            if f is not None:
                X.append(f)
                y.append(r["seconds"])
        if X:
            self.model.add(self.task.key, np.array(X), y)
            self.model.fit()

    # -- one round -------------------------------------------------------------
    def _proposals(self, traces: set, count: Optional[int] = None) -> list:
        """Distinct new candidates (children of the best, fresh samples), from ``count`` (default:
        the population) draws; ``traces``: the schedules measured or already proposed this round,
        added to as candidates are taken."""
        rng = self.rng
        good = sorted((r for r in self.measured.values()
                       if r.get("seconds") and not r.get("error") and "given" not in r["choice"]),
                      key=lambda r: r["seconds"])[:16]
        parents = [r["choice"] for r in good]
        choices = []
        for _ in range(self.population if count is None else count):
            if parents and rng.random() < 0.7:
                p = parents[min(int(rng.expovariate(0.4)), len(parents) - 1)]
                if len(parents) > 1 and rng.random() < 0.2:
                    p = self.space.crossover(p, rng.choice(parents), rng)
                c = self.space.mutate(p, rng)
                if rng.random() < 0.3:
                    c = self.space.mutate(c, rng)
            else:
                c = self.space.sample(rng)
            choices.append(c)
        seen, out = set(), []
        for c in choices:
            k = _key(c)
            if k in seen or k in self.measured or k in self._in_flight:
                continue
            seen.add(k)
            cand = self._candidate(c)
            if cand is not None and cand[2] not in traces:
                traces.add(cand[2])
                out.append(cand)
        return out

    def offer(self, choice: dict) -> None:
        """A choice another task of the same family found best: measured in a coming round (up to
        a quarter of it), adapted to this task's sizes (``Space.adapt``).  A network's convs of one
        kind at other sizes start from each other's best instead of from random samples."""
        adapted = self.space.adapt(choice)
        if adapted is not None and _key(adapted) not in self.measured:
            self.seeds.append(adapted)

    def best_searched(self) -> Optional[dict]:
        """The fastest measured record of the search itself (a given schedule left out)."""
        return records.fastest(r for r in self.measured.values() if "given" not in (r.get("choice") or {}))

    def _seeded(self, limit: int, traces: set) -> list:
        out = []
        while self.seeds and len(out) < limit:
            cand = self._candidate(self.seeds.pop(0))
            if cand is not None and cand[2] not in traces:
                traces.add(cand[2])
                out.append(cand)
        return out

    def round(self, n: int) -> List[dict]:
        """Measure up to ``n`` new candidates; returns their records."""
        started = self.start_round(n)
        return [] if started is None else self.finish_round(started)

    @property
    def n_in_flight(self) -> int:
        return len(self._in_flight)

    def start_round(self, n: int) -> Optional[tuple]:
        """Propose, rank and send out up to ``n`` new candidates, None when there are none; their
        records come from ``finish_round``.  A measurer that can ``submit`` returns at once, so a
        next round can be proposed while this one is measured (``tune`` keeps two out): the
        workers of a cluster never wait for the tuner.  A schedule out for measurement is not
        proposed again."""
        # two assignments can give one schedule (a decision that the others make moot): each
        # schedule is measured once, whether it came from another task or from the search
        traces = {r.get("trace") for r in self.measured.values()} | set(self._in_flight.values())
        seeded = self._seeded(max(1, n // 4), traces)
        cands = seeded + self._proposals(traces)
        if not cands:
            return None
        scores = self.model.predict(np.array([c[3] for c in cands]))
        forced = list(range(len(seeded)))
        order = [i for i in np.argsort(-scores, kind="stable") if i >= len(seeded)]
        m = n - len(forced)
        n_rand = min(self.n_random, m // 2) if self.model.trained else m
        ranked = order[: m - n_rand] if self.model.trained else []
        taken = set(ranked)
        rest = [i for i in order if i not in taken]
        self.rng.shuffle(rest)
        pick = forced + list(ranked) + rest[: m - len(ranked)]
        chosen = []
        for i in pick:
            k, choice, trace_json, feats = cands[i]
            self.features[k] = feats
            chosen.append((k, choice, trace_json, scores[i]))
        items = [(k, choice, trace_json, j < len(forced), i in taken)
                 for j, (i, (k, choice, trace_json, _)) in enumerate(zip(pick, chosen))]
        return chosen, items, self._start_batch(items), self.model.trained

    def finish_round(self, started: tuple) -> List[dict]:
        """The records of a round ``start_round`` sent out (waiting for its results); the model is
        then retrained on them."""
        chosen, items, results, ranked_by_model = started
        out = self._record_batch(items, results)
        if ranked_by_model:
            ok = [(s, r["seconds"]) for (_, _, _, s), r in zip(chosen, out) if r["seconds"] is not None]
            if len(ok) >= 3:
                self.model_quality.append(ranking_quality([a for a, _ in ok], [b for _, b in ok], k=3))
        self._refit()
        return out

    def pick_by_model(self, proposals: int = 16, given: Optional[str] = None, checks: int = 4) -> Optional[dict]:
        """The schedule the model ranks first, measured not at all (Adams2019's mode, ``trials=0``).

        ``proposals`` candidates are drawn (children of the measured best when the log has any,
        else fresh samples) and ranked with ``given`` (a network's default schedule, as a trace)
        among them; the first in rank order that computes what the untuned build computes
        (``measure.wrong_answer``: built and run once on random inputs, the check every measured
        candidate passes) is returned as a record without a time (``predicted``: its score; ``default_predicted``: the
        given schedule's), or None when the model is untrained, no pick of the first ``checks``
        computes the same, or ``given`` stays: no pick scores more than ``PICK_MARGIN`` above it, or
        ``given`` cannot be ranked (its trace does not replay)."""
        from .measure import wrong_answer
        if not self.model.trained:
            return None
        traces = {r.get("trace") for r in self.measured.values()}
        cands = self._seeded(len(self.seeds), traces) + self._proposals(traces, proposals)
        given_score = None
        if given is not None:
            feats = self._trace_features(given)
            if feats is None:
                return None
            given_score = float(self.model.predict(feats[None])[0])
        if not cands:
            return None
        scores = self.model.predict(np.array([c[3] for c in cands]))
        if given_score is not None:        # first, so that it wins a tie: a pick must lead by more
            cands.insert(0, (None, None, given, None))
            scores = np.insert(scores, 0, given_score + PICK_MARGIN)
        for i in list(np.argsort(-scores, kind="stable"))[:checks]:
            k, choice, trace_json, _ = cands[i]
            if trace_json == given:
                return None
            try:        # the pick is used through its trace: check the schedule the trace gives
                s = self.task.schedule()
                Trace.from_json(trace_json).apply(s)
            except LoopweaveError:
                continue
            wrong = wrong_answer(self.task.args, s)
            if wrong is None:
                r = records.make_record(self.task.key, self.task.target, choice, trace_json, None, None, 0,
                                        names=self.task.names, shapes=self.task.shapes)
                r["predicted"] = float(scores[i])
                if given_score is not None:
                    r["default_predicted"] = given_score
                return r
        return None

    def measure_given(self, trace_json: str, label: str) -> dict:
        """Measure a schedule given from outside (a network's default schedule) as one candidate.

        It is recorded like the others and competes for the best (so a tuned kernel is never
        slower than it), but is no parent for mutations: its decisions are not this space's."""
        choice = {"given": label}
        k = _key(choice)
        if k in self.measured:
            return self.measured[k]
        return self._measure_batch([(k, choice, trace_json, False, False)])[0]

    def _measure_batch(self, items) -> List[dict]:
        """Build, check against the untuned build's output, and time candidates, ``items`` of
        (key, choice, trace JSON, seeded, ranked), in one call of the measurer (on a cluster, in
        parallel); note each and append its record to the log (a wrong one with its error, so it can
        never be the best)."""
        return self._record_batch(items, self._start_batch(items))

    def _start_batch(self, items):
        """Send ``items`` out for measurement; a function that waits for their results.  A measurer
        with ``submit``/``collect`` (an executor's) returns at once, any other has measured them
        when this returns."""
        check = self.best["seconds"] if self.best else float("inf")
        jobs = [dict(key=self.task.spelling_key, task_bytes=self.task_bytes, trace_json=trace_json,
                     check_below=check, target=self.target_fields) for _, _, trace_json, _, _ in items]
        self._in_flight.update({k: trace_json for k, _, trace_json, _, _ in items})
        if callable(getattr(self.measurer, "submit", None)):
            futures = self.measurer.submit(jobs)
            return lambda: self.measurer.collect(futures)
        results = self.measurer.run(jobs)
        return lambda: results

    def _record_batch(self, items, results) -> List[dict]:
        """Note and log the measured ``items`` (``_start_batch``'s), once ``results()`` gives them."""
        results = self._same_cpu(results())
        for k, _, _, _, _ in items:
            self._in_flight.pop(k, None)
        out = []
        for (k, choice, trace_json, seeded, ranked), res in zip(items, results):
            r = records.make_record(self.task.key, self.task.target, choice, trace_json, res.seconds, res.error,
                                    self.n_measured + 1, res.build_seconds, _measured_on(res), self.task.names,
                                    self.task.shapes)
            self.measured[k] = r
            self._note(r)
            self.history[-1]["seeded"] = seeded
            self.history[-1]["ranked"] = ranked      # picked from the top of the model's ranking
            out.append(r)
        records.append(self.log, out)
        return out

    def _run(self, jobs: List[dict]) -> list:
        """The measurer's results for ``jobs`` (``_same_cpu``)."""
        return self._same_cpu(self.measurer.run(jobs))

    def _same_cpu(self, results: list) -> list:
        """``results`` where a time from a machine whose CPU model is not the target's (a cluster's
        worker of another kind) becomes an error: it would rank schedules for the wrong machine, and
        its record would pass for the target's."""
        for res in results:
            cpu = getattr(res, "cpu", None)        # None: a measurer that does not say (a test's formula)
            if cpu is not None and cpu != self.timing_cpu and res.error is None:
                res.error = (f"measured on a {cpu} CPU ({res.host}), but the target's CPU is {self.timing_cpu}: "
                             f"measure on machines of the target's kind, or tune for target 'llvm -mcpu={cpu}'")
                res.seconds = res.versus_seconds = res.ratio = None
        return results

    def verify_against(self, trace_json: str, pairs: int = 15, picks: int = 5, margin: float = 1.02) -> None:
        """Keep a searched schedule only if it beats ``trace_json`` (the default) side by side.

        The searched candidates that looked faster than the default, fastest first (up to
        ``picks``), are each built with the default in one worker call and timed alternately,
        ``pairs`` times; the first whose median ratio is at least ``margin`` stands, the others
        are recorded as rejected (with the ratio).  Both sides get fresh records from that
        comparison, marked verified: from then on only verified records count.  Candidates measured
        minutes apart under a changing load, and a worker's hot loop against a network's run,
        differ by a few percent: a tuned ResNet-18 whose picks had each looked faster than their
        defaults ran at 0.92x its untuned compile, one 3x3 conv at 0.88x even after separate
        re-measurements."""
        given = next((r for r in self.measured.values() if r.get("trace") == trace_json), None)
        if given is None or not given.get("seconds"):
            return
        looked_faster = sorted((r for r in self.measured.values()
                                if r.get("seconds") and not r.get("error") and not r.get("verified")
                                and r["trace"] != trace_json and r["seconds"] < given["seconds"]),
                               key=lambda r: r["seconds"])
        for pick in looked_faster[:picks]:
            res = self._run([dict(key=self.task.spelling_key, task_bytes=self.task_bytes, trace_json=pick["trace"],
                                  versus=trace_json, pairs=pairs, target=self.target_fields)])[0]
            if res.error or res.ratio is None:
                verdict = (None, f"failed when measured beside the default: {res.error}")
            elif res.ratio >= margin:
                verdict = (res.seconds, None)
            else:
                verdict = (None, f"not faster than the default side by side ({res.ratio:.3f}x, needs {margin:g}x)")
            fresh = [self._verified(pick, *verdict, ratio=res.ratio, measured_on=_measured_on(res))]
            if res.versus_seconds is not None:
                fresh.append(self._verified(given, res.versus_seconds, None, measured_on=_measured_on(res)))
            records.append(self.log, fresh)
            if verdict[1] is None:
                break
        self.best = self._fastest_measured()

    def _verified(self, old: dict, seconds, error, ratio=None, measured_on=None) -> dict:
        r = records.make_record(self.task.key, self.task.target, old["choice"], old["trace"], seconds, error,
                                self.n_measured, measured_on=measured_on, names=self.task.names,
                                shapes=self.task.shapes)
        r["verified"] = True
        if ratio is not None:
            r["ratio_to_default"] = round(ratio, 4)
        self.measured[_key(old["choice"])] = r
        return r

    def measure_untuned(self, timeout_ok: bool = True):
        res = self._run([dict(key=self.task.spelling_key, task_bytes=self.task_bytes, trace_json=Trace().to_json(),
                              repeat=1, min_seconds=0.0, check=False, target=self.target_fields)])[0]
        self.untuned_seconds = res.seconds
        return res


def _measured_on(res) -> Optional[dict]:
    cpu = getattr(res, "cpu", None)
    return {"cpu": cpu, "host": res.host} if cpu else None


def default_measurer(executor=None, timeout: float = 60.0):
    from .measure import ExecutorMeasurer
    return LocalMeasurer(timeout) if executor is None else ExecutorMeasurer(executor, timeout)


def open_measurer(who: str, executor, timeout: float, measurer):
    """The measurer a tuning entry point uses, and whether it owns it (closes it at the end).

    ``measurer`` is anything with ``run(jobs) -> [MeasureResult]`` (one per job, in order; a job
    holds ``measure_one``'s keyword arguments) and ``close()``: the seam where measurement happens,
    so that a test can tune against a machine whose times are a known function of the schedule.
    The caller keeps a measurer it gave (and closes it)."""
    if measurer is None:
        return default_measurer(executor, timeout), True
    if executor is not None:
        raise ArgumentError(f"{who}: give executor= or measurer=, not both (a measurer decides where it measures)")
    if not callable(getattr(measurer, "run", None)) or not callable(getattr(measurer, "close", None)):
        raise ArgumentError(f"{who}(measurer=...) takes an object with run(jobs) and close(), "
                            f"got {type(measurer).__name__}")
    return measurer, False


def now() -> float:
    return time.perf_counter()
