"""One learned cost model for every task of a tuning run: gradient-boosted trees (LightGBM).

It reads the task-independent features of ``features.py`` and predicts a candidate's normalised
throughput: per task, the best time measured divided by this candidate's (1 for the fastest; fitted in logs), so
tasks of any size train one model together and its scores rank the candidates of any task.  A
model pre-trained on the zoo's tuning logs ships beside this file (``PRETRAINED``, LightGBM's text
format gzipped, written by ``python -m benchmarks.train_cost_model train``); a tuning run starts from it and
fine-tunes it online (``fit``: trees added to the shipped ones, fitted to the run's own
measurements), so the first candidates of a task never seen before are already ranked.  Without a
shipped model (``pretrained=False``) it trains from zero once ``min_samples`` are measured and
predicts zeros before (the search then ranks at random).  ``ranking_quality`` reports top-k recall
and pairwise accuracy.
"""
from __future__ import annotations

import gzip
import json
import os
import time
import warnings
from typing import Dict, Sequence

import numpy as np

from ..errors import ArgumentError
from ..extras import require_extra
from .features import NAMES

#: the shipped model, trained on the zoo's tuning logs
PRETRAINED = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained_model.txt.gz")
#: what the training script learned beside the shipped model: the margin a pick must lead a default
#: schedule by (``dataset.default_margin``, read as ``search.PICK_MARGIN``)
PRETRAINED_FACTS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "pretrained_model.json")

#: extremely randomised thresholds: on held-out tasks, pairwise accuracy 0.835 -> 0.847 and top-5
#: recall 0.73 -> 0.77 (six seeds): a split point drawn at random generalises across task sizes
#: better than the one that fits the training tasks' candidates best
PARAMS = {"objective": "regression", "learning_rate": 0.05, "num_leaves": 7, "min_data_in_leaf": 10,
          "min_data_in_bin": 1, "feature_fraction": 0.8, "bagging_fraction": 0.8, "bagging_freq": 1,
          "lambda_l2": 1.0, "extra_trees": True, "verbose": -1, "num_threads": 1, "deterministic": True,
          "force_row_wise": True}
#: boosting rounds of the offline model (the shipped one, trained on hundreds of candidates)
ROUNDS = 300
#: online, on one run's few measurements: deeper trees that may split a handful of candidates, a faster
#: rate, so that a run whose machine disagrees with the shipped model overrules it within a few rounds
ONLINE_PARAMS = dict(PARAMS, learning_rate=0.1, num_leaves=15, min_data_in_leaf=2)
#: trees added to a pre-trained model at each online fit, and trees of an online model from zero
FINE_TUNE_ROUNDS, ONLINE_ROUNDS = 40, 80


def normalised_throughput(seconds: Sequence[float]) -> np.ndarray:
    """Best time over each time: 1 for a task's fastest candidate, 0.5 for one twice as slow."""
    t = np.asarray(seconds, dtype=np.float64)
    return t.min() / t


def _booster(X: np.ndarray, y: np.ndarray, seed: int, rounds: int, params: dict, init=None):
    import lightgbm
    params = dict(params, seed=seed)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        # the log of the normalised throughput: a 100x slower candidate is as far below a 10x slower one
        # as that is below the best (the times of one task span two or three orders of magnitude)
        data = lightgbm.Dataset(X, np.log(y), feature_name=list(NAMES),
                                params={"verbose": -1, "min_data_in_bin": 1}, free_raw_data=False)
        return lightgbm.train(params, data, num_boost_round=rounds, init_model=init, keep_training_booster=True)


