"""More numpy folders (see fold.py): comparisons, logic, casts, min/max, remainders, Expand,
Tile, Pad, reductions and window functions, so that shape arithmetic built from them folds to
constants."""
from __future__ import annotations

import numpy as np

from .fold import _axes, folder

_SIMPLE = {
    "Less": np.less, "LessOrEqual": np.less_equal, "Greater": np.greater, "GreaterOrEqual": np.greater_equal,
    "And": np.logical_and, "Or": np.logical_or, "Xor": np.logical_xor,
}
for _op, _fn in _SIMPLE.items():
    folder(_op)((lambda fn: lambda i, a: [fn(i[0], i[1])])(_fn))
for _op, _fn in {"Not": np.logical_not, "Abs": np.abs, "Sign": np.sign, "Ceil": np.ceil}.items():
    folder(_op)((lambda fn: lambda i, a: [fn(i[0]).astype(i[0].dtype)])(_fn))


@folder("Max")
def _max(i, a): return [np.maximum.reduce([x for x in i if x is not None])]
@folder("Min")
def _min(i, a): return [np.minimum.reduce([x for x in i if x is not None])]
@folder("CastLike")
def _cast_like(i, a): return [i[0].astype(i[1].dtype)]
@folder("Expand")
def _expand(i, a): return [(i[0] * np.ones([int(d) for d in i[1]], i[0].dtype)).astype(i[0].dtype)]
@folder("Tile")
def _tile(i, a): return [np.tile(i[0], [int(r) for r in i[1]])]


@folder("Mod")
def _mod(i, a):
    if a.get("fmod", 0):
        return [np.fmod(i[0], i[1])]
    return [np.mod(i[0], i[1])]


@folder("Pad")
def _pad(i, a):
    mode = a.get("mode", b"constant")
    mode = mode.decode() if isinstance(mode, bytes) else mode
    data, pads = i[0], [int(p) for p in i[1]]
    nd = data.ndim
    axes = [int(x) % nd for x in i[3]] if len(i) > 3 and i[3] is not None else list(range(nd))
    width = [(0, 0)] * nd
    for k, ax in enumerate(axes):
        width[ax] = (pads[k], pads[k + len(axes)])
    if any(p < 0 for pair in width for p in pair):
        raise ValueError("negative pads")
    if mode == "constant":
        value = i[2].reshape(()) if len(i) > 2 and i[2] is not None else 0
        return [np.pad(data, width, mode="constant", constant_values=value)]
    return [np.pad(data, width, mode={"reflect": "reflect", "edge": "edge", "wrap": "wrap"}[mode])]


def _reduce(fn):
    def fold(i, a):
        axes = _axes(a, i, 1)
        if not axes and a.get("noop_with_empty_axes", 0):
            return [i[0]]
        return [fn(i[0], axis=tuple(axes) if axes else None, keepdims=bool(a.get("keepdims", 1)))]
    return fold


for _op, _fn in {"ReduceMax": np.max, "ReduceMin": np.min, "ReduceSum": np.sum, "ReduceProd": np.prod}.items():
    folder(_op)(_reduce(_fn))


def _window(terms):
    """ONNX's window functions: ``sum_k a_k cos(2 pi k n / N)``, N = size (periodic) or size - 1."""
    def fold(i, a):
        from onnx import helper
        size = int(np.asarray(i[0]).reshape(()))
        length = size if a.get("periodic", 1) else size - 1
        n = np.arange(size, dtype=np.float64)
        w = sum(c * np.cos(2 * np.pi * k * n / length) for k, c in enumerate(terms))
        return [w.astype(helper.tensor_dtype_to_np_dtype(a.get("output_datatype", 1)))]
    return fold


folder("HannWindow")(_window([0.5, -0.5]))
folder("HammingWindow")(_window([25.0 / 46.0, -(1 - 25.0 / 46.0)]))
folder("BlackmanWindow")(_window([0.42, -0.5, 0.08]))
