"""Converters for ArgMax/ArgMin, Hardmax, CumSum, LogSoftmax, LpNormalization,
MeanVarianceNormalization and RMSNormalization (the last four as small graphs of reductions
and elementwise ops)."""
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


@converter("CumSum", since=11)
def cumsum(ctx: ImportContext, node):
    axis = int(ctx.require_const(node, 1, "axis").reshape(()))
    ctx.emit("cumsum", [node.input[0]], node.output[0],
             {"axis": axis, "exclusive": bool(ctx.attr(node, "exclusive", 0)),
              "reverse": bool(ctx.attr(node, "reverse", 0))}, name=node.name)


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
