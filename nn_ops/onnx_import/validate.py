"""Attribute contracts of ONNX operators, checked before a converter builds anything.

``check_attributes(ctx, node)`` runs before constant folding and conversion; it raises
:class:`BadAttribute` (an ``Unsupported``, so the importer lists it with the node's name in
its one ``OnnxImportError``) naming the attribute, its value and the allowed range.  The
rules are the operators' contracts from the ONNX spec plus the limits onnxruntime applies
(a pooling pad smaller than its kernel, a window that fits the padded input), so a
pathological attribute cannot reach a division, an index or an allocation.

One table for every converter: windowed ops (Conv, pools), ``axis``/``axes`` in range,
flags that are 0 or 1, Split sizes, sizes that must be positive.  ``context.check_size``
refuses a value whose inferred size exceeds the memory limit (``network/limits.py``), and
``work_bound.check_work`` a node whose compute exceeds ``MAX_NODE_WORK``.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ..network.limits import memory_limit_bytes
from .context import ImportContext, Unsupported, check_size
from .work_bound import MAX_NODE_WORK, check_work, input_shape

MAX_DIM = 2 ** 31 - 1
# multiply-adds one windowed node may cost (output elements x window elements); other ops whose
# cost grows faster than their output are bounded by work_bound.py
MAX_WINDOW_WORK = MAX_NODE_WORK


class BadAttribute(Unsupported):
    """An attribute outside its operator's contract."""


def _attr(node, name):
    from onnx import helper
    for a in node.attribute:
        if a.name == name:
            value = helper.get_attribute_value(a)
            return value.decode(errors="replace") if isinstance(value, bytes) else value
    return None


def _rank(ctx: ImportContext, node, k: int = 0) -> Optional[int]:
    shape = input_shape(ctx, node, k)
    return None if shape is None else len(shape)




def _bad(name, value, allowed):
    shown = repr(value)
    shown = shown if len(shown) <= 80 else shown[:77] + "..."
    raise BadAttribute(f"attribute {name}={shown} is out of range: {allowed}")


def _ints(node, name) -> Optional[list]:
    value = _attr(node, name)
    if value is None:
        return None
    values = list(value) if isinstance(value, (list, tuple)) else [value]
    if not all(isinstance(v, (int, np.integer)) for v in values):
        _bad(name, value, "integers expected")
    return [int(v) for v in values]


def _check_axis(node, name: str, rank: Optional[int], extra: int = 0) -> None:
    """``axis`` (or each of ``axes``) in [-rank-extra, rank+extra-1], without repeats."""
    values = _ints(node, name)
    if values is None or rank is None:
        return
    r = rank + extra
    for v in values:
        if not -r <= v < r:
            _bad(name, _attr(node, name), f"each axis must be in [{-r}, {r - 1}] for rank {r}")
    if len({v % r for v in values}) != len(values):
        _bad(name, _attr(node, name), "axes must not repeat")


def _check_flag(node, name: str) -> None:
    values = _ints(node, name)
    if values is not None and any(v not in (0, 1) for v in values):
        _bad(name, values[0] if len(values) == 1 else values, "must be 0 or 1")


def _check_positive(node, name: str, low: int = 1, high: int = MAX_DIM) -> None:
    values = _ints(node, name)
    if values is not None and any(not low <= v <= high for v in values):
        _bad(name, _attr(node, name), f"each must be in [{low}, {high}]")


WINDOWED = {"Conv", "ConvInteger", "QLinearConv", "ConvTranspose", "MaxPool", "AveragePool", "LpPool"}
POOLS = {"MaxPool", "AveragePool", "LpPool"}


