"""The shape-polymorphic walk's kernels for the ops outside its dense/elementwise groups and its
CNN part (``builder.py``, ``cnn.py``): layout and index ops, normalizations,
quantization, Einsum.  Each ``fn(walk, node, label)`` builds the node's kernel through
``walk.kernel`` (``walk``: the ``_Builder``) or raises ``walk.unsupported`` saying why not; ``OPS``
maps op types to them.  The math is the op library's own (``nn_ops/ops``), taking symbolic sizes."""
from __future__ import annotations

import numpy as np

from ...dsl import intrinsics as lwi
from ...dsl.expr import as_expr, cast, const, if_then_else, logical_and
from ...dsl.intrinsics import elementwise_max
from ...dsl.tensor import compute
from ..network import symbolic as S
from ..network.op_table import pow_constant
from ..ops import normalize
from ..ops.arg_reduce import hardmax
from ..ops.cumsum import cumsum
from ..ops.einsum import einsum, parse
from ..ops.elementwise import extents
from ..ops.grid_sample import grid_sample
from ..ops.index import gather, gather_elements, gather_nd, one_hot, pad_index, reverse_sequence, tile, trilu
from ..ops.loss import nll_terms, nll_weights
from ..ops.lrn import lrn
from ..ops.norm import group_norm
from ..ops.pooling import pool2d
from ..ops.quantize import dequantize, quantize
from ..ops.scatter import scatter_elements, scatter_nd
from ..ops.shape import pad, reduce, softmax
from ..ops.trig import FUNCTIONS as TRIG
from ..onnx_import.fold import WINDOW_TERMS, dequantized
from ..onnx_import.context import optional_input, optional_output
from ..onnx_import.importer import np_dtype
from .common import _attr, _show


def trilu_kernel(walk, node, label: str) -> None:
    """Trilu (a causal mask's triangle, of symbolic sides) by a constant diagonal."""
    k = walk.size_value(node.input[1]) if len(node.input) > 1 and node.input[1] else S.dim(0)
    if not S.is_static(k):
        raise walk.unsupported(f"a Trilu diagonal computed from sizes ({S.show(k)})")
    upper, k = bool(_attr(node, "upper", 1)), int(k)
    walk.kernel(label, ("trilu", upper, k), [node.input[0]], node.output[0],
                lambda x, extent: trilu(x, upper, k, name="trilu"))


def tile_kernel(walk, node, label: str) -> None:
    """Tile by constant repeats; the kernel computes its output sizes."""
    repeats = [S.dim(r) for r in walk.size_values(node.input[1])]
    if not all(S.is_static(r) and int(r) >= 1 for r in repeats):
        raise walk.unsupported(f"Tile repeats {[S.show(r) for r in repeats]} (constants >= 1 are covered)")
    repeats = tuple(int(r) for r in repeats)
    walk.kernel(label, ("tile", repeats), [node.input[0]], node.output[0],
                lambda x, extent: tile(x, repeats, name="tile"), derived_output=True)


def gather_elements_kernel(walk, node, label: str) -> None:
    """GatherElements at computed indices along an axis of any size (each index checked against it
    where it is read)."""
    axis = int(_attr(node, "axis", 0))
    walk.kernel(label, ("gather_elements", axis), [node.input[0], node.input[1]], node.output[0],
                lambda x, idx, extent: gather_elements(x, idx, axis, name="gather_elements"))


def hardmax_kernel(walk, node, label: str) -> None:
    axis = int(_attr(node, "axis", -1))
    walk.kernel(label, ("hardmax", axis), [node.input[0]], node.output[0],
                lambda x, extent: hardmax(x, axis, name="hardmax"))


def cumulative_kernel(walk, node, label: str) -> None:
    """CumSum / CumProd along a constant axis of any size (position ids counted along a mask)."""
    axis = walk.size_value(node.input[1])
    if not S.is_static(axis):
        raise walk.unsupported("a cumulative axis computed from sizes")
    kind, axis = "sum" if node.op_type == "CumSum" else "prod", int(axis)
    exclusive, reverse = bool(_attr(node, "exclusive", 0)), bool(_attr(node, "reverse", 0))
    walk.kernel(label, ("cumulative", kind, axis, exclusive, reverse), [node.input[0]], node.output[0],
                lambda x, extent: cumsum(x, axis, exclusive, reverse, name="cumulative", kind=kind))


