"""Converters for NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (inference: the loss value).

The per-element loss and weight come from the ``nll_terms`` / ``nll_weights`` ops (a
gather by the run-time target); ``reduction`` is a reduce node: ``sum``, or ``mean``
as sum(terms) / sum(weights), which is ONNX's weighted mean.
"""
from __future__ import annotations

from ..context import ImportContext, Unsupported, converter
from .normalization import emit_log_softmax


def _emit_nll(ctx: ImportContext, node, x: str):
    target, out = node.input[1], node.output[0]
    weight = node.input[2] if len(node.input) > 2 and node.input[2] else None
    reduction = ctx.attr(node, "reduction", "mean")
    if reduction not in ("none", "sum", "mean"):
        raise Unsupported(f"reduction={reduction!r}")
    if not ctx.dtype(x).startswith("float"):
        raise Unsupported(f"input of dtype {ctx.dtype(x)}")
    ignore = ctx.attr(node, "ignore_index")
    attrs = {"ignore_index": None if ignore is None else int(ignore)}
    inputs = [x, target] + ([weight] if weight else [])
    if reduction == "none":
        ctx.emit("nll_terms", inputs, out, attrs, name=node.name)
        return
    terms = ctx.emit("nll_terms", inputs, ctx.graph.fresh_name(out + ".terms"), attrs)
    everything = {"axes": tuple(range(len(ctx.shape(terms)))), "kind": "sum", "keepdims": False}
    if reduction == "sum":
        ctx.emit("reduce", [terms], out, everything, name=node.name)
        return
    total = ctx.emit("reduce", [terms], ctx.graph.fresh_name(out + ".sum"), everything)
    weights = ctx.emit("nll_weights", inputs, ctx.graph.fresh_name(out + ".weights"), attrs)
    count = ctx.emit("reduce", [weights], ctx.graph.fresh_name(out + ".count"), everything)
    ctx.emit("div", [total, count], out, name=node.name)


@converter("NegativeLogLikelihoodLoss", since=13)
def negative_log_likelihood_loss(ctx: ImportContext, node):
    _emit_nll(ctx, node, node.input[0])


@converter("SoftmaxCrossEntropyLoss", since=13)
def softmax_cross_entropy_loss(ctx: ImportContext, node):
    """NLL of the log-softmax over the class axis (1); the optional second output is the log-softmax."""
    x = node.input[0]
    if not ctx.dtype(x).startswith("float"):
        raise Unsupported(f"input of dtype {ctx.dtype(x)}")
    log_prob = node.output[1] if len(node.output) > 1 and node.output[1] else \
        ctx.graph.fresh_name(node.output[0] + ".log_prob")
    emit_log_softmax(ctx, x, log_prob, 1)
    _emit_nll(ctx, node, log_prob)
