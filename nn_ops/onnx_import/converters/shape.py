"""Converters for shape manipulation: Reshape, Flatten, Squeeze/Unsqueeze, Transpose, Concat, Pad."""
from __future__ import annotations

import numpy as np

from ..context import ImportContext, Unsupported, converter


def _reshape_to(ctx, node, shape):
    ctx.emit("reshape", [node.input[0]], node.output[0], {"shape": tuple(int(d) for d in shape)}, name=node.name)


@converter("Reshape", since=5)
def reshape(ctx: ImportContext, node):
    src = ctx.shape(node.input[0])
    target = [int(d) for d in ctx.require_const(node, 1, "shape")]
    allowzero = int(ctx.attr(node, "allowzero", 0))
    shape = [src[k] if d == 0 and not allowzero else d for k, d in enumerate(target)]
    if shape.count(-1) > 1:
        raise Unsupported(f"shape {target} has more than one -1")
    if -1 in shape:
        known = int(np.prod([d for d in shape if d != -1]))
        shape[shape.index(-1)] = int(np.prod(src)) // max(1, known)
    if int(np.prod(shape)) != int(np.prod(src)):
        raise Unsupported(f"cannot reshape {src} to {target}")
    _reshape_to(ctx, node, shape)


@converter("Flatten", since=1)
def flatten(ctx: ImportContext, node):
    src = ctx.shape(node.input[0])
    axis = int(ctx.attr(node, "axis", 1))
    axis = axis + len(src) if axis < 0 else axis
    _reshape_to(ctx, node, (int(np.prod(src[:axis])), int(np.prod(src[axis:]))))


def _axes_of(ctx, node):
    if len(node.input) > 1 and node.input[1]:
        return [int(a) for a in ctx.require_const(node, 1, "axes")]
    return list(ctx.attr(node, "axes", []))


@converter("Squeeze", since=1)
def squeeze(ctx: ImportContext, node):
    src = ctx.shape(node.input[0])
    axes = [a + len(src) if a < 0 else a for a in _axes_of(ctx, node)] or [k for k, d in enumerate(src) if d == 1]
    _reshape_to(ctx, node, [d for k, d in enumerate(src) if k not in axes])


@converter("Unsqueeze", since=1)
def unsqueeze(ctx: ImportContext, node):
    shape = list(ctx.shape(node.input[0]))
    axes = _axes_of(ctx, node)
    nd = len(shape) + len(axes)
    for a in sorted(a + nd if a < 0 else a for a in axes):
        shape.insert(a, 1)
    _reshape_to(ctx, node, shape)


@converter("Transpose", since=1)
def transpose(ctx: ImportContext, node):
    nd = len(ctx.shape(node.input[0]))
    perm = list(ctx.attr(node, "perm", list(reversed(range(nd)))))
    ctx.emit("transpose", [node.input[0]], node.output[0], {"perm": tuple(perm)}, name=node.name)


@converter("Concat", since=4)
def concat(ctx: ImportContext, node):
    ctx.emit("concat", list(node.input), node.output[0], {"axis": int(ctx.attr(node, "axis"))}, name=node.name)


@converter("Pad", since=11)
def pad(ctx: ImportContext, node):
    mode = ctx.attr(node, "mode", "constant")
    if mode not in ("constant", "edge", "reflect", "wrap"):
        raise Unsupported(f"mode={mode!r}")
    pads = [int(p) for p in ctx.require_const(node, 1, "pads")]
    value = 0.0
    if len(node.input) > 2 and node.input[2]:
        given = ctx.require_const(node, 2, "constant_value")
        if given.size != 1 or given.dtype.kind not in "biuf":
            raise Unsupported(f"constant_value must be one number, got {given.size} values of dtype {given.dtype}")
        value = float(given.reshape(()))
    nd = len(ctx.shape(node.input[0]))
    if len(node.input) > 3 and node.input[3]:
        axes = [int(a) for a in ctx.require_const(node, 3, "axes")]
        if len(pads) != 2 * len(axes):
            raise Unsupported(f"{len(pads)} pads for {len(axes)} axes")
        before, after = pads[:len(axes)], pads[len(axes):]
        b, a = [0] * nd, [0] * nd
        for k, ax in enumerate(axes):
            b[ax % nd], a[ax % nd] = before[k], after[k]
        before, after = b, a
    else:
        before, after = pads[:nd], pads[nd:]
    if any(p < 0 for p in before + after):
        raise Unsupported("negative pads")
    if mode != "constant":
        ctx.emit("pad_index", [node.input[0]], node.output[0],
                 {"before": tuple(before), "after": tuple(after), "mode": mode}, name=node.name)
        return
    ctx.emit("pad", [node.input[0]], node.output[0], {"before": tuple(before), "after": tuple(after), "value": value},
             name=node.name)
