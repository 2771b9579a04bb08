"""Converters for ArgMax/ArgMin, Hardmax, CumSum/CumProd, Einsum, LogSoftmax, LpNormalization,
MeanVarianceNormalization, RMSNormalization, InstanceNormalization and GroupNormalization (the
normalizations as small graphs of reductions and elementwise ops)."""
from __future__ import annotations

import numpy as np

from .context import ImportContext, Unsupported, converter


def _arg(kind):
    def convert(ctx: ImportContext, node):
        if ctx.dtype(node.input[0]) == "bool":
            raise Unsupported(f"{node.op_type} of a bool tensor")
        attrs = {"axis": int(ctx.attr(node, "axis", 0)), "kind": kind, "keepdims": bool(ctx.attr(node, "keepdims", 1)),
                 "select_last": bool(ctx.attr(node, "select_last_index", 0))}
        ctx.emit("arg_reduce", [node.input[0]], node.output[0], attrs, name=node.name)
    return convert


converter("ArgMax", since=1)(_arg("max"))
converter("ArgMin", since=1)(_arg("min"))


@converter("Hardmax", since=13)
def hardmax(ctx: ImportContext, node):
    ctx.emit("hardmax", [node.input[0]], node.output[0], {"axis": int(ctx.attr(node, "axis", -1))}, name=node.name)


def _cumulative(kind):
    def convert(ctx: ImportContext, node):
        axis = int(ctx.require_const(node, 1, "axis").reshape(()))
        ctx.emit("cumsum", [node.input[0]], node.output[0],
                 {"axis": axis, "exclusive": bool(ctx.attr(node, "exclusive", 0)),
                  "reverse": bool(ctx.attr(node, "reverse", 0)), "kind": kind}, name=node.name)
    return convert


converter("CumSum", since=11)(_cumulative("sum"))
converter("CumProd", since=26)(_cumulative("prod"))


def _tmp(ctx, out, tag):
    return ctx.graph.fresh_name(f"{out}.{tag}")


def _float_input(ctx, node):
    if not ctx.dtype(node.input[0]).startswith("float"):
        raise Unsupported(f"input of dtype {ctx.dtype(node.input[0])} (float expected)")


def emit_log_softmax(ctx: ImportContext, x: str, out: str, axis: int, name: str = "") -> str:
    """``(x - m) - log(sum(exp(x - m)))`` with ``m`` the maximum along ``axis``."""
    axes = (axis,)
    m = ctx.emit("reduce", [x], _tmp(ctx, out, "max"), {"axes": axes, "kind": "max", "keepdims": True})
    shifted = ctx.emit("sub", [x, m], _tmp(ctx, out, "shift"))
    s = ctx.emit("reduce", [ctx.emit("exp", [shifted], _tmp(ctx, out, "exp"))], _tmp(ctx, out, "sum"),
                 {"axes": axes, "kind": "sum", "keepdims": True})
    return ctx.emit("sub", [shifted, ctx.emit("log", [s], _tmp(ctx, out, "log"))], out, name=name)


@converter("LogSoftmax", since=13)
def log_softmax(ctx: ImportContext, node):
    _float_input(ctx, node)
    emit_log_softmax(ctx, node.input[0], node.output[0], int(ctx.attr(node, "axis", -1)), node.name)


@converter("LpNormalization", since=1)
def lp_normalization(ctx: ImportContext, node):
    _float_input(ctx, node)
    x, out = node.input[0], node.output[0]
    p = int(ctx.attr(node, "p", 2))
    if p not in (1, 2):
        raise Unsupported(f"p={p} (1 or 2)")
    axes = (int(ctx.attr(node, "axis", -1)),)
    if p == 1:
        norm = ctx.emit("reduce", [ctx.emit("abs", [x], _tmp(ctx, out, "abs"))], _tmp(ctx, out, "norm"),
                        {"axes": axes, "kind": "sum", "keepdims": True})
    else:
        sq = ctx.emit("reduce", [ctx.emit("mul", [x, x], _tmp(ctx, out, "sq"))], _tmp(ctx, out, "sumsq"),
                      {"axes": axes, "kind": "sum", "keepdims": True})
        norm = ctx.emit("sqrt", [sq], _tmp(ctx, out, "norm"))
    ctx.emit("div_or_zero", [x, norm], out, name=node.name)     # a zero norm gives 0, not NaN


@converter("MeanVarianceNormalization", since=13)
def mean_variance_normalization(ctx: ImportContext, node):
    """``(x - mean) / (sqrt(mean(x^2) - mean^2) + 1e-9)`` over ``axes`` (ONNX's definition)."""
    _float_input(ctx, node)
    x, out = node.input[0], node.output[0]
    axes = tuple(int(a) for a in ctx.attr(node, "axes", [0, 2, 3]))
    mean = {"axes": axes, "kind": "mean", "keepdims": True}
    mu = ctx.emit("reduce", [x], _tmp(ctx, out, "mean"), mean)
    ex2 = ctx.emit("reduce", [ctx.emit("mul", [x, x], _tmp(ctx, out, "sq"))], _tmp(ctx, out, "ex2"), mean)
    var = ctx.emit("sub", [ex2, ctx.emit("mul", [mu, mu], _tmp(ctx, out, "mu2"))], _tmp(ctx, out, "var"))
    eps = ctx.add_constant(out + ".eps", np.array(1e-9, ctx.dtype(x)))
    std = ctx.emit("add", [ctx.emit("sqrt", [var], _tmp(ctx, out, "std0")), eps], _tmp(ctx, out, "std"))
    ctx.emit("div", [ctx.emit("sub", [x, mu], _tmp(ctx, out, "centered")), std], out, name=node.name)


