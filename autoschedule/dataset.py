"""Measured candidates as training data for the cost model, and its accuracy on held-out tasks.

A ``Dataset`` holds, per measured candidate, its features (``features.NAMES``), its time and the
task (and target) it belongs to; ``from_records`` makes one from a task's tuning records by
replaying each trace and lowering it.  ``held_out_report`` trains on the tasks outside a split and
reports, on the tasks inside it, the pairwise accuracy and the top-5 recall of the ranking within
each task (averaged over tasks: the tuner ranks one task's candidates at a time).  The shipped model
is trained from the zoo's logs by ``python -m benchmarks.train_cost_model train``.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import List, Sequence

import numpy as np

from ..dsl.trace import Trace
from ..errors import ArgumentError, InternalError, LoopweaveError
from ..lowering.lower import lower
from .cost_model import CostModel, normalised_throughput, ranking_quality
from .features import NAMES, extract
from .task import Task


@dataclass
class Dataset:
    X: np.ndarray               # (n, len(NAMES)) features
    seconds: np.ndarray         # (n,) measured times
    task_names: List[str]       # (n,) the task of each candidate (target included: "native:resnet18/3:...")

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
        return Dataset(self.X[mask], self.seconds[mask], [n for n, m in zip(self.task_names, mask) if m])

    def save(self, path) -> None:
        np.savez_compressed(path, X=self.X.astype(np.float32), seconds=self.seconds,
                            task_names=np.asarray(self.task_names), feature_names=np.asarray(NAMES))

    @classmethod
    def load(cls, path) -> "Dataset":
        with np.load(path) as z:
            if list(z["feature_names"]) != list(NAMES):
                raise ArgumentError(f"data set {path!r} holds other features than this loopweave's "
                                    f"(features.NAMES); rebuild it: python -m benchmarks.train_cost_model train")
            return cls(z["X"].astype(np.float64), z["seconds"], [str(n) for n in z["task_names"]])


def from_records(task: Task, records: Sequence[dict], name: str) -> Dataset:
    """The measured candidates among ``records`` (of ``task``, in its spelling) as a Dataset,
    each schedule replayed from its trace and lowered; one that no longer applies is left out."""
    X, t = [], []
    seen = set()
    for r in records:
        if not r.get("seconds") or r.get("error") or r["trace"] in seen:
            continue
        seen.add(r["trace"])
        try:
            s = task.schedule()
            Trace.from_json(r["trace"]).apply(s)
            X.append(extract(lower(s, task.args), task.target))
        except (LoopweaveError, InternalError):
            continue
        t.append(r["seconds"])
    return Dataset(np.array(X).reshape(-1, len(NAMES)), np.array(t, dtype=np.float64), [name] * len(t))


def concat(parts: Sequence[Dataset]) -> Dataset:
    parts = [p for p in parts if len(p.seconds)]
    if not parts:
        return Dataset(np.zeros((0, len(NAMES))), np.zeros(0), [])
    return Dataset(np.concatenate([p.X for p in parts]), np.concatenate([p.seconds for p in parts]),
                   [n for p in parts for n in p.task_names])


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


def held_out_quality(data: Dataset, test, seed: int = 0, k: int = 5) -> dict:
    """Trained on the tasks outside ``test`` (a mask), the mean over the tasks inside it of the
    pairwise accuracy and top-``k`` recall of the ranking of their candidates."""
    test = np.asarray(test, dtype=bool)
    model = train(data.subset(~test), seed)
    held = data.subset(test)
    names = np.asarray(held.task_names)
    per_task = {}
    for name in sorted(set(held.task_names)):
        m = names == name
        if m.sum() > k:
            per_task[name] = ranking_quality(model.predict(held.X[m]), held.seconds[m], k=k)
    if not per_task:
        raise ArgumentError(f"held-out split has no task with more than {k} measured candidates")
    return {"pairwise_accuracy": float(np.mean([q["pairwise_accuracy"] for q in per_task.values()])),
            f"top_{k}_recall": float(np.mean([q["top_k_recall"] for q in per_task.values()])),
            "tasks": len(per_task), "per_task": per_task}


def held_out_report(data: Dataset, test, seed: int = 0) -> str:
    q = held_out_quality(data, test, seed)
    lines = [f"held-out tasks: {q['tasks']}; pairwise accuracy {q['pairwise_accuracy']:.3f} (bar 0.85), "
             f"top-5 recall {q['top_5_recall']:.3f} (bar 0.6)"]
    for name, t in q["per_task"].items():
        lines.append(f"  {name:<70} n={t['n']:<3} pairwise {t['pairwise_accuracy']:.2f}  top-5 {t['top_k_recall']:.2f}")
    return "\n".join(lines)
