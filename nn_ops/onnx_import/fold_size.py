"""The size of a folded constant, known before numpy makes it (``fold.try_fold`` asks first).

A folder whose result can be larger than its inputs (broadcast arithmetic, Expand, Tile, Pad,
Concat, Gather, ConstantOfShape, a window, a Cast to a wider type, the float64 work of a
dequantization or an integer division) is checked against ``lw.memory_limit`` from its inputs'
shapes and values alone: a constant of a hostile model that would not fit is refused with an
``Unsupported`` naming it, and nothing is allocated.  Every other folder (unary ops, reshapes,
slices, reductions, Shape, Range: ``validate.check_operands`` bounds it) makes nothing larger than
an input it was given.
"""
from __future__ import annotations

from typing import List, Optional, Sequence, Tuple

import numpy as np

from .context import Unsupported, check_size

_BROADCAST = ("Add", "Sub", "Mul", "Div", "Mod", "Where", "Max", "Min")
_LOGICAL = ("Equal", "Less", "LessOrEqual", "Greater", "GreaterOrEqual", "And", "Or", "Xor")
_WINDOWS = ("HannWindow", "HammingWindow", "BlackmanWindow")


def _ints(value) -> List[int]:
    return [int(v) for v in np.asarray(value).reshape(-1)]


def _broadcast(op: str, shapes: Sequence[Tuple[int, ...]]) -> Tuple[int, ...]:
    try:
        return tuple(np.broadcast_shapes(*shapes))
    except ValueError:
        raise Unsupported(f"{op} of constants of shapes {', '.join(map(str, shapes))}: they do not broadcast") from None


def folded_results(op: str, values: Sequence[Optional[np.ndarray]], attrs: dict) -> List[Tuple[tuple, np.dtype]]:
    """The (shape, dtype) of the largest array the folder of ``op`` makes from ``values``, or [] when it
    makes nothing larger than one of them."""
    given = [np.asarray(v) for v in values if v is not None]
    if not given:
        return []
    first = given[0]
    if op in _BROADCAST or op in _LOGICAL:
        shape = _broadcast(op, [v.shape for v in given])
        if op in _LOGICAL:
            return [(shape, np.dtype(bool))]
        if op == "Div" and np.issubdtype(first.dtype, np.integer):
            return [(shape, np.dtype(np.float64))]       # divided in floating point, then truncated
        return [(shape, np.result_type(*[v.dtype for v in given]))]
    if op == "Expand" and len(given) > 1:
        return [(_broadcast(op, [first.shape, tuple(_ints(given[1]))]), first.dtype)]
    if op == "Tile" and len(given) > 1:
        reps = _ints(given[1])
        shape = (1,) * (len(reps) - first.ndim) + first.shape
        reps = [1] * (len(shape) - len(reps)) + reps
        return [(tuple(d * r for d, r in zip(shape, reps)), first.dtype)]
    if op == "Pad" and len(given) > 1:
        pads = _ints(given[1])
        axes = [int(a) % max(first.ndim, 1) for a in _ints(values[3])] \
            if len(values) > 3 and values[3] is not None else list(range(first.ndim))
        shape = list(first.shape)
        for k, ax in enumerate(axes):
            if k + len(axes) < len(pads) and 0 <= ax < len(shape):
                shape[ax] += max(0, pads[k]) + max(0, pads[k + len(axes)])
        return [(tuple(shape), first.dtype)]
    if op == "Concat":
        return [((sum(v.size for v in given),), np.result_type(*[v.dtype for v in given]))]
    if op == "Gather" and len(given) > 1:
        axis = int(attrs.get("axis", 0)) % max(first.ndim, 1)
        return [(first.shape[:axis] + given[1].shape + first.shape[axis + 1:], first.dtype)]
    if op == "ConstantOfShape":
        from onnx import numpy_helper
        value = attrs.get("value")
        dtype = numpy_helper.to_array(value).dtype if value is not None else np.dtype(np.float32)
        return [(tuple(_ints(first)), dtype)]
    if op in _WINDOWS:
        return [((max(0, int(first.reshape(-1)[0])) if first.size else 0,), np.dtype(np.float64))]
    if op == "Cast" and "to" in attrs:
        from onnx import helper
        return [(first.shape, np.dtype(helper.tensor_dtype_to_np_dtype(attrs["to"])))]
    if op == "CastLike" and len(given) > 1:
        return [(first.shape, given[1].dtype)]
    if op == "DequantizeLinear":
        return [(first.shape, np.dtype(np.float64))]     # computed in float64, then rounded
    return []


def check_folded_size(op: str, values: Sequence[Optional[np.ndarray]], attrs: dict, output: str) -> None:
    """Refuse (``Unsupported``) a fold of ``op`` whose result would exceed the memory limit."""
    for shape, dtype in folded_results(op, values, attrs):
        check_size(shape, str(dtype), f"the folded constant {output!r}")
