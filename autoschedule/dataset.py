"""Measured candidates as training data for the cost model, its accuracy on held-out tasks, and the
margin by which a pick must lead a default schedule.

A ``Dataset`` holds, per measured candidate, its features (``features.NAMES``), its time, the
task (and target) it belongs to and whether it is the task's default schedule; ``from_records``
makes one from a task's tuning records by replaying each trace and lowering it.
``held_out_report`` trains on the tasks outside a split and reports, on the tasks inside it, the
pairwise accuracy and the top-5 recall of the ranking within each task (averaged over tasks: the
tuner ranks one task's candidates at a time).  ``default_margin`` learns, from scores of kernels the
model was not trained on (``out_of_fold_scores``), how far a candidate must score above its task's
default schedule before ``trials=0`` takes it in the default's place (``search.PICK_MARGIN``).  The
shipped model is trained from the zoo's logs by ``python -m benchmarks.train_cost_model train``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

from ..dsl.trace import Trace
from ..errors import ArgumentError, InternalError, LoopweaveError
from ..lowering.lower import lower
from .cost_model import CostModel, normalised_throughput, ranking_quality
from .features import NAMES, extract, untuned_features
from .task import Task


@dataclass
class Dataset:
    X: np.ndarray               # (n, len(NAMES)) features
    seconds: np.ndarray         # (n,) measured times
    task_names: List[str]       # (n,) the task of each candidate (target included: "native:resnet18/3:...")
    default: np.ndarray         # (n,) bool: the candidate is its task's default schedule (a given one)
    spread: np.ndarray          # (n,) |log| of the ratio of the candidate's two timings: its noise

    @property
    def y(self) -> np.ndarray:
        """Normalised throughput within each task (1 for its fastest candidate)."""
        out = np.empty(len(self.seconds))
        names = np.asarray(self.task_names)
        for name in set(self.task_names):
            m = names == name
            out[m] = normalised_throughput(self.seconds[m])
        return out

    def subset(self, mask) -> "Dataset":
        mask = np.asarray(mask, dtype=bool)
        return Dataset(self.X[mask], self.seconds[mask], [n for n, m in zip(self.task_names, mask) if m],
                       self.default[mask], self.spread[mask])

    def save(self, path) -> None:
        np.savez_compressed(path, X=self.X.astype(np.float32), seconds=self.seconds,
                            task_names=np.asarray(self.task_names), default=self.default,
                            spread=self.spread, feature_names=np.asarray(NAMES))

    @classmethod
    def load(cls, path) -> "Dataset":
        with np.load(path) as z:
            if list(z["feature_names"]) != list(NAMES) or "spread" not in z:
                raise ArgumentError(f"data set {path!r} holds other features than this loopweave's "
                                    f"(features.NAMES); rebuild it: python -m benchmarks.train_cost_model train")
            return cls(z["X"].astype(np.float64), z["seconds"], [str(n) for n in z["task_names"]],
                       z["default"].astype(bool), z["spread"])


def from_records(task: Task, records: Sequence[dict], name: str) -> Dataset:
    """The measured candidates among ``records`` (of ``task``, in its spelling) as a Dataset,
    each schedule replayed from its trace and lowered; one that no longer applies is left out."""
    X, t, given, spread = [], [], [], []
    seen = set()
    untuned = untuned_features(task)
    for r in records:
        if not r.get("seconds") or r.get("error") or r["trace"] in seen:
            continue
        seen.add(r["trace"])
        try:
            s = task.schedule()
            Trace.from_json(r["trace"]).apply(s)
            X.append(extract(lower(s, task.args), task.target, untuned))
        except (LoopweaveError, InternalError):
            continue
        t.append(r["seconds"])
        given.append("given" in r["choice"])
        first, second = r.get("passes", (1.0, 1.0))
        spread.append(abs(np.log(first / second)))
    return Dataset(np.array(X).reshape(-1, len(NAMES)), np.array(t, dtype=np.float64), [name] * len(t),
                   np.array(given, dtype=bool), np.array(spread, dtype=np.float64))


def concat(parts: Sequence[Dataset]) -> Dataset:
    parts = [p for p in parts if len(p.seconds)]
    if not parts:
        return Dataset(np.zeros((0, len(NAMES))), np.zeros(0), [], np.zeros(0, dtype=bool), np.zeros(0))
    return Dataset(np.concatenate([p.X for p in parts]), np.concatenate([p.seconds for p in parts]),
                   [n for p in parts for n in p.task_names], np.concatenate([p.default for p in parts]),
                   np.concatenate([p.spread for p in parts]))


def train(data: Dataset, seed: int = 0) -> CostModel:
    """A model from zero on every task of ``data``."""
    model = CostModel(seed=seed, pretrained=False)
    names = np.asarray(data.task_names)
    for name in sorted(set(data.task_names)):
        m = names == name
        model.add(name, data.X[m], data.seconds[m])
    model.fit(offline=True)
    return model


#: the tasks held out of training when the model's accuracy is reported (a name contains one): some
#: of MobileNetV2's depthwise blocks and pointwise convs, the encoder's attention, softmax and layer
#: norm, two of ResNet-18's convs, the blur and the batched matmul, on both targets; kinds the
#: training split has relatives of at other sizes, never the same kernel
HELD_OUT = ("mobilenet_v2/1:", "mobilenet_v2/5:", "mobilenet_v2/9:", "mobilenet_v2/14:", "mobilenet_v2/16:",
            "mobilenet_v2/21:", "transformer_encoder/1:", "transformer_encoder/2:", "transformer_encoder/6:",
            "resnet18/2:", "resnet18/9:", "resnet18/12:", "kernel/blur", "kernel/batch_matmul")


def held_out(task_names: Sequence[str]) -> np.ndarray:
    """The mask of the candidates whose task is in the held-out split (``HELD_OUT``)."""
    return np.array([any(m in n for m in HELD_OUT) for n in task_names], dtype=bool)


#: a pair of candidates whose times are closer than this quantile of the candidates' own two timings'
#: ratio (``Dataset.spread``) is within the timing's noise: its measured order is not counted
NOISE_QUANTILE = 0.9


def noise_band(data: Dataset) -> float:
    """The log time ratio within which two candidates' order is the timing's noise: 9 in 10
    candidates' two timings differ by less."""
    return float(np.quantile(data.spread, NOISE_QUANTILE)) if len(data.spread) else 0.0