def _check_window(ctx: ImportContext, node) -> None:
    """kernel_shape, strides, dilations, pads, auto_pad, group of convolutions and pools."""
    op = node.op_type
    shape = input_shape(ctx, node, 0)
    spatial = None if shape is None else len(shape) - 2
    if spatial is not None and spatial < 1:
        raise BadAttribute(f"input of rank {len(shape)}: {op} needs (N, C, spatial...) with at least one spatial axis")
    weight_index = 3 if op == "QLinearConv" else 1
    kernel = _ints(node, "kernel_shape")
    if kernel is None and op not in POOLS:
        w = input_shape(ctx, node, weight_index)
        kernel = None if w is None else list(w[2:])
    if kernel is None and op in POOLS:
        raise BadAttribute("attribute 'kernel_shape' is required")
    strides, dilations, pads = _ints(node, "strides"), _ints(node, "dilations"), _ints(node, "pads")
    for name, values, factor in (("kernel_shape", kernel, 1), ("strides", strides, 1), ("dilations", dilations, 1),
                                 ("pads", pads, 2)):
        if values is not None and spatial is not None and len(values) != factor * spatial:
            _bad(name, values, f"needs {factor * spatial} values for an input of rank {spatial + 2}")
    for name in ("kernel_shape", "strides", "dilations"):
        _check_positive(node, name)
    if op not in POOLS and _ints(node, "kernel_shape") is not None:
        w = input_shape(ctx, node, weight_index)
        if w is not None and all(isinstance(d, (int, np.integer)) for d in w[2:]) and list(w[2:]) != kernel:
            _bad("kernel_shape", kernel, f"must be the weight's spatial shape {list(w[2:])} (W is "
                                         f"{list(w)}), as onnxruntime requires")
    if pads is not None and any(p < 0 for p in pads):
        _bad("pads", pads, "each pad must be >= 0")
    auto_pad = _attr(node, "auto_pad")
    if auto_pad not in (None, "", "NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID"):
        _bad("auto_pad", auto_pad, "one of NOTSET, SAME_UPPER, SAME_LOWER, VALID")
    group = _ints(node, "group")
    if group is not None:
        if group[0] < 1:
            _bad("group", group[0], "must be >= 1")
        if shape is not None and op != "ConvTranspose" and shape[1] % group[0]:
            _bad("group", group[0], f"must divide the {shape[1]} input channels")
    if op in ("ConvInteger", "QLinearConv"):    # (Conv's conv2d op names the mismatch itself)
        w, groups = input_shape(ctx, node, weight_index), (group or [1])[0]
        if shape is not None and w is not None and len(w) == len(shape) and w[1] * groups != shape[1]:
            raise BadAttribute(f"weight of shape {tuple(w)} with group={groups}: its {w[1]} channels per group "
                               f"do not make the input's {shape[1]} (W is [M, C/group, kernel...])")
    if spatial is None or kernel is None or op == "ConvTranspose":
        return
    dilations = dilations or [1] * spatial
    explicit = auto_pad in (None, "", "NOTSET")
    pads = (pads or [0] * 2 * spatial) if explicit else [0] * 2 * spatial
    for k in range(spatial):
        extent = (kernel[k] - 1) * dilations[k] + 1
        size = shape[2 + k]
        padded = size + pads[k] + pads[k + spatial]
        if op in POOLS and explicit and max(pads[k], pads[k + spatial]) >= kernel[k] * dilations[k]:
            _bad("pads", pads, f"a pooling pad must be smaller than its window ({kernel[k]} x dilation "
                               f"{dilations[k]} on spatial axis {k})")
        if explicit and max(pads[k], pads[k + spatial]) > size + extent:
            _bad("pads", pads, f"a pad larger than the input plus the window ({size} + {extent} on spatial "
                               f"axis {k}) only reads padding")
        if not explicit and extent > (size if auto_pad == "VALID" else 2 * size + 1):
            _bad("kernel_shape" if dilations[k] == 1 else "dilations", kernel if dilations[k] == 1 else dilations,
                 f"with auto_pad={auto_pad} the window ({extent} wide with dilation) must be at most "
                 f"{'the input' if auto_pad == 'VALID' else 'twice the input plus one'} ({size} on spatial axis {k})")
        if explicit and extent > padded:
            _bad("kernel_shape" if _ints(node, "kernel_shape") else "dilations", kernel if dilations[k] == 1
                 else dilations, f"the window ({extent} wide with dilation) must fit the padded input ({padded} "
                                 f"on spatial axis {k})")
    _check_window_work(ctx, node, shape, kernel, strides or [1] * spatial, dilations, pads, auto_pad, explicit)


