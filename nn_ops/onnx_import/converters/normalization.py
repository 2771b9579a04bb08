"""Converters for the normalizations: LogSoftmax, LpNormalization, MeanVarianceNormalization,
RMSNormalization, InstanceNormalization, GroupNormalization and LRN (all but LRN as small graphs of
reductions and elementwise ops)."""
from __future__ import annotations

import numpy as np

from ..context import ImportContext, Unsupported, converter




def emit_log_softmax(ctx: ImportContext, x: str, out: str, axis: int, name: str = "") -> str:
    """``(x - m) - log(sum(exp(x - m)))`` with ``m`` the maximum along ``axis``."""
    axes = (axis,)
    m = ctx.emit("reduce", [x], ctx.temp(out, "max"), {"axes": axes, "kind": "max", "keepdims": True})
    shifted = ctx.emit("sub", [x, m], ctx.temp(out, "shift"))
    s = ctx.emit("reduce", [ctx.emit("exp", [shifted], ctx.temp(out, "exp"))], ctx.temp(out, "sum"),
                 {"axes": axes, "kind": "sum", "keepdims": True})
    return ctx.emit("sub", [shifted, ctx.emit("log", [s], ctx.temp(out, "log"))], out, name=name)


@converter("LogSoftmax", since=13)
def log_softmax(ctx: ImportContext, node):
    ctx.require_float_input(node)
    emit_log_softmax(ctx, node.input[0], node.output[0], int(ctx.attr(node, "axis", -1)), node.name)


@converter("LpNormalization", since=1)
def lp_normalization(ctx: ImportContext, node):
    ctx.require_float_input(node)
    x, out = node.input[0], node.output[0]
    p = int(ctx.attr(node, "p", 2))
    if p not in (1, 2):
        raise Unsupported(f"p={p} (1 or 2)")
    axes = (int(ctx.attr(node, "axis", -1)),)
    if p == 1:
        norm = ctx.emit("reduce", [ctx.emit("abs", [x], ctx.temp(out, "abs"))], ctx.temp(out, "norm"),
                        {"axes": axes, "kind": "sum", "keepdims": True})
    else:
        sq = ctx.emit("reduce", [ctx.emit("mul", [x, x], ctx.temp(out, "sq"))], ctx.temp(out, "sumsq"),
                      {"axes": axes, "kind": "sum", "keepdims": True})
        norm = ctx.emit("sqrt", [sq], ctx.temp(out, "norm"))
    ctx.emit("div_or_zero", [x, norm], out, name=node.name)     # a zero norm gives 0, not NaN


@converter("MeanVarianceNormalization", since=13)
def mean_variance_normalization(ctx: ImportContext, node):
    """``(x - mean) / (sqrt(mean(x^2) - mean^2) + 1e-9)`` over ``axes`` (ONNX's definition)."""
    ctx.require_float_input(node)
    x, out = node.input[0], node.output[0]
    axes = tuple(int(a) for a in ctx.attr(node, "axes", [0, 2, 3]))
    mean = {"axes": axes, "kind": "mean", "keepdims": True}
    mu = ctx.emit("reduce", [x], ctx.temp(out, "mean"), mean)
    ex2 = ctx.emit("reduce", [ctx.emit("mul", [x, x], ctx.temp(out, "sq"))], ctx.temp(out, "ex2"), mean)
    var = ctx.emit("sub", [ex2, ctx.emit("mul", [mu, mu], ctx.temp(out, "mu2"))], ctx.temp(out, "var"))
    eps = ctx.add_constant(out + ".eps", np.array(1e-9, ctx.dtype(x)))
    std = ctx.emit("add", [ctx.emit("sqrt", [var], ctx.temp(out, "std0")), eps], ctx.temp(out, "std"))
    ctx.emit("div", [ctx.emit("sub", [x, mu], ctx.temp(out, "centered")), std], out, name=node.name)


@converter("RMSNormalization", since=23)
def rms_normalization(ctx: ImportContext, node):
    """``x / sqrt(mean(x^2 over axis..last) + epsilon) * scale``."""
    ctx.require_float_input(node)
    if int(ctx.attr(node, "stash_type", 1)) != 1:
        raise Unsupported("stash_type other than 1 (float32)")
    x, scale, out = node.input[0], node.input[1], node.output[0]
    nd = len(ctx.shape(x))
    axis = int(ctx.attr(node, "axis", -1)) % nd
    ms = ctx.emit("reduce", [ctx.emit("mul", [x, x], ctx.temp(out, "sq"))], ctx.temp(out, "ms"),
                  {"axes": tuple(range(axis, nd)), "kind": "mean", "keepdims": True})
    eps = ctx.add_constant(out + ".eps", np.array(float(ctx.attr(node, "epsilon", 1e-5)), ctx.dtype(x)))
    rms = ctx.emit("sqrt", [ctx.emit("add", [ms, eps], ctx.temp(out, "mse"))], ctx.temp(out, "rms"))
    ctx.emit("mul", [ctx.emit("div", [x, rms], ctx.temp(out, "normed")), scale], out, name=node.name)