def lrn_kernel(walk, node, label: str) -> None:
    """LRN (AlexNet's, GoogLeNet's) across static channels, over maps of any size."""
    if len(walk.shape(node.input[0])) < 3 or not S.is_static(walk.shape(node.input[0])[1]):
        raise walk.unsupported("an LRN of rank < 3 or of symbolic channels")
    size, alpha = int(_attr(node, "size", 1)), float(_attr(node, "alpha", 1e-4))
    beta, bias = float(_attr(node, "beta", 0.75)), float(_attr(node, "bias", 1.0))
    walk.kernel(label, ("lrn", size, alpha, beta, bias), [node.input[0]], node.output[0],
                lambda x, extent: lrn(x, size, alpha, beta, bias, name="lrn"))


def one_hot_kernel(walk, node, label: str) -> None:
    """OneHot of computed labels by a constant depth and values."""
    depth, values = walk.size_value(node.input[1]), node.input[2]
    if not S.is_static(depth) or int(depth) < 1 or values not in walk.consts or walk.dtype(node.input[0]) == "bool":
        raise walk.unsupported("a OneHot of bool indices, or of a depth or values computed at run time")
    depth, axis = int(depth), int(_attr(node, "axis", -1))
    walk.kernel(label, ("one_hot", depth, axis), [node.input[0], values], node.output[0],
                lambda idx, v, extent: one_hot(idx, v, depth, axis, name="one_hot"))


def constant_of_shape(walk, node, label: str) -> None:
    """ConstantOfShape of a shape computed from sizes (constant shapes are folded at import)."""
    from onnx import numpy_helper
    value = numpy_helper.to_array(node.attribute[0].t).reshape(-1) if node.attribute \
        else np.zeros(1, np.float32)
    dtype, number = str(value.dtype), value[0].item()
    shape = walk.shapes.shapes[node.output[0]]
    walk.kernel(label, ("constant_of_shape", dtype, number), [], node.output[0],
                lambda extent: compute(tuple(extent(d) for d in shape), lambda *i: const(number, dtype),
                                       name="constant_of_shape", tag="injective"))


def group_norm_kernel(walk, node, label: str) -> None:
    """InstanceNormalization, and GroupNormalization with per-channel scale and bias (opset 21),
    by constant parameters over maps of any size (``norm.group_norm``)."""
    shape = walk.shape(node.input[0])
    if len(shape) < 3 or not S.is_static(shape[1]) or not all(i in walk.consts for i in node.input[1:3]):
        raise walk.unsupported(f"a {node.op_type} of shape {_show(shape)} (rank 3 or more, static channels) or "
                               f"with a computed scale or bias")
    channels = int(shape[1])
    groups = channels if node.op_type == "InstanceNormalization" else int(_attr(node, "num_groups", 0))
    if groups < 1 or channels % groups or any(walk.consts[i].size != channels for i in node.input[1:3]):
        raise walk.unsupported(f"{groups} groups of {channels} channels, or a scale/bias not one per channel")
    if int(_attr(node, "stash_type", 1)) != 1:
        raise walk.unsupported("stash_type other than 1 (float32)")
    eps = float(_attr(node, "epsilon", 1e-5))
    params = [walk.flat_const(i) for i in node.input[1:3]]
    walk.kernel(label, ("group_norm", groups, eps), [node.input[0]] + params, node.output[0],
                lambda x, s, b, extent: group_norm(x, s, b, groups, eps, name="group_norm"))


def einsum_kernel(walk, node, label: str) -> None:
    """Einsum as one compute (``ops/einsum.py``: parallel over the output, the summed letters
    serial); each letter's sizes other than 1 must be one size."""
    equation = str(_attr(node, "equation", ""))
    inputs = list(node.input)
    shapes = [walk.aliased(walk.shape(i)) for i in inputs]
    subs, _ = parse(equation, [len(s) for s in shapes])
    size = {}
    for sub, shape in zip(subs, shapes):
        for c, d in zip(sub, shape):
            if d != 1 and size.setdefault(c, d) != d:
                raise walk.unsupported(f"einsum letter {c!r} of sizes {S.show(size[c])} and {S.show(d)}, which are "
                                       f"not known to be one")
    walk.kernel(label, ("einsum", equation), inputs, node.output[0],
                lambda *ts, extent: einsum(equation, ts, name="einsum"))


