"""Resize (nearest / linear / cubic, any coordinate mapping) as a gather of weighted taps.

Shapes are static, so where each output coordinate reads from is known at compile
time: :func:`axis_taps` computes, per resized axis, a table of ``n`` source indices and
``n`` weights per output position (numpy, float64, following the ONNX reference).  The
kernel then sums, for every combination of taps, ``prod(weights) * X[indices]`` - one
injective stage that reads the small tables and X.  Nearest has one tap of weight 1 and
no arithmetic at all.  Antialiasing, ``exclude_outside`` and every coordinate
transformation mode fit the same tables.
"""
from __future__ import annotations

import itertools
import math
from typing import Sequence

import numpy as np

from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import extents


def source_coordinates(mode: str, out_size: int, in_size: int, scale: float, roi=None) -> np.ndarray:
    """Where each output index samples the input (float64), per ONNX's coordinate_transformation_mode."""
    y = np.arange(out_size, dtype=np.float64)
    length = scale * in_size
    if mode == "align_corners":
        return np.zeros(out_size) if length == 1 else y * (in_size - 1) / (length - 1)
    if mode == "asymmetric":
        return y / scale
    if mode == "pytorch_half_pixel":
        return np.full(out_size, -0.5) if length == 1 else (y + 0.5) / scale - 0.5
    if mode == "half_pixel":
        return (y + 0.5) / scale - 0.5
    if mode == "half_pixel_symmetric":
        offset = in_size / 2 * (1 - out_size / length)
        return offset + (y + 0.5) / scale - 0.5
    raise ValueError(f"coordinate_transformation_mode {mode!r}")


def _nearest(rounding: str):
    def coeffs(ratio: float, scale: float):
        if float(ratio).is_integer():
            return np.array([0.0, 1.0])
        up = {"round_prefer_floor": ratio > 0.5, "round_prefer_ceil": ratio >= 0.5, "floor": False,
              "ceil": True}[rounding]
        return np.array([0.0, 1.0]) if up else np.array([1.0, 0.0])
    return coeffs


def _linear(antialias: bool):
    def coeffs(ratio: float, scale: float):
        if not antialias:
            return np.array([1 - ratio, ratio])
        scale = min(scale, 1.0)
        start = int(np.floor(-1 / scale) + 1)
        args = (np.arange(start, start + 2 - 2 * start) - ratio) * scale
        c = np.clip(1 - np.abs(args), 0, 1)
        return c / c.sum()
    return coeffs


def _cubic(a: float, antialias: bool):
    def kernel(x: float) -> float:
        x = abs(x)
        if x <= 1:
            return (a + 2) * x ** 3 - (a + 3) * x ** 2 + 1
        if x < 2:
            return a * x ** 3 - 5 * a * x ** 2 + 8 * a * x - 4 * a
        return 0.0

    def coeffs(ratio: float, scale: float):
        if not antialias:
            return np.array([kernel(ratio + 1), kernel(ratio), kernel(1 - ratio), kernel(2 - ratio)])
        scale = min(scale, 1.0)
        start = int(np.floor(-2 / scale) + 1)
        c = np.array([kernel(scale * (i - ratio)) for i in range(start, 2 - start)])
        return c / c.sum()
    return coeffs


def coefficient_fn(mode: str, nearest_mode: str, cubic_a: float, antialias: bool):
    if mode == "nearest":
        return _nearest(nearest_mode)
    if mode == "linear":
        return _linear(antialias)
    if mode == "cubic":
        return _cubic(cubic_a, antialias)
    raise ValueError(f"mode {mode!r}")


def axis_taps(x_ori: np.ndarray, in_size: int, scale: float, coeff_fn, exclude_outside: bool):
    """(indices int64 [out, n], weights float64 [out, n]) for one axis."""
    base = np.floor(x_ori)
    ratios = np.where(x_ori == base, 1.0, x_ori - base)
    weights = np.stack([np.asarray(coeff_fn(float(r), scale), np.float64) for r in ratios])
    n = weights.shape[1]
    pad = int(math.ceil(n / 2))
    padded = x_ori + pad
    p = np.floor(padded).astype(np.int64)
    frac = padded - p
    if n % 2 == 0:
        offset = np.where(frac == 0, -(n // 2), -(n // 2) + 1)
    else:
        offset = np.where(frac <= 0.5, -((n - 1) // 2), -((n - 1) // 2) + 1)
    idx = (p + offset)[:, None] + np.arange(n)[None, :] - pad
    if exclude_outside:
        weights = np.where((idx < 0) | (idx >= in_size), 0.0, weights)
        total = weights.sum(axis=1, keepdims=True)
        weights = weights / np.where(total == 0, 1.0, total)
    return np.clip(idx, 0, in_size - 1), weights


def resize_taps(X: Tensor, axes: Sequence[int], tables: Sequence[Tensor], weighted: bool,
                name: str = "resize") -> Tensor:
    """``out[o] = sum over tap combinations of prod(w_a[o_a, t_a]) * X[o with o_a -> i_a[o_a, t_a]]``.

    ``tables`` holds, per axis in ``axes``, an int64 index table [out_a, n_a], followed (when
    ``weighted``) by a float weight table of the same shape.  ``out_a`` may be symbolic (a
    shape-polymorphic network computes the tables per binding); ``n_a`` is a constant.
    """
    src = list(extents(X))
    per = 2 if weighted else 1
    if len(tables) != per * len(axes):
        raise ExprError(f"resize over {len(axes)} axes needs {per * len(axes)} tables, got {len(tables)}")
    index_tables = tables[0::per]
    weight_tables = tables[1::per] if weighted else [None] * len(axes)
    shape = list(src)
    taps = []
    for a, t in zip(axes, index_tables):
        rows, n = extents(t)
        if not isinstance(n, int):
            raise ExprError(f"resize: the tables' tap count must be a constant, got {n}")
        shape[a] = rows
        taps.append(n)
    if weighted and X.dtype != weight_tables[0].dtype:
        raise ExprError(f"resize weights of dtype {weight_tables[0].dtype} for data of dtype {X.dtype}")

    def fcompute(*o):
        total = None
        for combo in itertools.product(*[range(n) for n in taps]):
            index, weight = list(o), None
            for a, t, I, W in zip(axes, combo, index_tables, weight_tables):
                index[a] = I[o[a], t]
                if W is not None:
                    weight = W[o[a], t] if weight is None else weight * W[o[a], t]
            term = X[tuple(index)] if weight is None else X[tuple(index)] * weight
            total = term if total is None else total + term
        return total

    return compute(tuple(shape), fcompute, name=name, tag="injective")
