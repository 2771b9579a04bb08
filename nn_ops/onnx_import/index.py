"""Converters for indexing and data movement: Gather, GatherElements, Expand, Tile, Trilu, Resize,
and Range / ConstantOfShape (folded at import when their inputs are constants, else refused)."""
from __future__ import annotations

import numpy as np

from ..resize import axis_taps, coefficient_fn, source_coordinates
from .context import ImportContext, Unsupported, converter


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
def generated(ctx: ImportContext, node):
    """Reached only when an input is not a constant (constant ones were folded at import)."""
    dynamic = [i for i in node.input if i and ctx.const(i) is None]
    raise Unsupported(f"input(s) {', '.join(map(repr, dynamic))} must be constants: the output's shape "
                      f"depends on their values")


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
    if coord == "tf_crop_and_resize":
        raise Unsupported("coordinate_transformation_mode='tf_crop_and_resize'")
    if mode == "nearest" and antialias:
        raise Unsupported("antialias with mode='nearest'")
    if mode != "nearest" and not ctx.dtype(x).startswith("float"):
        raise Unsupported(f"{mode} resize of {ctx.dtype(x)} data")
    scales, out_shape = _output_sizes(ctx, node, in_shape)
    coeffs = coefficient_fn(mode, ctx.attr(node, "nearest_mode", "round_prefer_floor"),
                            float(ctx.attr(node, "cubic_coeff_a", -0.75)), antialias)
    exclude = bool(ctx.attr(node, "exclude_outside", 0))
    axes, tables = [], []
    for a, (d, o, s) in enumerate(zip(in_shape, out_shape, scales)):
        if o == d and abs(s - 1.0) < 1e-12:
            continue
        if o < 1:
            raise Unsupported(f"output size {o} along axis {a}")
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
    ctx.emit("resize", [x] + tables, out_name, {"axes": tuple(axes), "weighted": mode != "nearest"}, name=node.name)