def by_reductions(walk, node, label: str) -> None:
    """LpNormalization, MeanVarianceNormalization, RMSNormalization and ReduceLogSumExp: whole-tensor
    reductions over any sizes and one elementwise stage (``ops/normalize.py``)."""
    op, x = node.op_type, node.input[0]
    if not walk.dtype(x).startswith("float"):
        raise walk.unsupported(f"{op} of {walk.dtype(x)} values")
    if op == "LpNormalization":
        axis, p = int(_attr(node, "axis", -1)), int(_attr(node, "p", 2))
        if p not in (1, 2):
            raise walk.unsupported(f"p={p} (1 or 2)")
        return walk.kernel(label, ("lp_normalize", axis, p), [x], node.output[0],
                           lambda t, extent: normalize.lp_normalize(t, axis, p, name="lp_normalize"))
    if op == "MeanVarianceNormalization":
        axes = tuple(int(a) for a in _attr(node, "axes", [0, 2, 3]))
        return walk.kernel(label, ("mvn", axes), [x], node.output[0],
                           lambda t, extent: normalize.mean_variance_normalize(t, axes, name="mvn"))
    if op == "RMSNormalization":
        shape, axis = walk.shape(x), int(_attr(node, "axis", -1))
        if node.input[1] not in walk.consts or not all(S.is_static(d) for d in shape[axis % len(shape):]) \
                or int(_attr(node, "stash_type", 1)) != 1:
            raise walk.unsupported("an RMSNormalization with a computed scale, over axes of symbolic size, or with "
                                   "stash_type other than 1")
        eps = float(_attr(node, "epsilon", 1e-5))
        return walk.kernel(label, ("rms_norm", axis, eps), [x, node.input[1]], node.output[0],
                           lambda t, scale, extent: normalize.rms_normalize(t, scale, axis, eps, name="rms_norm"))
    axes, keepdims = walk.reduction_axes(node), bool(_attr(node, "keepdims", 1))       # ReduceLogSumExp
    walk.kernel(label, ("log_sum_exp", axes, keepdims), [x], node.output[0],
                lambda t, extent: normalize.log_sum_exp(t, axes, keepdims, name="log_sum_exp"))


def quantization(walk, node, label: str) -> None:
    """DequantizeLinear / QuantizeLinear (a QDQ model's) by a constant scale and zero point, with
    the static path's arithmetic (``ops/quantize.py``): per tensor, or per position (or block)
    along an axis of static size, whose positions then all have their scale."""
    inputs = [i for i in node.input[:3] if i]
    if not all(i in walk.consts for i in inputs[1:]):
        raise walk.unsupported("a computed scale or zero point")
    shape = walk.shape(inputs[0])
    axis, block = int(_attr(node, "axis", 1)), int(_attr(node, "block_size", 0))
    if walk.consts[inputs[1]].size > 1 and (not shape or not S.is_static(shape[axis % len(shape)])):
        raise walk.unsupported(f"a scale per position along the symbolic axis {axis} ({_show(shape)})")
    if node.op_type == "DequantizeLinear" and inputs[0] in walk.consts:     # an int8 weight: float once, here
        walk.consts[node.output[0]] = dequantized(*(walk.consts[i] for i in inputs), axis=axis, block=block)
        return
    if node.op_type == "DequantizeLinear":
        to = None
        if _attr(node, "output_dtype", 0) and np_dtype(_attr(node, "output_dtype", 0)) != walk.dtype(inputs[1]):
            raise walk.unsupported("output_dtype other than the scale's type")
    else:
        to = np_dtype(_attr(node, "output_dtype", 0)) if _attr(node, "output_dtype", 0) else \
            walk.dtype(inputs[2]) if len(inputs) > 2 else "uint8"
        if not walk.dtype(inputs[0]).startswith("float"):
            raise walk.unsupported(f"quantizing {walk.dtype(inputs[0])} values")

    def make(x, scale, zero_point=None, extent=None):
        if to is None:
            return dequantize(x, scale, zero_point, axis, block, name="dequantize")
        return quantize(x, scale, zero_point, to, axis, block, name="quantize")
    walk.kernel(label, ("quantize" if to else "dequantize", axis, block, to), inputs, node.output[0], make)


