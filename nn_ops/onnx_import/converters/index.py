"""Converters for indexing and data movement: Gather, GatherElements, Expand, Tile, Trilu, Resize,
and Range / ConstantOfShape / the window functions (folded at import when their inputs are
constants, else refused)."""
from __future__ import annotations

import numpy as np

from ...ops.resize import axis_taps, coefficient_fn, source_coordinates
from ..context import ImportContext, NeedsConstant, Unsupported, check_size, converter


@converter("Gather", since=1)
def gather(ctx: ImportContext, node):
    data, indices = node.input[0], node.input[1]
    axis = int(ctx.attr(node, "axis", 0))
    shape = ctx.shape(data)
    nd = len(shape)
    if not -nd <= axis < nd:
        raise Unsupported(f"axis {axis} out of range for rank {nd}")
    n = shape[axis % nd]
    const = ctx.const(indices)
    if const is not None:
        if const.size and (const.min() < -n or const.max() >= n):
            raise Unsupported(f"constant indices out of range [{-n}, {n}) of axis {axis}")
        if const.ndim == 0:
            ctx.emit("gather", [data], node.output[0], {"axis": axis, "index": int(const)}, name=node.name)
            return
    ctx.emit("gather", [data, indices], node.output[0], {"axis": axis}, name=node.name)


@converter("GatherElements", since=11)
def gather_elements(ctx: ImportContext, node):
    ctx.emit("gather_elements", list(node.input[:2]), node.output[0], {"axis": int(ctx.attr(node, "axis", 0))},
             name=node.name)


@converter("Expand", since=8)
def expand(ctx: ImportContext, node):
    shape = tuple(int(d) for d in ctx.require_const(node, 1, "shape"))
    ctx.emit("expand", [node.input[0]], node.output[0], {"shape": shape}, name=node.name)


@converter("Tile", since=6)
def tile(ctx: ImportContext, node):
    repeats = tuple(int(r) for r in ctx.require_const(node, 1, "repeats"))
    if any(r < 1 for r in repeats):
        raise Unsupported(f"repeats {repeats} (each must be >= 1)")
    ctx.emit("tile", [node.input[0]], node.output[0], {"repeats": repeats}, name=node.name)


@converter("Trilu", since=14)
def trilu(ctx: ImportContext, node):
    k = int(ctx.require_const(node, 1, "k").reshape(())) if len(node.input) > 1 and node.input[1] else 0
    ctx.emit("trilu", [node.input[0]], node.output[0], {"upper": bool(ctx.attr(node, "upper", 1)), "k": k},
             name=node.name)


@converter("Range", since=11)
@converter("ConstantOfShape", since=9)
@converter("HannWindow", since=17)
@converter("HammingWindow", since=17)
@converter("BlackmanWindow", since=17)
def generated(ctx: ImportContext, node):
    """Reached only when an input is not a constant (constant ones were folded at import)."""
    dynamic = [i for i in node.input if i and ctx.const(i) is None]
    raise NeedsConstant(f"input(s) {', '.join(map(repr, dynamic))} must be constants: the output's shape "
                        f"depends on their values", dynamic)


def _optional_const(ctx, node, k, what):
    if len(node.input) > k and node.input[k]:
        value = ctx.require_const(node, k, what)
        return value if value.size else None
    return None


def _output_sizes(ctx: ImportContext, node, in_shape):
    """(scales, sizes) over all axes: float64 scales and int output sizes."""
    nd = len(in_shape)
    axes = [a % nd for a in ctx.attr(node, "axes", list(range(nd)))]
    scales = _optional_const(ctx, node, 2, "scales")
    sizes = _optional_const(ctx, node, 3, "sizes")
    if (scales is None) == (sizes is None):
        raise Unsupported("exactly one of scales and sizes must be given")
    if scales is not None:
        if len(scales) != len(axes):
            raise Unsupported(f"{len(scales)} scales for {len(axes)} axes")
        full = [1.0] * nd
        for a, s in zip(axes, scales):
            full[a] = float(s)
        if any(s <= 0 for s in full):
            raise Unsupported(f"scales {list(scales)} (each must be > 0)")
        return full, [int(np.float64(s) * d) for s, d in zip(full, in_shape)]
    if len(sizes) != len(axes):
        raise Unsupported(f"{len(sizes)} sizes for {len(axes)} axes")
    out = list(in_shape)
    for a, s in zip(axes, sizes):
        out[a] = int(s)
    full = [o / d for o, d in zip(out, in_shape)]
    policy = ctx.attr(node, "keep_aspect_ratio_policy", "stretch")
    if policy != "stretch":
        if policy not in ("not_larger", "not_smaller"):
            raise Unsupported(f"keep_aspect_ratio_policy={policy!r}")
        pick = min if policy == "not_larger" else max
        scale = pick(full[a] for a in axes)
        full = [scale if a in axes else 1.0 for a in range(nd)]
        out = [int(scale * d + 0.5) if a in axes else d for a, d in enumerate(in_shape)]
    return full, out


