"""Checks shared by the executables' ``run``: the feed's names, array types and dtypes."""
from __future__ import annotations

import numpy as np

from ...errors import ArgumentError


def check_names_and_dtypes(inputs, feed) -> dict:
    """``feed`` as a dict by name, checked against ``inputs`` ([(name, shape, dtype)]); shapes are
    the caller's (static or symbolic).  A lone array is accepted for a one-input network."""
    if not isinstance(feed, dict):
        if len(inputs) == 1 and isinstance(feed, np.ndarray):
            return check_names_and_dtypes(inputs, {inputs[0][0]: feed})
        raise ArgumentError(f"run takes a dict of input arrays by name "
                            f"({', '.join(repr(n) for n, _, _ in inputs)}), got {type(feed).__name__}")
    names = [n for n, _, _ in inputs]
    unknown = [k for k in feed if k not in names]
    if unknown:
        raise ArgumentError(f"unknown input(s) {', '.join(map(repr, unknown))}; the network's inputs are "
                            f"{', '.join(repr(n) for n in names)}")
    missing = [n for n in names if n not in feed]
    if missing:
        raise ArgumentError(f"missing input(s) {', '.join(map(repr, missing))}")
    for name, _, dtype in inputs:
        a = feed[name]
        if not isinstance(a, np.ndarray):
            raise ArgumentError(f"input {name!r} must be a numpy.ndarray, got {type(a).__name__}")
        if a.dtype != np.dtype(dtype):
            raise ArgumentError(f"input {name!r} must have dtype {dtype}, got {a.dtype}; "
                                f"convert it with .astype('{dtype}')")
    return feed


def check_static_feed(inputs, feed) -> list:
    """The arrays of ``feed`` in ``inputs`` order, checked (names, dtypes, exact static shapes), contiguous."""
    feed = check_names_and_dtypes(inputs, feed)
    arrays = []
    for name, shape, dtype in inputs:
        a = feed[name]
        if tuple(a.shape) != tuple(shape):
            hint = ""
            if a.ndim == len(shape) and a.shape[1:] == tuple(shape[1:]):
                hint = (f"; the batch size was fixed when the model was imported ({shape[0]}): export the model "
                        f"with a symbolic batch dimension (then every batch size runs), or import it with "
                        f"from_onnx(..., input_shapes={{{name!r}: {(a.shape[0],) + tuple(shape[1:])}}})")
            raise ArgumentError(f"input {name!r} must have shape {tuple(shape)}, got {tuple(a.shape)}{hint}")
        arrays.append(np.ascontiguousarray(a))
    return arrays


def show_shape(shape) -> str:
    """A shape with symbolic sizes, as ``[N, 3, 224, 224]``."""
    return "[" + ", ".join(str(d) for d in shape) + "]"