def space_depth(walk, node, label: str) -> None:
    """DepthToSpace (DCR or CRD) and SpaceToDepth of an NCHW value, as one gather: each output
    element read where ONNX's reshape-transpose-reshape puts it; the kernel computes its sizes."""
    if len(walk.shape(node.input[0])) != 4:
        raise walk.unsupported(f"{node.op_type} of rank {len(walk.shape(node.input[0]))} (4 expected)")
    b = int(_attr(node, "blocksize", 0))
    to_depth = node.op_type == "SpaceToDepth"
    dcr = to_depth or _attr(node, "mode", "DCR") == "DCR"
    c = walk.shape(node.input[0])[1]
    if not S.is_static(c) or b < 1 or (not to_depth and int(c) % (b * b)):
        raise walk.unsupported(f"{node.op_type} of {S.show(c)} channels by blocksize {b}")
    c = int(c)

    def make(x, extent):
        n, _, h, w = x.shape
        if to_depth:
            def read(i, o, y, z):
                q = o // c          # the position in the block
                return x[i, o % c, y * b + q // b, z * b + q % b]
            return compute((n, c * b * b, h // b, w // b), read, name="space_to_depth", tag="injective")
        per = c // (b * b)

        def read(i, o, y, z):
            at = (y % b) * b + z % b
            return x[i, at * per + o if dcr else o * b * b + at, y // b, z // b]
        return compute((n, per, h * b, w * b), read, name="depth_to_space", tag="injective")
    walk.kernel(label, ("space_to_depth" if to_depth else "depth_to_space", b, dcr), [node.input[0]],
                node.output[0], make, derived_output=True)


def split(walk, node, label: str) -> None:
    """Split along an axis of static size (a fused q/k/v projection cut in three, a chunk of
    channels): a copy kernel per output, reading from its piece's first index."""
    src = walk.shape(node.input[0])
    axis = int(_attr(node, "axis", 0)) % len(src)
    if not S.is_static(src[axis]):
        raise walk.unsupported(f"a Split along the symbolic axis {axis} ({_show(src)})")
    start = 0
    for k, out in enumerate(node.output):
        out_shape = walk.shapes.shapes[out] if out else None
        if out:
            def make(x, extent, first=start, out_shape=out_shape):
                return compute(tuple(extent(d) for d in out_shape),
                               lambda *i: x[i[:axis] + (i[axis] + first,) + i[axis + 1:]], name="split",
                               tag="injective")
            walk.kernel(f"{label}.{k}" if k else label, ("split", axis, start), [node.input[0]], out, make)
        start += int(walk.shapes.shapes[out][axis]) if out else 0


def pad_kernel(walk, node, label: str) -> None:
    """Pad by constant amounts, with a constant value, the edge's or the mirror's (a TF-exported
    network's explicit padding, a style-transfer net's reflection; its shape rule checks at run
    time that a reflected size exceeds the pad); wrap where the padded axes are static. The
    kernel computes its output sizes, ``H + before + after``; on a blocked map it pads the blocked
    value (height and width only), which stays blocked."""
    src = walk.shape(node.input[0])
    mode = _attr(node, "mode", "constant")
    pads = [S.dim(p) for p in (walk.size_values(node.input[1]) if len(node.input) > 1 and node.input[1]
                               else _attr(node, "pads", []))]
    if not all(S.is_static(p) for p in pads):
        raise walk.unsupported("pads computed from sizes")
    pads = [int(p) for p in pads]
    axes = [int(a) % len(src) for a in walk.size_values(node.input[3])] if len(node.input) > 3 and node.input[3] \
        else list(range(len(src)))
    before, after = [0] * len(src), [0] * len(src)
    for k, a in enumerate(axes):
        before[a], after[a] = pads[k], pads[k + len(axes)]
    if any(p < 0 for p in before + after):
        raise walk.unsupported("negative pads")
    if mode == "wrap" and any((b or a) and not S.is_static(d) for d, b, a in zip(src, before, after)):
        raise walk.unsupported("wrap padding of an axis of symbolic size")
    value = 0.0
    if len(node.input) > 2 and node.input[2]:
        if node.input[2] not in walk.consts or walk.consts[node.input[2]].size != 1:
            raise walk.unsupported("a Pad value other than one constant")
        value = float(walk.consts[node.input[2]].reshape(()))
    before, after = tuple(before), tuple(after)
    x, out, out_shape = node.input[0], node.output[0], None
    if x in walk.cnn.blocked and len(src) == 4 and not any(before[:2] + after[:2]):
        # the blocked map padded as it lies (axes 2 and 3 of either layout): it stays blocked
        x, out, before, after = walk.cnn.blocked[x], walk.fresh(out + ".blocked"), before + (0,), after + (0,)
        out_shape = walk.cnn.blocked_shape(walk.shapes.shapes[node.output[0]])
        walk.cnn.blocked[node.output[0]] = out
    else:
        walk.cnn.plain(x)

    def make(t, extent):
        if mode == "constant":
            return pad(t, before, after, value, name="pad")
        return pad_index(t, before, after, mode, name="pad")
    walk.kernel(label, ("pad", mode, before, after, value), [x], out, make, out_shape=out_shape,
                derived_output=True)


def _read_as_one(walk, pairs, operand: str) -> None:
    """Each pair of sizes that the shape rule checks equal (at run time, where they are two symbols)
    read as one size in the kernel (``walk.assume_equal``), so that its reads stay in bounds."""
    for d, g in pairs:
        if not walk.assume_equal(d, g, operand):
            raise walk.unsupported(f"sizes {S.show(d)} and {S.show(g)} of {operand!r} that are not known equal")


def gather_nd_kernel(walk, node, label: str) -> None:
    """GatherND at computed coordinates (of a static depth: the shape rule refuses others) into
    data of any size, each coordinate checked against its axis where it is read."""
    batch_dims = int(_attr(node, "batch_dims", 0))
    _read_as_one(walk, zip(walk.shape(node.input[1])[:batch_dims], walk.shape(node.input[0])), node.input[1])
    walk.kernel(label, ("gather_nd", batch_dims), list(node.input[:2]), node.output[0],
                lambda data, idx, extent: gather_nd(data, idx, batch_dims, name="gather_nd"),
                out_shape=walk.aliased(walk.shapes.shapes[node.output[0]]))


def scatter_kernel(walk, node, label: str) -> None:
    """ScatterND (coordinates of a static depth) and ScatterElements into data of any size, by
    computed indices and updates: ``ops/scatter.py``'s gathers seen from the output, over index
    positions of symbolic extents."""
    reduction = _attr(node, "reduction", "none")
    if reduction not in ("none", "add", "mul", "max", "min"):
        raise walk.unsupported(f"reduction {reduction!r}")
    inputs = list(node.input[:3])
    data, indices = walk.shape(inputs[0]), walk.shape(inputs[1])
    expected = indices[:-1] + data[int(indices[-1]):] if node.op_type == "ScatterND" else indices
    _read_as_one(walk, zip(walk.shape(inputs[2]), expected), inputs[2])
    if node.op_type == "ScatterND":
        return walk.kernel(label, ("scatter_nd", reduction), inputs, node.output[0],
                           lambda data, idx, upd, extent: scatter_nd(data, idx, upd, reduction, name="scatter_nd"))
    axis = int(_attr(node, "axis", 0))
    walk.kernel(label, ("scatter_elements", axis, reduction), inputs, node.output[0],
                lambda data, idx, upd, extent: scatter_elements(data, idx, upd, axis, reduction,
                                                                name="scatter_elements"))


def reverse_sequence_kernel(walk, node, label: str) -> None:
    """ReverseSequence by computed lengths over batch and time axes of any size."""
    batch_axis, time_axis = int(_attr(node, "batch_axis", 1)), int(_attr(node, "time_axis", 0))
    _read_as_one(walk, [(walk.shape(node.input[1])[0], walk.shape(node.input[0])[batch_axis])], node.input[1])
    walk.kernel(label, ("reverse_sequence", batch_axis, time_axis), list(node.input[:2]), node.output[0],
                lambda x, lengths, extent: reverse_sequence(x, lengths, batch_axis, time_axis,
                                                            name="reverse_sequence"))


def eye_like(walk, node, label: str) -> None:
    """EyeLike of a matrix of any size (the static path folds it to a constant): ones where the
    column is the row plus ``k``."""
    shape = walk.shapes.shapes[node.output[0]]
    if len(shape) != 2:
        raise walk.unsupported(f"an EyeLike of rank {len(shape)} (2 expected)")
    to = _attr(node, "dtype", None)
    dtype = walk.dtype(node.input[0]) if to is None else np_dtype(to)
    k = int(_attr(node, "k", 0))
    walk.kernel(label, ("eye_like", k, dtype), [], node.output[0],
                lambda extent: compute(tuple(extent(d) for d in shape), lambda i, j: cast(dtype, j - i == k),
                                       name="eye_like", tag="injective"))


def center_crop_pad(walk, node, label: str) -> None:
    """CenterCropPad to constant sizes ``t``: each output element of an axis of input size ``d``
    reads ``i + max(d - t, 0)//2 - max(t - d, 0)//2``, zero outside the input: one expression crops
    or pads as ONNX centres them, so an axis of symbolic size does what its binding asks."""
    src = walk.shape(node.input[0])
    target = [S.dim(v) for v in walk.size_values(node.input[1])]
    if not all(S.is_static(t) for t in target):
        raise walk.unsupported(f"a CenterCropPad to sizes computed from sizes ({[S.show(t) for t in target]})")
    axes = [int(a) % len(src) for a in _attr(node, "axes", range(len(src)))]
    plan = tuple((a, int(t)) for a, t in zip(axes, target))
    out_shape = walk.shapes.shapes[node.output[0]]

    def make(x, extent):
        sizes = extents(x)

        def body(*idx):
            index, inside = list(idx), None
            for a, t in plan:
                d = sizes[a]
                if isinstance(d, int):
                    index[a] = idx[a] + (max(d - t, 0) // 2 - max(t - d, 0) // 2)
                else:
                    index[a] = idx[a] + elementwise_max(d - t, 0) // 2 - elementwise_max(t - d, 0) // 2
                if not isinstance(d, int) or t > d:
                    c = logical_and(index[a] >= 0, index[a] < d)
                    inside = c if inside is None else logical_and(inside, c)
            read = x[tuple(index)]
            return read if inside is None else if_then_else(inside, read, const(0, x.dtype))
        return compute(tuple(extent(d) for d in out_shape), body, name="center_crop_pad", tag="injective")
    walk.kernel(label, ("center_crop_pad", plan), [node.input[0]], node.output[0], make)


def window(walk, node, label: str) -> None:
    """HannWindow / HammingWindow / BlackmanWindow of a length computed from sizes: ``sum_k a_k
    cos(2 pi k i / L)`` per position (``fold.WINDOW_TERMS``; L the length, or one less where not
    periodic), in float64 as the constant fold computes it."""
    (size,) = walk.shapes.shapes[node.output[0]]
    terms, periodic = WINDOW_TERMS[node.op_type], bool(_attr(node, "periodic", 1))
    dtype = np_dtype(_attr(node, "output_datatype", 1))

    def make(extent):
        n = as_expr(extent(size), "int64")
        length = cast("float64", n if periodic else n - 1)

        def body(i):
            at = cast("float64", i)
            total = const(terms[0], "float64")
            for k, c in enumerate(terms[1:], 1):
                total = total + const(c, "float64") * TRIG["cos"](const(2 * np.pi * k, "float64") * at / length)
            return cast(dtype, total)
        return compute((extent(size),), body, name="window", tag="injective")
    walk.kernel(label, ("window", node.op_type, periodic, dtype), [], node.output[0], make)


def compress(walk, node, label: str) -> None:
    """Compress by a constant condition along an axis of static size, or of a value of static size
    flattened (the shape rule refuses the others: their output size would depend on the binding):
    a gather at the constant positions it keeps, as the static converter does."""
    x, axis = node.input[0], _attr(node, "axis", None)
    if axis is None:
        flat = walk.fresh(x + ".flat")
        walk.view(x, flat, (S.product(walk.shape(x)),))
        x, axis = flat, 0
    axis = int(axis) % len(walk.shape(x))
    length = int(walk.shape(x)[axis])
    picked = walk.fresh(node.output[0] + ".indices")
    walk.consts[picked] = np.nonzero(walk.consts[node.input[1]].astype(bool).reshape(-1)[:length])[0].astype(np.int64)
    walk.kernel(label, ("compress", axis), [x, picked], node.output[0],
                lambda t, idx, extent: gather(t, idx, axis, name="compress"))


def lp_pool(walk, node, label: str) -> None:
    """LpPool of an NCHW map of any size: ``(sum over the window of |x|^p) ** (1/p)``, the sum as
    the static path computes it (``kernel size x`` an average pool counting the padding,
    ``ops/pooling.py``), in one kernel."""
    if len(walk.shape(node.input[0])) != 4 or int(_attr(node, "ceil_mode", 0)):
        raise walk.unsupported("an LpPool that is not 2-d, or with ceil_mode")
    if not walk.dtype(node.input[0]).startswith("float"):
        raise walk.unsupported(f"LpPool of {walk.dtype(node.input[0])} values")
    kernel = tuple(int(v) for v in _attr(node, "kernel_shape", None))
    stride, padding, dilation = walk.cnn.window(node)
    p = float(_attr(node, "p", 2))

    def make(x, extent):
        powered = compute(x.shape, lambda *i: pow_constant(lwi.abs(x[i]), p, x.dtype), name="lp_pool.pow",
                          tag="elemwise")
        avg = pool2d(powered, kernel, stride, padding, dilation, "avg", count_include_pad=True, name="lp_pool.avg")
        count = const(float(np.prod(kernel)), x.dtype)
        return compute(avg.shape, lambda *i: pow_constant(avg[i] * count, 1.0 / p, x.dtype), name="lp_pool",
                       tag="elemwise")
    walk.kernel(label, ("lp_pool", kernel, stride, padding, dilation, p), [node.input[0]], node.output[0], make,
                derived_output=True)


def grid_sample_kernel(walk, node, label: str) -> None:
    """GridSample of an image of any size at a computed grid of any size (``ops/grid_sample.py``)."""
    x, grid = node.input[0], node.input[1]
    if not walk.dtype(x).startswith("float"):
        raise walk.unsupported(f"a GridSample of {walk.dtype(x)} values")
    mode = _attr(node, "mode", "linear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    padding_mode, align = _attr(node, "padding_mode", "zeros"), bool(_attr(node, "align_corners", 0))
    _read_as_one(walk, [(walk.shape(grid)[0], walk.shape(x)[0])], grid)
    walk.kernel(label, ("grid_sample", mode, padding_mode, align), [x, grid], node.output[0],
                lambda t, g, extent: grid_sample(t, g, mode, padding_mode, align, name="grid_sample"))


def affine_grid(walk, node, label: str) -> None:
    """AffineGrid (2-d or 3-d) to sizes that are constants or computed from shapes: ``grid[n, ...,
    j] = sum_k theta[n, j, k] * base[..., k]``, the base grid's coordinates computed per position
    (the static converter's constant ``_affine_base_grid``, of sizes that may be symbolic)."""
    theta, out_shape = node.input[0], walk.shapes.shapes[node.output[0]]
    if len(out_shape) not in (4, 5) or walk.dtype(theta) != "float32":
        raise walk.unsupported(f"an AffineGrid of {len(out_shape) - 2} spatial axes or of {walk.dtype(theta)} values "
                               f"(2-d or 3-d float32 is covered)")
    align = bool(_attr(node, "align_corners", 0))
    _read_as_one(walk, [(walk.shape(theta)[0], out_shape[0])], theta)
    out_shape = walk.aliased(out_shape)         # (its batch, theta's, as one size)
    spatial = out_shape[1:-1]

    def make(t, extent):
        def coordinate(i, d):        # position i of d along an axis, in [-1, 1]
            i, d = cast("float32", i), cast("float32", as_expr(d, "int64"))
            if align:   # (one position: -1)
                return i * const(2.0, "float32") / elementwise_max(d - const(1.0, "float32"),
                                                                    const(1.0, "float32")) - const(1.0, "float32")
            return (i * const(2.0, "float32") + const(1.0, "float32")) / d - const(1.0, "float32")

        def body(n, *rest):
            *at, j = rest
            base = [coordinate(i, extent(d)) for i, d in zip(at, spatial)][::-1]      # x (the last axis) first
            return sum((t[n, j, k] * b for k, b in enumerate(base)), t[n, j, len(base)])
        return compute(tuple(extent(d) for d in out_shape), body, name="affine_grid", tag="injective")
    walk.kernel(label, ("affine_grid", align), [theta], node.output[0], make, out_shape=out_shape)


def loss(walk, node, label: str) -> None:
    """NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (of the log-softmax over the class axis,
    its own kernel where the second output is used) over a batch and extra axes of any size: the
    per-element terms and weights of ``ops/loss.py`` and their sum (``mean``: the sum over the sum
    of the weights, ONNX's weighted mean) in one kernel, as the static converters compute them."""
    x, target = node.input[0], node.input[1]
    weight = optional_input(node, 2)
    reduction, ignore = _attr(node, "reduction", "mean"), _attr(node, "ignore_index", None)
    if reduction not in ("none", "sum", "mean") or not walk.dtype(x).startswith("float"):
        raise walk.unsupported(f"reduction {reduction!r} of {walk.dtype(x)} values")
    ignore = None if ignore is None else int(ignore)
    shape = walk.shape(x)
    _read_as_one(walk, zip(walk.shape(target), shape[:1] + shape[2:]), target)
    if weight:
        _read_as_one(walk, [(walk.shape(weight)[0], shape[1])], weight)
    log_prob = optional_output(node, 1)
    if log_prob:
        walk.kernel(label + ".log_prob", ("log_softmax", 1), [x], log_prob,
                    lambda t, extent: softmax(t, 1, name="log_softmax", log=True))
        x = log_prob
    of_logits = node.op_type == "SoftmaxCrossEntropyLoss" and not log_prob

    def make(t, tgt, w=None, extent=None):
        if of_logits:
            t = softmax(t, 1, name="log_softmax", log=True)
        terms = nll_terms(t, tgt, w, ignore, name="nll")
        if reduction == "none":
            return terms
        axes = list(range(len(terms.shape)))
        total = reduce(terms, axes, "sum", keepdims=False, name="nll.sum")
        if reduction == "sum":
            return total
        count = reduce(nll_weights(t, tgt, w, ignore), axes, "sum", keepdims=False, name="nll.count")
        return compute((), lambda: total[()] / count[()], name="nll.mean", tag="elemwise")
    walk.kernel(label, ("loss", of_logits, reduction, ignore), [x, target] + ([weight] if weight else []),
                node.output[0], make, out_shape=walk.aliased(walk.shapes.shapes[node.output[0]]))


OPS = {"Trilu": trilu_kernel, "Tile": tile_kernel, "ConstantOfShape": constant_of_shape,
       "GatherElements": gather_elements_kernel, "Hardmax": hardmax_kernel, "CumSum": cumulative_kernel,
       "CumProd": cumulative_kernel, "LRN": lrn_kernel, "OneHot": one_hot_kernel, "Split": split,
       "DequantizeLinear": quantization, "QuantizeLinear": quantization, "DepthToSpace": space_depth,
       "SpaceToDepth": space_depth, "InstanceNormalization": group_norm_kernel, "GroupNormalization": group_norm_kernel,
       "Einsum": einsum_kernel, "LpNormalization": by_reductions, "MeanVarianceNormalization": by_reductions,
       "RMSNormalization": by_reductions, "ReduceLogSumExp": by_reductions, "GatherND": gather_nd_kernel,
       "ScatterND": scatter_kernel, "ScatterElements": scatter_kernel, "ReverseSequence": reverse_sequence_kernel,
       "EyeLike": eye_like, "CenterCropPad": center_crop_pad, "HannWindow": window, "HammingWindow": window,
       "BlackmanWindow": window, "Compress": compress, "LpPool": lp_pool, "GridSample": grid_sample_kernel,
       "AffineGrid": affine_grid, "NegativeLogLikelihoodLoss": loss, "SoftmaxCrossEntropyLoss": loss}
