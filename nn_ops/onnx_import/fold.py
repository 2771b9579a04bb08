"""Constant folding at import: ONNX nodes whose inputs are all constants, evaluated in numpy.

This is what turns shape subgraphs (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``)
into constants when the shapes are static.  ``Shape`` only needs its input's (static)
shape, not its value.
"""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np

from .context import ImportContext, onnx_attrs

FOLDERS: Dict[str, Callable] = {}


def folder(*op_types: str):
    def decorate(fn):
        for t in op_types:
            FOLDERS[t] = fn
        return fn
    return decorate


def _axes(attrs, inputs, k):
    if len(inputs) > k and inputs[k] is not None:
        return [int(a) for a in np.asarray(inputs[k]).reshape(-1)]
    return list(attrs.get("axes", []))


@folder("Identity", "Dropout")
def _identity(inputs, attrs): return [inputs[0]]
@folder("Add")
def _add(i, a): return [i[0] + i[1]]
@folder("Sub")
def _sub(i, a): return [i[0] - i[1]]
@folder("Mul")
def _mul(i, a): return [i[0] * i[1]]


@folder("Div")
def _div(i, a):
    if np.issubdtype(i[0].dtype, np.integer):
        return [np.trunc(i[0] / i[1]).astype(i[0].dtype)]
    return [i[0] / i[1]]


@folder("Neg")
def _neg(i, a): return [-i[0]]
@folder("Sqrt")
def _sqrt(i, a): return [np.sqrt(i[0])]
@folder("Relu")
def _relu(i, a): return [np.maximum(i[0], 0).astype(i[0].dtype)]
@folder("Floor")
def _floor(i, a): return [np.floor(i[0])]
@folder("Equal")
def _equal(i, a): return [np.equal(i[0], i[1])]
@folder("Where")
def _where(i, a): return [np.where(i[0], i[1], i[2])]
@folder("Transpose")
def _transpose(i, a): return [np.transpose(i[0], a.get("perm"))]


@folder("Cast")
def _cast(i, a):
    from onnx import helper as h
    return [i[0].astype(h.tensor_dtype_to_np_dtype(a["to"]))]


@folder("Gather")
def _gather(i, a): return [np.take(i[0], i[1].astype(np.int64), axis=a.get("axis", 0))]
@folder("Concat")
def _concat(i, a): return [np.concatenate([np.atleast_1d(x) if x.ndim == 0 else x for x in i], axis=a["axis"])]
@folder("Unsqueeze")
def _unsqueeze(i, a):
    out = i[0]
    axes = _axes(a, i, 1)
    nd = out.ndim + len(axes)
    for ax in sorted(x + nd if x < 0 else x for x in axes):
        out = np.expand_dims(out, ax)
    return [out]


@folder("Squeeze")
def _squeeze(i, a):
    axes = _axes(a, i, 1)
    return [np.squeeze(i[0], axis=tuple(axes) if axes else None)]


@folder("Reshape")
def _reshape(i, a):
    shape = [int(s) for s in i[1]]
    shape = [i[0].shape[k] if s == 0 and not a.get("allowzero", 0) else s for k, s in enumerate(shape)]
    return [i[0].reshape(shape)]


@folder("Flatten")
def _flatten(i, a):
    ax = a.get("axis", 1)
    ax = ax + i[0].ndim if ax < 0 else ax
    return [i[0].reshape(int(np.prod(i[0].shape[:ax])), -1)]


@folder("Slice")
def _slice(i, a):
    data, starts, ends = i[0], i[1], i[2]
    axes = i[3] if len(i) > 3 and i[3] is not None else range(len(starts))
    steps = i[4] if len(i) > 4 and i[4] is not None else [1] * len(starts)
    index = [slice(None)] * data.ndim
    for s, e, ax, st in zip(starts, ends, axes, steps):
        index[int(ax)] = slice(int(s), int(e), int(st))
    return [data[tuple(index)]]


@folder("ConstantOfShape")
def _constant_of_shape(i, a):
    from onnx import numpy_helper
    value = a.get("value")
    arr = numpy_helper.to_array(value) if value is not None else np.zeros(1, np.float32)
    return [np.full([int(s) for s in i[0]], arr.reshape(-1)[0], arr.dtype)]


@folder("Range")
def _range(i, a):
    return [np.arange(i[0].reshape(()), i[1].reshape(()), i[2].reshape(())).astype(i[0].dtype)]


def constant_value(node) -> np.ndarray:
    """The value of a ``Constant`` node."""
    from onnx import numpy_helper
    attrs = onnx_attrs(node)
    if "value" in attrs:
        return numpy_helper.to_array(attrs["value"])
    for key, dtype in (("value_float", np.float32), ("value_int", np.int64)):
        if key in attrs:
            return np.array(attrs[key], dtype)
    for key, dtype in (("value_floats", np.float32), ("value_ints", np.int64)):
        if key in attrs:
            return np.array(list(attrs[key]), dtype)
    raise ValueError(f"Constant node {node.name!r} has no supported value attribute ({', '.join(attrs)})")


def try_fold(ctx: ImportContext, node) -> bool:
    """Evaluate ``node`` if all its inputs are constants (or it is Shape of a static value)."""
    if node.op_type == "Constant":
        ctx.set_constant(node.output[0], constant_value(node))
        return True
    if node.op_type == "Shape":
        src = node.input[0]
        if src not in ctx.graph.values:
            return False
        shape = np.array(ctx.shape(src), np.int64)
        attrs = onnx_attrs(node)
        start, end = attrs.get("start", 0), attrs.get("end", None)
        ctx.set_constant(node.output[0], shape[start:end])
        return True
    if node.op_type == "Size" and node.input[0] in ctx.graph.values:
        ctx.set_constant(node.output[0], np.array(int(np.prod(ctx.shape(node.input[0]))), np.int64))
        return True
    fn = FOLDERS.get(node.op_type)
    if fn is None:
        return False
    values: List = []
    for name in node.input:
        if not name:
            values.append(None)
            continue
        v = ctx.const(name)
        if v is None:
            return False
        values.append(v)
    outs = fn(values, onnx_attrs(node))
    for name, value in zip(node.output, outs):
        ctx.set_constant(name, np.asarray(value))
    return True