class CostModel:
    """Scores candidates of any task (higher: faster); one instance is shared by the tasks of a run.

    ``add(task_key, X, seconds)`` keeps a task's measured candidates; ``fit()`` retrains on all of
    them (per task normalised), on top of the pre-trained model when there is one."""

    def __init__(self, seed: int = 0, min_samples: int = 8, pretrained=True):
        # checked here, when a search starts: the model ranks from the first round
        require_extra("lightgbm", "the autoscheduler's cost model")
        self.seed, self.min_samples = seed, min_samples
        self.base = None
        if pretrained is True:
            self.base = load_booster(PRETRAINED) if os.path.exists(PRETRAINED) else None
        elif pretrained:
            self.base = load_booster(pretrained)
        self._model = self.base
        self._data: Dict[str, tuple] = {}
        self.fit_seconds = 0.0
        self.fits = 0

    @property
    def trained(self) -> bool:
        return self._model is not None

    @property
    def pretrained(self) -> bool:
        return self.base is not None

    def add(self, task_key: str, X: np.ndarray, seconds: Sequence[float]) -> None:
        """Replace ``task_key``'s measured candidates (features ``X``, times ``seconds``)."""
        X = np.asarray(X, dtype=np.float64).reshape(-1, len(NAMES))
        self._data[task_key] = (X, np.asarray(seconds, dtype=np.float64))

    def samples(self) -> int:
        return sum(len(y) for _, y in self._data.values())

    def fit(self, offline: bool = False) -> None:
        """Retrain on every task's candidates: the pre-trained model plus ``FINE_TUNE_ROUNDS`` trees,
        or a model from zero (``ONLINE_ROUNDS`` trees) once ``min_samples`` are measured; ``offline``:
        a model from zero with the offline parameters (``ROUNDS``, ``PARAMS``: the shipped model's)."""
        groups = [(X, normalised_throughput(s)) for X, s in self._data.values() if len(s)]
        n = sum(len(y) for _, y in groups)
        if n < self.min_samples:
            self._model = self.base
            return
        X = np.concatenate([g[0] for g in groups])
        y = np.concatenate([g[1] for g in groups])
        t0 = time.perf_counter()
        if offline:
            self._model = _booster(X, y, self.seed, ROUNDS, PARAMS)
        elif self.base is not None:
            self._model = _booster(X, y, self.seed, FINE_TUNE_ROUNDS, ONLINE_PARAMS, init=self.base)
        else:
            self._model = _booster(X, y, self.seed, ONLINE_ROUNDS, ONLINE_PARAMS)
        self.fit_seconds += time.perf_counter() - t0
        self.fits += 1

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self._model is None or len(X) == 0:
            return np.zeros(len(X))
        return predict(self._model, X)

    def save(self, path) -> None:
        """The current model in LightGBM's text format, gzipped when ``path`` ends in ``.gz`` (what
        ``CostModel(pretrained=path)`` reads)."""
        if self._model is None:
            raise ArgumentError("CostModel.save: the model is not trained yet (fit it on measured candidates)")
        text = self._model.model_to_string()
        if str(path).endswith(".gz"):
            with gzip.open(path, "wt", encoding="utf-8") as f:
                f.write(text)
        else:
            with open(path, "w", encoding="utf-8") as f:
                f.write(text)


def shipped_pick_margin() -> float:
    """The margin the training script wrote beside the shipped model (``PRETRAINED_FACTS``)."""
    with open(PRETRAINED_FACTS, encoding="utf-8") as f:
        return float(json.load(f)["pick_margin"])


def predict(booster, X: np.ndarray) -> np.ndarray:
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return booster.predict(np.asarray(X, dtype=np.float64).reshape(-1, len(NAMES)))


def load_booster(path):
    """A LightGBM model saved for these features; an ``ArgumentError`` naming the file when it is
    not one, or was trained on other features (then retrain: ``python -m benchmarks.train_cost_model
    train``)."""
    import lightgbm
    if not os.path.isfile(path):
        raise ArgumentError(f"cost model {path!r} does not exist")
    try:
        with (gzip.open(path, "rt", encoding="utf-8") if str(path).endswith(".gz") else
              open(path, encoding="utf-8")) as f:
            text = f.read()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            booster = lightgbm.Booster(model_str=text)
    except (lightgbm.basic.LightGBMError, OSError, UnicodeDecodeError) as exc:
        raise ArgumentError(f"cost model {path!r} is not a LightGBM model: {str(exc)[:200]}") from None
    names = booster.feature_name()
    if list(names) != list(NAMES):
        raise ArgumentError(f"cost model {path!r} was trained on {len(names)} features other than the "
                            f"{len(NAMES)} of this loopweave (features.NAMES); retrain it with "
                            f"python -m benchmarks.train_cost_model train")
    return booster


def ranking_quality(predicted_score: Sequence[float], seconds: Sequence[float], k: int = 5,
                    tie: float = 0.0) -> dict:
    """Top-k recall (how many of the k truly fastest are among the k predicted fastest) and
    pairwise accuracy (fraction of pairs ordered correctly; 0.5 is random) over the pairs whose
    times differ by more than ``tie`` in log ratio (closer pairs are within the timing's noise)."""
    p = np.asarray(predicted_score, dtype=float)
    t = np.asarray(seconds, dtype=float)
    n = len(t)
    k = min(k, n)
    top_true = set(np.argsort(t, kind="stable")[:k])
    top_pred = set(np.argsort(-p, kind="stable")[:k])
    recall = len(top_true & top_pred) / k if k else 0.0
    i, j = np.triu_indices(n, 1)
    differ = np.abs(np.log(t[i] / t[j])) > tie if tie > 0 else t[i] != t[j]
    correct = ((p[i] > p[j]) == (t[i] < t[j]))[differ]
    pairwise = float(correct.mean()) if correct.size else 0.5
    return {"top_k_recall": recall, "pairwise_accuracy": pairwise, "k": k, "n": n}