def _standardize(ctx: ImportContext, x: str, out: str, axes, eps: float) -> str:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (biased variance)."""
    mean = {"axes": tuple(axes), "kind": "mean", "keepdims": True}
    centered = ctx.emit("sub", [x, ctx.emit("reduce", [x], ctx.temp(out, "mean"), mean)], ctx.temp(out, "centered"))
    var = ctx.emit("reduce", [ctx.emit("mul", [centered, centered], ctx.temp(out, "sq"))], ctx.temp(out, "var"), mean)
    eps_name = ctx.add_constant(out + ".eps", np.array(eps, ctx.dtype(x)))
    std = ctx.emit("sqrt", [ctx.emit("add", [var, eps_name], ctx.temp(out, "var_eps"))], ctx.temp(out, "std"))
    return ctx.emit("div", [centered, std], ctx.temp(out, "normed"))


def _scale_shift(ctx: ImportContext, node, normed: str, rank: int, out: str = None) -> str:
    """``normed * scale + bias`` with per-channel (axis 1) scale and bias, into ``out`` (default: the
    node's output)."""
    out = out or node.output[0]
    per_channel = tuple(ctx.shape(node.input[1])) + (1,) * (rank - 2)
    scale = ctx.emit("reshape", [node.input[1]], ctx.temp(out, "scale"), {"shape": per_channel})
    bias = ctx.emit("reshape", [node.input[2]], ctx.temp(out, "bias"), {"shape": per_channel})
    return ctx.emit("add", [ctx.emit("mul", [normed, scale], ctx.temp(out, "scaled")), bias], out, name=node.name)


def _channel_params(ctx: ImportContext, node, channels: int):
    for k in (1, 2):
        if tuple(ctx.shape(node.input[k])) != (channels,):
            raise Unsupported(f"input {k} of shape {ctx.shape(node.input[k])} ({channels} channels expected)")


@converter("InstanceNormalization", since=6)
def instance_normalization(ctx: ImportContext, node):
    ctx.require_float_input(node)
    shape = ctx.shape(node.input[0])
    if len(shape) < 3:
        raise Unsupported(f"input of rank {len(shape)}")
    _channel_params(ctx, node, shape[1])
    x, out, rank = node.input[0], node.output[0], len(shape)
    if rank == 3 and all(isinstance(d, int) for d in shape):
        # a 1-d map normalised as rows of height 1, the form Conv1d runs in (``nn._as_rows``): the
        # reshapes between them then cancel, and the statistics and scaling stay in the conv's
        # blocked layout (wav2vec2's first conv: from_blocked and to_blocked, 0.67 ms, gone)
        x, rank = ctx.emit("reshape", [x], ctx.temp(out, "rows"), {"shape": (shape[0], shape[1], 1, shape[2])}), 4
    normed = _standardize(ctx, x, out, range(2, rank), float(ctx.attr(node, "epsilon", 1e-5)))
    if rank == len(shape):
        _scale_shift(ctx, node, normed, rank)
        return
    rows = _scale_shift(ctx, node, normed, rank, ctx.temp(out, "rows_out"))
    ctx.emit("reshape", [rows], out, {"shape": tuple(shape)}, name=node.name + ".1d")


@converter("GroupNormalization", since=21)
def group_normalization(ctx: ImportContext, node):
    ctx.require_float_input(node)
    x, out = node.input[0], node.output[0]
    shape = ctx.shape(x)
    groups = int(ctx.attr(node, "num_groups"))
    if len(shape) < 3 or shape[1] % groups:
        raise Unsupported(f"{groups} groups for input of shape {shape}")
    if int(ctx.attr(node, "stash_type", 1)) != 1:
        raise Unsupported("stash_type other than 1 (float32)")
    _channel_params(ctx, node, shape[1])
    grouped = ctx.emit("reshape", [x], ctx.temp(out, "grouped"),
                       {"shape": (shape[0], groups, int(np.prod(shape[1:])) // groups)})
    normed = _standardize(ctx, grouped, out, (2,), float(ctx.attr(node, "epsilon", 1e-5)))
    back = ctx.emit("reshape", [normed], ctx.temp(out, "ungrouped"), {"shape": tuple(shape)})
    _scale_shift(ctx, node, back, len(shape))


@converter("LRN", since=1)
def lrn(ctx: ImportContext, node):
    ctx.require_float_input(node)
    ctx.emit("lrn", [node.input[0]], node.output[0],
             {"size": int(ctx.attr(node, "size")), "alpha": float(ctx.attr(node, "alpha", 1e-4)),
              "beta": float(ctx.attr(node, "beta", 0.75)), "bias": float(ctx.attr(node, "bias", 1.0))},
             name=node.name)
