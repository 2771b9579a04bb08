"""A learned cost model: gradient-boosted trees (LightGBM) over IR + decision features.

Trained on measured candidates (target: -log(seconds), failures excluded), retrained
each round; predictions rank unmeasured candidates (higher is faster).  Before enough
data exists it predicts zeros (the search then ranks at random).  ``ranking_quality``
reports top-k recall and the pairwise ordering accuracy on held-out measurements.
"""
from __future__ import annotations

import warnings
from typing import Sequence

import numpy as np

from ..extras import require_extra


class CostModel:
    def __init__(self, seed: int = 0, min_samples: int = 8):
        # checked here, when a search starts: LightGBM is first used after a round of measurements
        require_extra("lightgbm", "the autoscheduler's cost model")
        self.seed, self.min_samples = seed, min_samples
        self._model = None
        self.fit_seconds = 0.0

    def fit(self, X: np.ndarray, seconds: Sequence[float]) -> None:
        import time
        import lightgbm
        y = -np.log(np.asarray(seconds, dtype=np.float64))
        if len(y) < self.min_samples:
            self._model = None
            return
        t0 = time.perf_counter()
        params = {"objective": "regression", "learning_rate": 0.1, "num_leaves": 15, "min_data_in_leaf": 2,
                  "min_data_in_bin": 1, "bagging_fraction": 0.9, "bagging_freq": 1, "seed": self.seed,
                  "verbose": -1, "num_threads": 1, "deterministic": True}
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            data = lightgbm.Dataset(np.asarray(X), y, params={"verbose": -1, "min_data_in_bin": 1})
            model = lightgbm.train(params, data, num_boost_round=80)
        self._model = model
        self.fit_seconds = time.perf_counter() - t0

    @property
    def trained(self) -> bool:
        return self._model is not None

    def predict(self, X: np.ndarray) -> np.ndarray:
        if self._model is None or len(X) == 0:
            return np.zeros(len(X))
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            return self._model.predict(np.asarray(X))


def ranking_quality(predicted_score: Sequence[float], seconds: Sequence[float], k: int = 5) -> dict:
    """Top-k recall (how many of the k truly fastest are among the k predicted fastest) and
    pairwise accuracy (fraction of pairs ordered correctly; 0.5 is random)."""
    p = np.asarray(predicted_score, dtype=float)
    t = np.asarray(seconds, dtype=float)
    n = len(t)
    k = min(k, n)
    top_true = set(np.argsort(t)[:k])
    top_pred = set(np.argsort(-p)[:k])
    recall = len(top_true & top_pred) / k if k else 0.0
    i, j = np.triu_indices(n, 1)
    differ = t[i] != t[j]
    correct = ((p[i] > p[j]) == (t[i] < t[j]))[differ]
    pairwise = float(correct.mean()) if correct.size else 0.5
    return {"top_k_recall": recall, "pairwise_accuracy": pairwise, "k": k, "n": n}