@converter("Resize", since=11)
def resize(ctx: ImportContext, node):
    x, out_name = node.input[0], node.output[0]
    in_shape = ctx.shape(x)
    mode = ctx.attr(node, "mode", "nearest")
    coord = ctx.attr(node, "coordinate_transformation_mode", "half_pixel")
    antialias = bool(ctx.attr(node, "antialias", 0))
    if mode not in ("nearest", "linear", "cubic"):
        raise Unsupported(f"mode={mode!r}")
    crop = _crop_boxes(ctx, node, len(in_shape)) if coord == "tf_crop_and_resize" else None
    if mode == "nearest" and antialias:
        raise Unsupported("antialias with mode='nearest'")
    if mode != "nearest" and not ctx.dtype(x).startswith("float"):
        raise Unsupported(f"{mode} resize of {ctx.dtype(x)} data")
    scales, out_shape = _output_sizes(ctx, node, in_shape)
    if any(o < 1 for o in out_shape):
        raise Unsupported(f"output shape {tuple(out_shape)} from input shape {tuple(in_shape)}: every size must be "
                          f">= 1 (empty outputs are not supported)")
    coeffs = coefficient_fn(mode, ctx.attr(node, "nearest_mode", "round_prefer_floor"),
                            float(ctx.attr(node, "cubic_coeff_a", -0.75)), antialias)
    exclude = bool(ctx.attr(node, "exclude_outside", 0))
    # the result, and the masks of an extrapolating crop (of its shape and dtype), before any is made
    check_size(out_shape, ctx.dtype(x), f"the result {out_name!r}")
    axes, tables = [], []
    outside = np.zeros(out_shape, bool)            # tf_crop_and_resize: samples beyond the input
    for a, (d, o, s) in enumerate(zip(in_shape, out_shape, scales)):
        if o == d and abs(s - 1.0) < 1e-12 and (crop is None or crop[a] == (0.0, 1.0)):
            continue
        if crop is not None:
            x_ori = _crop_coordinates(crop[a], o, d)
            view = [1] * len(out_shape)
            view[a] = o
            outside |= ((x_ori < 0) | (x_ori > d - 1)).reshape(view)
        else:
            try:
                x_ori = source_coordinates(coord, o, d, s)
            except ValueError as exc:
                raise Unsupported(str(exc)) from exc
        idx, w = axis_taps(x_ori, d, s, coeffs, exclude)
        axes.append(a)
        if mode == "nearest":          # one-hot weights: keep the chosen index only
            tables.append(ctx.add_constant(f"{out_name}.idx{a}", idx[np.arange(o), w.argmax(axis=1)][:, None]))
        else:
            tables.append(ctx.add_constant(f"{out_name}.idx{a}", idx))
            tables.append(ctx.add_constant(f"{out_name}.w{a}", w.astype(ctx.dtype(x))))
    if not axes:
        ctx.emit("identity", [x], out_name, name=node.name)
        return
    extrapolated = outside.any()
    # how the tables were made, so a graph of symbolic sizes makes them again at each binding
    taps = {"mode": mode, "transform": coord, "rounding": ctx.attr(node, "nearest_mode", "round_prefer_floor"),
            "cubic_a": float(ctx.attr(node, "cubic_coeff_a", -0.75)), "antialias": antialias, "exclude": exclude,
            "scales": tuple(scales) if _optional_const(ctx, node, 2, "scales") is not None else None}
    inner = ctx.emit("resize", [x] + tables, ctx.graph.fresh_name(out_name + ".inside") if extrapolated else out_name,
                     {"axes": tuple(axes), "weighted": mode != "nearest", "taps": taps}, name=node.name)
    if not extrapolated:
        return
    # samples outside the input take extrapolation_value: resized * inside + outside * value
    value = float(ctx.attr(node, "extrapolation_value", 0.0))
    dtype = ctx.dtype(x)
    kept = ctx.emit("mul", [inner, ctx.add_constant(out_name + ".inside_mask", (~outside).astype(dtype))],
                    ctx.graph.fresh_name(out_name + ".kept"))
    ctx.emit("add", [kept, ctx.add_constant(out_name + ".outside_value", (outside * value).astype(dtype))],
             out_name, name=node.name + ".extrapolate")