@converter("RMSNormalization", since=23)
def rms_normalization(ctx: ImportContext, node):
    """``x / sqrt(mean(x^2 over axis..last) + epsilon) * scale``."""
    _float_input(ctx, node)
    if int(ctx.attr(node, "stash_type", 1)) != 1:
        raise Unsupported("stash_type other than 1 (float32)")
    x, scale, out = node.input[0], node.input[1], node.output[0]
    nd = len(ctx.shape(x))
    axis = int(ctx.attr(node, "axis", -1)) % nd
    ms = ctx.emit("reduce", [ctx.emit("mul", [x, x], _tmp(ctx, out, "sq"))], _tmp(ctx, out, "ms"),
                  {"axes": tuple(range(axis, nd)), "kind": "mean", "keepdims": True})
    eps = ctx.add_constant(out + ".eps", np.array(float(ctx.attr(node, "epsilon", 1e-5)), ctx.dtype(x)))
    rms = ctx.emit("sqrt", [ctx.emit("add", [ms, eps], _tmp(ctx, out, "mse"))], _tmp(ctx, out, "rms"))
    ctx.emit("mul", [ctx.emit("div", [x, rms], _tmp(ctx, out, "normed")), scale], out, name=node.name)


def _standardize(ctx: ImportContext, x: str, out: str, axes, eps: float) -> str:
    """``(x - mean) / sqrt(var + eps)`` over ``axes`` (biased variance)."""
    mean = {"axes": tuple(axes), "kind": "mean", "keepdims": True}
    centered = ctx.emit("sub", [x, ctx.emit("reduce", [x], _tmp(ctx, out, "mean"), mean)], _tmp(ctx, out, "centered"))
    var = ctx.emit("reduce", [ctx.emit("mul", [centered, centered], _tmp(ctx, out, "sq"))], _tmp(ctx, out, "var"), mean)
    eps_name = ctx.add_constant(out + ".eps", np.array(eps, ctx.dtype(x)))
    std = ctx.emit("sqrt", [ctx.emit("add", [var, eps_name], _tmp(ctx, out, "var_eps"))], _tmp(ctx, out, "std"))
    return ctx.emit("div", [centered, std], _tmp(ctx, out, "normed"))


def _scale_shift(ctx: ImportContext, node, normed: str, rank: int):
    """``normed * scale + bias`` with per-channel (axis 1) scale and bias."""
    out = node.output[0]
    per_channel = tuple(ctx.shape(node.input[1])) + (1,) * (rank - 2)
    scale = ctx.emit("reshape", [node.input[1]], _tmp(ctx, out, "scale"), {"shape": per_channel})
    bias = ctx.emit("reshape", [node.input[2]], _tmp(ctx, out, "bias"), {"shape": per_channel})
    ctx.emit("add", [ctx.emit("mul", [normed, scale], _tmp(ctx, out, "scaled")), bias], out, name=node.name)


def _channel_params(ctx: ImportContext, node, channels: int):
    for k in (1, 2):
        if tuple(ctx.shape(node.input[k])) != (channels,):
            raise Unsupported(f"input {k} of shape {ctx.shape(node.input[k])} ({channels} channels expected)")


@converter("InstanceNormalization", since=6)
def instance_normalization(ctx: ImportContext, node):
    _float_input(ctx, node)
    shape = ctx.shape(node.input[0])
    if len(shape) < 3:
        raise Unsupported(f"input of rank {len(shape)}")
    _channel_params(ctx, node, shape[1])
    normed = _standardize(ctx, node.input[0], node.output[0], range(2, len(shape)),
                          float(ctx.attr(node, "epsilon", 1e-5)))
    _scale_shift(ctx, node, normed, len(shape))


