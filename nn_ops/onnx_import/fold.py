"""Constant folding at import: ONNX nodes whose inputs are all constants, evaluated in numpy.

This is what turns shape subgraphs (``Shape -> Gather -> Unsqueeze -> Concat -> Reshape``)
into constants when the shapes are static.  ``Shape`` only needs its input's (static)
shape, not its value.  A result's size is checked against the memory limit before it is made
(``fold_size.py``).
"""
from __future__ import annotations

from typing import Callable, Dict, List

import numpy as np

from .context import ImportContext, onnx_attrs
from .fold_size import check_folded_size

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


def dequantized(x: np.ndarray, scale: np.ndarray, zero_point=None, axis: int = 1, block: int = 0) -> np.ndarray:
    """DequantizeLinear of constants, in numpy: ``(x - zero_point) * scale``, the scale (and zero
    point) one value, one per position along ``axis``, or one per ``block`` positions.  The same
    float32 values as the dequantize op: ``x - zero_point`` is exact, and the product rounded once."""
    def spread(p):
        p = np.asarray(p)
        if p.size == 1 and not block:
            return p.reshape(())
        if block:
            return np.repeat(p, block, axis=axis % x.ndim)[tuple(slice(0, d) for d in x.shape)]
        return p.reshape([-1 if a == axis % x.ndim else 1 for a in range(x.ndim)])
    value = x.astype(np.float64) if zero_point is None else x.astype(np.float64) - spread(zero_point)
    return (value * spread(scale)).astype(scale.dtype)


@folder("DequantizeLinear")
def _dequantize(i, a):
    """A quantized weight (quantize_dynamic's embedding, a QDQ model's weights) becomes a float
    constant at import, so the product reading it packs it once.  Dequantizing GPT-2's tied
    embedding on every run and multiplying by it as a run-time matrix took 76 of the quantized
    model's 89 ms."""
    x, scale = i[0], i[1]
    zero = i[2] if len(i) > 2 else None
    axis, block = a.get("axis", 1), a.get("block_size", 0)
    # one scale (and zero point) for the whole tensor, whatever its shape: (1,) with (), and any axis
    one_value = not block and scale.size == 1 and (zero is None or zero.size == 1)
    if scale.dtype.kind != "f" or x.dtype.kind not in "iu" or not x.ndim or \
            not (one_value or -x.ndim <= axis < x.ndim):
        return None
    fits = one_value or (scale.ndim == x.ndim if block else scale.shape == (x.shape[axis],))
    if not fits or (zero is not None and zero.shape != scale.shape and not one_value):
        return None     # the op names what is wrong
    return [dequantized(x, scale, zero, axis, block)]


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
    attrs = onnx_attrs(node)
    check_folded_size(node.op_type, values, attrs, node.output[0] if node.output else node.op_type)
    outs = fn(values, attrs)
    if outs is None:        # the folder declined (a case numpy would not compute as the op does)
        return False
    for name, value in zip(node.output, outs):
        ctx.set_constant(name, np.asarray(value))
    return True


# ----------------------------- comparisons, logic, casts, min/max, remainders, Expand, Tile, Pad,
# reductions and window functions: shape arithmetic built from them folds to constants too
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


#: each window's ``a_k`` (the shape-polymorphic walk computes windows of symbolic length with them)
WINDOW_TERMS = {"HannWindow": (0.5, -0.5), "HammingWindow": (25.0 / 46.0, -(1 - 25.0 / 46.0)),
                "BlackmanWindow": (0.42, -0.5, 0.08)}
for _op, _terms in WINDOW_TERMS.items():
    folder(_op)(_window(_terms))