def _crop_boxes(ctx: ImportContext, node, nd: int):
    """tf_crop_and_resize's roi as (start, end) per axis, in fractions of the input (0..1)."""
    roi = _optional_const(ctx, node, 1, "roi")
    axes = [a % nd for a in ctx.attr(node, "axes", list(range(nd)))]
    if roi is None or roi.size != 2 * len(axes):
        raise Unsupported(f"tf_crop_and_resize needs an roi of {2 * len(axes)} values (start and end per axis)")
    roi = np.asarray(roi, np.float64).reshape(-1)
    boxes = [(0.0, 1.0)] * nd
    for k, a in enumerate(axes):
        boxes[a] = (float(roi[k]), float(roi[len(axes) + k]))
    return boxes


def _crop_coordinates(box, out_size: int, in_size: int) -> np.ndarray:
    """Input coordinates of tf_crop_and_resize's output samples along one axis (ONNX's formula)."""
    start, end = box
    if out_size == 1:
        return np.full(1, 0.5 * (start + end) * (in_size - 1))
    y = np.arange(out_size, dtype=np.float64)
    return start * (in_size - 1) + y * (end - start) * (in_size - 1) / (out_size - 1)


@converter("OneHot", since=9)
def one_hot(ctx: ImportContext, node):
    indices, depth, values = node.input[0], node.input[1], node.input[2]
    d = ctx.require_const(node, 1, "depth")
    depth = int(np.asarray(d).reshape(-1)[0])
    if depth < 1:
        raise Unsupported(f"depth {depth}")
    if ctx.dtype(indices) == "bool":
        raise Unsupported("bool indices")
    ctx.emit("one_hot", [indices, values], node.output[0], {"depth": depth, "axis": int(ctx.attr(node, "axis", -1))},
             name=node.name)


@converter("EyeLike", since=9)
def eye_like(ctx: ImportContext, node):
    """A constant: it depends on its input's (static) shape only."""
    shape = ctx.shape(node.input[0])
    if len(shape) != 2:
        raise Unsupported(f"input of rank {len(shape)} (2 expected)")
    dtype = ctx.dtype(node.input[0])
    if ctx.attr(node, "dtype") is not None:
        from .math import _onnx_dtype
        dtype = _onnx_dtype(ctx.attr(node, "dtype"))
    check_size(shape, dtype, f"the result {node.output[0]!r}")
    ctx.set_constant(node.output[0], np.eye(shape[0], shape[1], k=int(ctx.attr(node, "k", 0)), dtype=dtype))