@converter("GroupNormalization", since=21)
def group_normalization(ctx: ImportContext, node):
    _float_input(ctx, node)
    x, out = node.input[0], node.output[0]
    shape = ctx.shape(x)
    groups = int(ctx.attr(node, "num_groups"))
    if len(shape) < 3 or shape[1] % groups:
        raise Unsupported(f"{groups} groups for input of shape {shape}")
    if int(ctx.attr(node, "stash_type", 1)) != 1:
        raise Unsupported("stash_type other than 1 (float32)")
    _channel_params(ctx, node, shape[1])
    grouped = ctx.emit("reshape", [x], _tmp(ctx, out, "grouped"),
                       {"shape": (shape[0], groups, int(np.prod(shape[1:])) // groups)})
    normed = _standardize(ctx, grouped, out, (2,), float(ctx.attr(node, "epsilon", 1e-5)))
    back = ctx.emit("reshape", [normed], _tmp(ctx, out, "ungrouped"), {"shape": tuple(shape)})
    _scale_shift(ctx, node, back, len(shape))


@converter("Einsum", since=12)
def einsum(ctx: ImportContext, node):
    ctx.emit("einsum", list(node.input), node.output[0], {"equation": str(ctx.attr(node, "equation"))},
             name=node.name)


@converter("LRN", since=1)
def lrn(ctx: ImportContext, node):
    _float_input(ctx, node)
    ctx.emit("lrn", [node.input[0]], node.output[0],
             {"size": int(ctx.attr(node, "size")), "alpha": float(ctx.attr(node, "alpha", 1e-4)),
              "beta": float(ctx.attr(node, "beta", 0.75)), "bias": float(ctx.attr(node, "bias", 1.0))},
             name=node.name)


@converter("LpPool", since=11)
def lp_pool(ctx: ImportContext, node):
    """``(sum over the window of |x|^p) ** (1/p)``, the sum as ``kernel_size * avg_pool`` with
    padding counted (padded zeros add nothing)."""
    from .nn import _as_rows, _from_rows, _pool_1d_attrs, _pool_3d, _pool_common
    _float_input(ctx, node)
    x, out = node.input[0], node.output[0]
    p = float(ctx.attr(node, "p", 2))
    powered = ctx.emit("pow_const", [ctx.emit("abs", [x], _tmp(ctx, out, "abs"))], _tmp(ctx, out, "pow"),
                       {"exponent": p})
    rank = len(ctx.shape(x))
    if rank == 5:     # 3-d: two 2-d pools (see nn._pool_3d)
        avg = _pool_3d(ctx, node, "avg_pool2d", {"count_include_pad": True}, source=powered,
                       out=_tmp(ctx, out, "avg"))
    elif rank == 3:   # 1-d: a 2-d pool on rows of height 1
        attrs = dict(_pool_1d_attrs(ctx, node), count_include_pad=True)
        avg = _from_rows(ctx, node, "avg_pool2d", [_as_rows(ctx, powered)], attrs, out=_tmp(ctx, out, "avg"))
    else:
        attrs = dict(_pool_common(ctx, node, "Lp pooling"), count_include_pad=True)
        avg = ctx.emit("avg_pool2d", [powered], _tmp(ctx, out, "avg"), attrs)
    count = ctx.add_constant(out + ".count", np.array(float(np.prod(ctx.attr(node, "kernel_shape"))), ctx.dtype(x)))
    total = ctx.emit("mul", [avg, count], _tmp(ctx, out, "sum"))
    ctx.emit("pow_const", [total], out, {"exponent": 1.0 / p}, name=node.name)


@converter("DynamicQuantizeLinear", since=11)
def dynamic_quantize_linear(ctx: ImportContext, node):
    """uint8 quantization with a scale and zero point from the input's range (including 0)."""
    x = node.input[0]
    if ctx.dtype(x) != "float32":
        raise Unsupported(f"input of dtype {ctx.dtype(x)}")
    y, scale_out, zp_out = (list(node.output) + ["", ""])[:3]
    base = y or scale_out or zp_out
    everything = {"axes": tuple(range(len(ctx.shape(x)))), "keepdims": False}

    def const(tag, value):
        return ctx.add_constant(f"{base}.{tag}", np.array(value, np.float32))

    lo = ctx.emit("min", [ctx.emit("reduce", [x], _tmp(ctx, base, "min"), {**everything, "kind": "min"}),
                          const("zero", 0.0)], _tmp(ctx, base, "lo"))
    hi = ctx.emit("max", [ctx.emit("reduce", [x], _tmp(ctx, base, "max"), {**everything, "kind": "max"}),
                          const("zero2", 0.0)], _tmp(ctx, base, "hi"))
    span = ctx.emit("sub", [hi, lo], _tmp(ctx, base, "span"))
    flat = ctx.emit("equal", [hi, lo], _tmp(ctx, base, "flat"))
    span = ctx.emit("where", [flat, const("one", 1.0), span], _tmp(ctx, base, "span1"))
    scale = ctx.emit("div", [span, const("levels", 255.0)], scale_out or _tmp(ctx, base, "scale"))
    zp_f = ctx.emit("sub", [const("qmin", 0.0), ctx.emit("div", [lo, scale], _tmp(ctx, base, "lo_s"))],
                    _tmp(ctx, base, "zp_f"))
    zp_r = ctx.emit("round", [ctx.emit("clip", [zp_f], _tmp(ctx, base, "zp_c"), {"min": 0.0, "max": 255.0})],
                    _tmp(ctx, base, "zp_r"))
    zp = ctx.emit("cast", [zp_r], zp_out or _tmp(ctx, base, "zp"), {"to": "uint8"})
    if y:
        ctx.emit("quantize", [x, scale, zp], y, {"to": "uint8", "axis": 1, "block_size": 0}, name=node.name)