def _check_window_work(ctx: ImportContext, node, shape, kernel, strides, dilations, pads, auto_pad,
                       explicit: bool) -> None:
    """Refuse a window whose total work (output elements x window elements) exceeds
    ``MAX_WINDOW_WORK``: attributes that each pass their own rule (a pool window as large as a
    big input, padded by nearly the window) can still ask for hours of compute."""
    spatial = len(kernel)
    weight = None if node.op_type in POOLS else input_shape(ctx, node, 3 if node.op_type == "QLinearConv" else 1)
    dims = list(shape) + (list(weight) if weight is not None else [])
    if not all(isinstance(d, (int, np.integer)) for d in dims) or (weight is not None and len(weight) < 2):
        return
    out = []
    for k in range(spatial):
        extent = (kernel[k] - 1) * dilations[k] + 1
        size = shape[2 + k]
        if explicit:
            out.append(max(0, (size + pads[k] + pads[k + spatial] - extent) // strides[k] + 1))
        elif auto_pad == "VALID":
            out.append(max(0, (size - extent) // strides[k] + 1))
        else:
            out.append(-(-size // strides[k]))
    channels_out, per_output = (shape[1], 1) if weight is None else (weight[0], weight[1])
    outputs = int(shape[0]) * int(channels_out) * int(np.prod(out, dtype=object))
    window = int(np.prod(kernel, dtype=object)) * int(per_output)
    if outputs * window > MAX_WINDOW_WORK:
        raise BadAttribute(
            f"attributes kernel_shape={list(kernel)}, pads={list(pads)}, strides={list(strides)} ask for "
            f"{outputs * window:.3g} multiply-adds ({outputs} outputs x a window of {window}), more than the "
            f"limit of {MAX_WINDOW_WORK:.3g} (about a minute of compute): such a window over this input is "
            f"almost certainly a mistake; use a smaller window, smaller pads or larger strides")


def _check_split(ctx: ImportContext, node) -> None:
    shape = input_shape(ctx, node, 0)
    axis = _ints(node, "axis")
    axis = 0 if axis is None else axis[0]
    num = _ints(node, "num_outputs")
    if num is not None and (num[0] < 1 or num[0] != len(node.output)):     # (ONNX's shape inference aborts)
        _bad("num_outputs", num[0], f"must equal the number of outputs ({len(node.output)})")
    if shape is None:
        return
    _check_axis(node, "axis", len(shape))
    dim = shape[axis % len(shape)] if shape else None
    sizes = _ints(node, "split")
    if sizes is None and len(node.input) > 1 and node.input[1]:
        const = ctx.const(node.input[1])
        sizes = None if const is None else [int(v) for v in np.asarray(const).reshape(-1)]
    if sizes is not None:
        if len(sizes) != len(node.output):
            _bad("split", sizes, f"needs one size per output ({len(node.output)})")
        if any(s < 0 for s in sizes) or (dim is not None and sum(sizes) != dim):
            _bad("split", sizes, f"sizes must be >= 0 and add up to the axis length {dim}")
    if num is not None and dim is not None and num[0] > max(dim, 1):
        _bad("num_outputs", num[0], f"must be at most the axis length {dim}")


AXIS_OPS = {"Softmax", "LogSoftmax", "Hardmax", "Gather", "GatherElements", "ArgMax", "ArgMin", "LayerNormalization",
            "ScatterElements", "Compress", "QuantizeLinear", "DequantizeLinear", "DynamicQuantizeLinear", "TopK",
            "CumSum", "ReverseSequence", "RMSNormalization"}
REDUCE_OPS = {"ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare"}
FLAGS = ("keepdims", "transA", "transB", "ceil_mode", "count_include_pad", "storage_order", "select_last_index",
         "exclusive", "reverse", "upper", "largest", "sorted", "noop_with_empty_axes", "training_mode",
         "detect_positive", "detect_negative", "align_corners", "interleaved", "is_causal", "fmod")
POSITIVE = {"DepthToSpace": ("blocksize",), "SpaceToDepth": ("blocksize",), "LRN": ("size",),
            "GroupNormalization": ("num_groups",), "Attention": ("q_num_heads", "kv_num_heads"),
            "RotaryEmbedding": ("num_heads",), "LpPool": ("p",)}


def _check_matmul_shapes(a, b) -> None:
    if a is None or b is None or not a or not b:
        return
    a2 = (1,) + tuple(a) if len(a) == 1 else tuple(a)
    b2 = tuple(b) + (1,) if len(b) == 1 else tuple(b)
    try:
        np.broadcast_shapes(a2[:-2], b2[:-2])
    except ValueError:
        raise BadAttribute(f"input shapes {tuple(a)} and {tuple(b)}: the batch dimensions do not broadcast") from None
    if a2[-1] != b2[-2]:
        raise BadAttribute(f"input shapes {tuple(a)} and {tuple(b)}: the inner dimensions {a2[-1]} and {b2[-2]} "
                           f"differ")


def check_attributes(ctx: ImportContext, node) -> None:
    """Raise BadAttribute for an attribute (or a constant shape-like operand) of ``node`` outside its
    operator's contract."""
    op = node.op_type
    check_operands(ctx, node, memory_limit_bytes())
    for name in FLAGS:
        _check_flag(node, name)
    for name in POSITIVE.get(op, ()):
        _check_positive(node, name)
    if op in WINDOWED:
        _check_window(ctx, node)
    elif op == "Split":
        _check_split(ctx, node)
    elif op in AXIS_OPS:
        _check_axis(node, "axis", _rank(ctx, node, 0))
    elif op == "Flatten":
        _check_axis(node, "axis", _rank(ctx, node, 0), extra=1)
    elif op == "Concat":
        _check_axis(node, "axis", _rank(ctx, node, 0))
    elif op == "OneHot":
        _check_axis(node, "axis", _rank(ctx, node, 0), extra=1)
    elif op in REDUCE_OPS:
        _check_axis(node, "axes", _rank(ctx, node, 0))
    elif op in ("MatMul", "MatMulInteger"):
        _check_matmul_shapes(input_shape(ctx, node, 0), input_shape(ctx, node, 1))
    elif op == "LRN":
        size = _ints(node, "size")
        if size is not None and size[0] % 2 == 0:       # onnxruntime's limit (the spec's formula takes any)
            _bad("size", size[0], "must be odd (a window centred on its channel)")
    elif op == "LpNormalization":
        _check_axis(node, "axis", _rank(ctx, node, 0))
        p = _ints(node, "p")
        if p is not None and p[0] not in (1, 2):
            _bad("p", p[0], "must be 1 or 2")
    elif op == "Transpose":
        perm, rank = _ints(node, "perm"), _rank(ctx, node, 0)
        if perm is not None and rank is not None and sorted(perm) != list(range(rank)):
            _bad("perm", perm, f"must be a permutation of 0..{rank - 1}")
    check_work(ctx, node)


# constant operands: (op, input index) -> the rank they must have ("0-or-1": a scalar or one element)
OPERAND_RANKS = {("Trilu", 1): 0, ("Range", 0): 0, ("Range", 1): 0, ("Range", 2): 0, ("CumSum", 1): "0-or-1", ("CumProd", 1): "0-or-1",
                 ("Dropout", 1): "0-or-1", ("Dropout", 2): "0-or-1", ("Clip", 1): "0-or-1", ("Clip", 2): "0-or-1",
                 ("AffineGrid", 1): 1,
                 ("OneHot", 1): "0-or-1", ("TopK", 1): "0-or-1", ("Reshape", 1): 1, ("Expand", 1): 1, ("Tile", 1): 1,
                 ("Unsqueeze", 1): 1, ("Squeeze", 1): 1, ("ConstantOfShape", 0): 1, ("Split", 1): 1, ("Pad", 1): 1,
                 ("Slice", 1): 1, ("Slice", 2): 1, ("Slice", 3): 1, ("Slice", 4): 1, ("Resize", 2): 1,
                 ("Resize", 3): 1}
OPERAND_RANKS.update({(op, 1): 1 for op in REDUCE_OPS})


MIN_RANKS = {"BatchNormalization": 2, "InstanceNormalization": 3, "GroupNormalization": 2, "LRN": 3,
             "GlobalAveragePool": 3, "GlobalMaxPool": 3, "GlobalLpPool": 3, "DepthToSpace": 4, "SpaceToDepth": 4}


ZERO_POINTS = {"QuantizeLinear": (2,), "DequantizeLinear": (2,), "QLinearMatMul": (2, 5, 7),
               "QLinearConv": (2, 5, 7), "ConvInteger": (2, 3), "MatMulInteger": (2, 3)}


def _tensor_dtype(tensor) -> str:
    """The numpy dtype of an ONNX TensorProto attribute (uint8, the smallest, when it names none)."""
    from onnx import helper
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(tensor.data_type)))
    except (KeyError, TypeError, ValueError):
        return "uint8"


def _dtype(ctx: ImportContext, name: str) -> Optional[str]:
    value = ctx.graph.values.get(name)
    if value is not None:
        return value.dtype
    const = ctx.const(name)
    return None if const is None else str(const.dtype)


def check_operands(ctx: ImportContext, node, memory_limit: int) -> None:
    """A first input that is given, shape-like operands of the right rank, integer zero points, and
    generators (Range, ConstantOfShape) of a size that fits."""
    if node.input and not node.input[0]:
        raise BadAttribute("input 0 is missing (an empty name); it is required")
    for k in ZERO_POINTS.get(node.op_type, ()):
        dtype = _dtype(ctx, node.input[k]) if len(node.input) > k and node.input[k] else None
        if dtype is not None and not np.issubdtype(np.dtype(dtype), np.integer):
            raise BadAttribute(f"input {k} ({node.input[k]!r}) is a zero point of dtype {dtype}; it must be an "
                               f"integer tensor")
    need = MIN_RANKS.get(node.op_type)
    rank = _rank(ctx, node, 0) if need is not None else None
    if rank is not None and rank < need:
        raise BadAttribute(f"input 0 ({node.input[0]!r}) has rank {rank}; {node.op_type} needs rank >= {need} "
                           f"(N, C, ...)")
    for k in range(len(node.input)):
        want = OPERAND_RANKS.get((node.op_type, k))
        shape = input_shape(ctx, node, k) if want is not None else None
        if shape is None:
            continue
        ok = (len(shape) <= 1 and int(np.prod(shape)) == 1) if want == "0-or-1" else len(shape) == want
        if not ok:
            raise BadAttribute(f"input {k} ({node.input[k]!r}) has shape {shape}; it must be "
                               f"{'a scalar' if want in (0, '0-or-1') else 'one-dimensional'}")
    consts = [ctx.const(i) if i else None for i in node.input]
    if node.op_type == "Range" and len(consts) == 3 and all(c is not None for c in consts):
        start, limit, delta = (np.asarray(c).reshape(()).item() for c in consts)
        if delta == 0:
            raise BadAttribute("input 2 (delta) is 0; a Range needs a non-zero step")
        count = max(0, int(np.ceil((limit - start) / delta))) if np.isfinite([start, limit, delta]).all() else -1
        if count < 0 or count * np.asarray(consts[0]).itemsize > memory_limit:
            raise BadAttribute(f"Range({start}, {limit}, {delta}) has {count if count >= 0 else 'unbounded'} "
                               f"elements, more than the memory limit of {memory_limit} bytes allows")
    if node.op_type == "ConstantOfShape" and consts and consts[0] is not None:
        value = _attr(node, "value")
        dtype = "float32" if value is None else _tensor_dtype(value)
        check_size([int(d) for d in np.asarray(consts[0]).reshape(-1)], dtype,
                   f"the ConstantOfShape result {node.output[0] if node.output else ''!r}")