def _space_depth(ctx: ImportContext, node, to_depth: bool):
    """Space <-> depth as reshape, transpose, reshape (ONNX's own definition)."""
    shape = ctx.shape(node.input[0])
    if len(shape) != 4:
        raise Unsupported(f"input of rank {len(shape)} (4 expected)")
    n, c, h, w = shape
    b = int(ctx.attr(node, "blocksize"))
    out = node.output[0]
    dcr = ctx.attr(node, "mode", "DCR") == "DCR"
    if to_depth:
        if h % b or w % b:
            raise Unsupported(f"spatial size {h}x{w} not divisible by blocksize {b}")
        first, last = (n, c, h // b, b, w // b, b), (n, c * b * b, h // b, w // b)
        perm = (0, 3, 5, 1, 2, 4) if dcr else (0, 1, 3, 5, 2, 4)
    else:
        if c % (b * b):
            raise Unsupported(f"{c} channels not divisible by blocksize^2 = {b * b}")
        if dcr:
            first, perm = (n, b, b, c // (b * b), h, w), (0, 3, 4, 1, 5, 2)
        else:
            first, perm = (n, c // (b * b), b, b, h, w), (0, 1, 4, 2, 5, 3)
        last = (n, c // (b * b), h * b, w * b)
    r = ctx.emit("reshape", [node.input[0]], ctx.graph.fresh_name(out + ".split"), {"shape": first})
    t = ctx.emit("transpose", [r], ctx.graph.fresh_name(out + ".perm"), {"perm": perm})
    ctx.emit("reshape", [t], out, {"shape": last}, name=node.name)


@converter("SpaceToDepth", since=1)
def space_to_depth(ctx: ImportContext, node):
    _space_depth(ctx, node, True)


@converter("DepthToSpace", since=1)
def depth_to_space(ctx: ImportContext, node):
    _space_depth(ctx, node, False)


@converter("CenterCropPad", since=18)
def center_crop_pad(ctx: ImportContext, node):
    """Crop (a slice) where the target is smaller, zero-pad where it is larger, both centred."""
    src = list(ctx.shape(node.input[0]))
    nd = len(src)
    target = [int(s) for s in ctx.require_const(node, 1, "shape")]
    axes = [a % nd for a in ctx.attr(node, "axes", list(range(nd)))]
    if len(target) != len(axes):
        raise Unsupported(f"{len(target)} sizes for {len(axes)} axes")
    begin, end, before, after = [0] * nd, list(src), [0] * nd, [0] * nd
    for a, t in zip(axes, target):
        if t < src[a]:
            begin[a] = (src[a] - t) // 2
            end[a] = begin[a] + t
        elif t > src[a]:
            before[a] = (t - src[a]) // 2
            after[a] = t - src[a] - before[a]
    out, x = node.output[0], node.input[0]
    if any(p for p in before + after):
        if begin != [0] * nd or end != src:
            x = ctx.emit("slice", [x], ctx.graph.fresh_name(out + ".crop"),
                         {"begin": tuple(begin), "end": tuple(end), "step": (1,) * nd})
        ctx.emit("pad", [x], out, {"before": tuple(before), "after": tuple(after), "value": 0.0}, name=node.name)
    else:
        ctx.emit("slice", [x], out, {"begin": tuple(begin), "end": tuple(end), "step": (1,) * nd}, name=node.name)


@converter("GatherND", since=11)
def gather_nd(ctx: ImportContext, node):
    ctx.emit("gather_nd", list(node.input[:2]), node.output[0], {"batch_dims": int(ctx.attr(node, "batch_dims", 0))},
             name=node.name)


@converter("ReverseSequence", since=10)
def reverse_sequence(ctx: ImportContext, node):
    ctx.emit("reverse_sequence", list(node.input[:2]), node.output[0],
             {"batch_axis": int(ctx.attr(node, "batch_axis", 1)), "time_axis": int(ctx.attr(node, "time_axis", 0))},
             name=node.name)


@converter("Compress", since=9)
def compress(ctx: ImportContext, node):
    """A gather of the positions where the (constant) condition holds."""
    condition = ctx.require_const(node, 1, "condition").astype(bool).reshape(-1)
    x, out = node.input[0], node.output[0]
    axis = ctx.attr(node, "axis")
    shape = ctx.shape(x)
    if axis is None:
        x = ctx.emit("reshape", [x], ctx.graph.fresh_name(out + ".flat"), {"shape": (int(np.prod(shape)),)})
        axis = 0
    length = ctx.shape(x)[int(axis) % len(ctx.shape(x))]
    picked = np.nonzero(condition[:length])[0].astype(np.int64)
    if picked.size == 0:
        raise Unsupported("the condition selects nothing (empty result)")
    ctx.emit("gather", [x, ctx.add_constant(out + ".indices", picked)], out, {"axis": int(axis)}, name=node.name)


@converter("ScatterElements", since=11)
def scatter_elements(ctx: ImportContext, node):
    ctx.emit("scatter_elements", list(node.input[:3]), node.output[0],
             {"axis": int(ctx.attr(node, "axis", 0)), "reduction": ctx.attr(node, "reduction", "none")},
             name=node.name)


@converter("ScatterND", since=11)
def scatter_nd(ctx: ImportContext, node):
    ctx.emit("scatter_nd", list(node.input[:3]), node.output[0], {"reduction": ctx.attr(node, "reduction", "none")},
             name=node.name)


@converter("TopK", since=10)
def top_k(ctx: ImportContext, node):
    """Indices by ranking, values gathered with them (both outputs may be used)."""
    x = node.input[0]
    k = int(np.asarray(ctx.require_const(node, 1, "K")).reshape(-1)[0])
    axis = int(ctx.attr(node, "axis", -1))
    values_out = node.output[0] if node.output[0] else None
    indices_out = node.output[1] if len(node.output) > 1 and node.output[1] else \
        ctx.graph.fresh_name((values_out or x) + ".topk_indices")
    ctx.emit("topk_indices", [x], indices_out, {"k": k, "axis": axis, "largest": bool(ctx.attr(node, "largest", 1))},
             name=node.name + ".indices")
    if values_out:
        ctx.emit("gather_elements", [x, indices_out], values_out, {"axis": axis}, name=node.name)


@converter("GridSample", since=16)
def grid_sample(ctx: ImportContext, node):
    mode = ctx.attr(node, "mode", "linear" if ctx.opset >= 20 else "bilinear")
    mode = {"bilinear": "linear", "bicubic": "cubic"}.get(mode, mode)
    if not ctx.dtype(node.input[0]).startswith("float"):
        raise Unsupported(f"input of dtype {ctx.dtype(node.input[0])}")
    ctx.emit("grid_sample", list(node.input[:2]), node.output[0],
             {"mode": mode, "padding_mode": ctx.attr(node, "padding_mode", "zeros"),
              "align_corners": bool(ctx.attr(node, "align_corners", 0))}, name=node.name)


def _affine_base_grid(sizes, align_corners: bool) -> np.ndarray:
    """The identity grid in normalized coordinates, x (last axis) first, then a 1: (*sizes, k+1)."""
    axes = []
    for d in sizes:
        if align_corners:
            axes.append(np.arange(-1, 1 + 0.0001, 2.0 / (d - 1)) if d > 1 else np.array([-1.0]))
        else:
            step = 2.0 / d
            axes.append(np.arange(-1 + step / 2, 1, step))
    mesh = np.meshgrid(*axes, indexing="ij")
    return np.stack(list(reversed(mesh)) + [np.ones(tuple(sizes))], axis=-1).astype(np.float32)


@converter("AffineGrid", since=20)
def affine_grid(ctx: ImportContext, node):
    """``grid[n, ..., j] = sum_k theta[n, j, k] * base[..., k]``: an einsum with a constant base grid."""
    size = [int(s) for s in ctx.require_const(node, 1, "size")]
    spatial = size[2:]
    if len(spatial) not in (2, 3):
        raise Unsupported(f"size {size} (2-d or 3-d)")
    if ctx.dtype(node.input[0]) != "float32":
        raise Unsupported(f"theta of dtype {ctx.dtype(node.input[0])}")
    check_size([*spatial, len(spatial) + 1], "float64", f"the base grid of {node.output[0]!r}")
    base = ctx.add_constant(node.output[0] + ".base", _affine_base_grid(spatial, bool(ctx.attr(node, "align_corners", 0))))
    letters = "dhw"[-len(spatial):]
    ctx.emit("einsum", [node.input[0], base], node.output[0], {"equation": f"njk,{letters}k->n{letters}j"},
             name=node.name)


@converter("RotaryEmbedding", since=23)
def rotary_embedding(ctx: ImportContext, node):
    x = node.input[0]
    if not ctx.dtype(x).startswith("float"):
        raise Unsupported(f"input of dtype {ctx.dtype(x)}")
    inputs = [x, node.input[1], node.input[2]] + ([node.input[3]] if len(node.input) > 3 and node.input[3] else [])
    ctx.emit("rotary_embedding", inputs, node.output[0],
             {"interleaved": bool(ctx.attr(node, "interleaved", 0)),
              "rotary_dim": int(ctx.attr(node, "rotary_embedding_dim", 0)),
              "num_heads": int(ctx.attr(node, "num_heads", 0))}, name=node.name)