def held_out_quality(data: Dataset, test, seed: int = 0, k: int = 5) -> dict:
    """Trained on the tasks outside ``test`` (a mask), the mean over the tasks inside it of the
    pairwise accuracy (over the pairs further apart than ``noise_band``, and over all pairs) and
    the top-``k`` recall of the ranking of their candidates."""
    test = np.asarray(test, dtype=bool)
    model = train(data.subset(~test), seed)
    held = data.subset(test)
    names = np.asarray(held.task_names)
    tie = noise_band(data)
    per_task = {}
    for name in sorted(set(held.task_names)):
        m = names == name
        if m.sum() > k:
            p = model.predict(held.X[m])
            per_task[name] = dict(ranking_quality(p, held.seconds[m], k=k, tie=tie),
                                  pairwise_all=ranking_quality(p, held.seconds[m], k=k)["pairwise_accuracy"])
    if not per_task:
        raise ArgumentError(f"held-out split has no task with more than {k} measured candidates")
    return {"pairwise_accuracy": float(np.mean([q["pairwise_accuracy"] for q in per_task.values()])),
            "pairwise_all": float(np.mean([q["pairwise_all"] for q in per_task.values()])),
            f"top_{k}_recall": float(np.mean([q["top_k_recall"] for q in per_task.values()])),
            "noise_band": tie, "tasks": len(per_task), "per_task": per_task}


def held_out_report(data: Dataset, test, seed: int = 0) -> str:
    q = held_out_quality(data, test, seed)
    lines = [f"held-out tasks: {q['tasks']}; pairwise accuracy {q['pairwise_accuracy']:.3f} (bar 0.85) over the "
             f"pairs further apart than the timing's noise (x{np.exp(q['noise_band']):.3f}), {q['pairwise_all']:.3f} "
             f"over all pairs; top-5 recall {q['top_5_recall']:.3f} (bar 0.6)"]
    for name, t in q["per_task"].items():
        lines.append(f"  {name:<70} n={t['n']:<3} pairwise {t['pairwise_accuracy']:.2f} (all {t['pairwise_all']:.2f})"
                     f"  top-5 {t['top_k_recall']:.2f}")
    return "\n".join(lines)


def kernel_of(task_name: str) -> str:
    """A data set task's kernel, its target left out ("native:resnet18/3:conv" -> "resnet18/3:conv")."""
    return task_name.split(":", 1)[1] if ":" in task_name else task_name


def out_of_fold_scores(data: Dataset, folds: int = 5, seed: int = 0) -> np.ndarray:
    """Each candidate's score by a model trained without its kernel (on either target): the kernels
    dealt at random into ``folds`` folds, one model per fold."""
    kernels = sorted({kernel_of(n) for n in data.task_names})
    fold_of = {k: i % folds for i, k in enumerate(np.random.default_rng(seed).permutation(kernels))}
    fold = np.array([fold_of[kernel_of(n)] for n in data.task_names])
    out = np.zeros(len(data.seconds))
    for i in range(folds):
        if (fold == i).any():
            out[fold == i] = train(data.subset(fold != i), seed).predict(data.X[fold == i])
    return out


def _default_tasks(data: Dataset, scores: np.ndarray):
    """Per task with a measured default schedule: (name, the default's index, the index of the
    top-scored other candidate)."""
    names = np.asarray(data.task_names)
    for name in sorted(set(data.task_names)):
        idx = np.where(names == name)[0]
        given, others = idx[data.default[idx]], idx[~data.default[idx]]
        if len(given) and len(others):
            yield name, int(given[0]), int(others[np.argmax(scores[others])])


def default_margin(data: Dataset, scores: np.ndarray) -> float:
    """The smallest margin at which taking a task's top-scored candidate over its default schedule
    (only when it scores more than the margin above it) never takes one that ran slower than the
    default in ``data``: the largest lead over its default of a top-scored candidate that was
    slower (0 when none was).  ``scores``: out-of-fold (``out_of_fold_scores``), so that the margin
    holds for kernels the model has not seen."""
    leads = [scores[top] - scores[d] for _, d, top in _default_tasks(data, scores)
             if data.seconds[top] > data.seconds[d]]
    return float(max(leads, default=0.0))


def margin_report(data: Dataset, scores: np.ndarray, margin: float) -> str:
    """What taking the top-scored candidate over the default at ``margin`` would have done on the
    tasks of ``data`` with a default (picks, wins, the geometric-mean time of the pick over the
    default's), and, for smaller margins, how often a candidate leading its default by more was
    really faster."""
    rows = list(_default_tasks(data, scores))
    picked = [(n, d, top) for n, d, top in rows if scores[top] - scores[d] > margin]
    ratio = [data.seconds[d] / data.seconds[top] for _, d, top in picked]
    lines = [f"margin {margin:.3f}: of {len(rows)} tasks with a default, {len(picked)} take another candidate "
             f"({sum(r > 1 for r in ratio)} faster); default time / pick time over all of them: "
             f"{np.exp(np.mean(np.log(ratio + [1.0] * (len(rows) - len(picked))))):.3f}x (geometric mean)"]
    leads, faster = [], []
    for _, d, _ in rows:
        others = [i for i in np.where(np.asarray(data.task_names) == data.task_names[d])[0] if i != d]
        leads += [scores[i] - scores[d] for i in others]
        faster += [data.seconds[i] < data.seconds[d] for i in others]
    leads, faster = np.array(leads), np.array(faster)
    for m in sorted({0.0, margin / 4, margin / 2, margin}):
        above = leads > m
        share = f"{faster[above].mean():.2f}" if above.any() else "-"
        lines.append(f"  candidates leading their default by > {m:.3f}: {int(above.sum()):4d}, really faster: {share}")
    return "\n".join(lines)
