"""Graph ops for comparisons, logic, casts, integer arithmetic, math activations, gathers, resize,
argmax/argmin, one-hot, cumulative sums, (de)quantization and the parts of the NLL loss.

Registered into :data:`graph_ops.OPS` (imported at the end of graph_ops.py); the
computations live in logic_ops, math_ops, index_ops, resize, arg_reduce, cumsum, quantize and loss_ops.
"""
from __future__ import annotations

from .graph_ops import OPS, OpDef
from . import (arg_reduce, cumsum, einsum, grid_sample, index_ops, logic_ops, loss_ops, lrn, math_ops, quantize,
               resize, rotary, scatter, topk)


def _register(name: str, kind: str, build) -> None:
    OPS[name] = OpDef(build, kind)


for _op in logic_ops.COMPARE:
    _register(_op, "injective", (lambda op: lambda i, a: logic_ops.compare(op, i[0], i[1]))(_op))
for _op in logic_ops.LOGICAL:
    _register(_op, "injective", (lambda op: lambda i, a: logic_ops.logical(op, i[0], i[1]))(_op))
_register("not", "injective", lambda i, a: logic_ops.logical_not_(i[0]))
_register("where", "injective", lambda i, a: logic_ops.where(i[0], i[1], i[2]))

for _op in math_ops.UNARY:
    _register(_op, "injective", (lambda op: lambda i, a: math_ops.math_unary(op, i[0], a))(_op))
for _op in math_ops.BINARY:
    _register(_op, "injective", (lambda op: lambda i, a: math_ops.math_binary(op, i[0], i[1]))(_op))
_register("isnan", "injective", lambda i, a: math_ops.is_nan(i[0]))
_register("isinf", "injective", lambda i, a: math_ops.is_inf(i[0], a.get("positive", True), a.get("negative", True)))
_register("cast", "injective", lambda i, a: math_ops.cast_to(i[0], a["to"]))

_register("gather", "injective",
          lambda i, a: index_ops.gather(i[0], i[1] if len(i) > 1 else a["index"], a.get("axis", 0)))
_register("gather_elements", "injective", lambda i, a: index_ops.gather_elements(i[0], i[1], a.get("axis", 0)))
_register("expand", "injective", lambda i, a: index_ops.expand(i[0], a["shape"]))
_register("tile", "injective", lambda i, a: index_ops.tile(i[0], a["repeats"]))
_register("trilu", "injective", lambda i, a: index_ops.trilu(i[0], a.get("upper", True), a.get("k", 0)))
_register("resize", "injective", lambda i, a: resize.resize_taps(i[0], a["axes"], i[1:], a["weighted"]))
_register("one_hot", "injective", lambda i, a: index_ops.one_hot(i[0], i[1], a["depth"], a.get("axis", -1)))
_register("arg_reduce", "reduce", lambda i, a: arg_reduce.arg_reduce(i[0], a["axis"], a["kind"], a["keepdims"],
                                                                      a.get("select_last", False)))
_register("hardmax", "reduce", lambda i, a: arg_reduce.hardmax(i[0], a.get("axis", -1)))
_register("cumsum", "reduce", lambda i, a: cumsum.cumsum(i[0], a["axis"], a.get("exclusive", False),
                                                         a.get("reverse", False), kind=a.get("kind", "sum")))
_register("nll_terms", "injective", lambda i, a: loss_ops.nll_terms(i[0], i[1], i[2] if len(i) > 2 else None,
                                                                    a.get("ignore_index")))
_register("nll_weights", "injective", lambda i, a: loss_ops.nll_weights(i[0], i[1], i[2] if len(i) > 2 else None,
                                                                        a.get("ignore_index")))
_register("gather_nd", "injective", lambda i, a: index_ops.gather_nd(i[0], i[1], a.get("batch_dims", 0)))
_register("reverse_sequence", "injective", lambda i, a: index_ops.reverse_sequence(i[0], i[1], a["batch_axis"],
                                                                                    a["time_axis"]))
_register("dequantize", "injective", lambda i, a: quantize.dequantize(i[0], i[1], i[2] if len(i) > 2 else None,
                                                                      a.get("axis", 1), a.get("block_size", 0)))
_register("quantize", "injective", lambda i, a: quantize.quantize(i[0], i[1], i[2] if len(i) > 2 else None, a["to"],
                                                                  a.get("axis", 1), a.get("block_size", 0)))
_register("pad_index", "injective", lambda i, a: index_ops.pad_index(i[0], a["before"], a["after"], a["mode"]))
_register("scatter_elements", "reduce", lambda i, a: scatter.scatter_elements(i[0], i[1], i[2], a.get("axis", 0),
                                                                              a.get("reduction", "none")))
_register("scatter_nd", "reduce", lambda i, a: scatter.scatter_nd(i[0], i[1], i[2], a.get("reduction", "none")))
_register("topk_indices", "reduce", lambda i, a: topk.topk_indices(i[0], a["k"], a.get("axis", -1),
                                                                   a.get("largest", True)))
_register("einsum", "reduce", lambda i, a: einsum.einsum(a["equation"], i))
_register("grid_sample", "injective", lambda i, a: grid_sample.grid_sample(i[0], i[1], a["mode"], a["padding_mode"],
                                                                           a["align_corners"]))
_register("lrn", "reduce", lambda i, a: lrn.lrn(i[0], a["size"], a["alpha"], a["beta"], a["bias"]))
_register("rotary_embedding", "injective", lambda i, a: rotary.rotary_embedding(
    i[0], i[1], i[2], i[3] if len(i) > 3 else None, a.get("interleaved", False), a.get("rotary_dim", 0),
    a.get("num_heads", 0)))

from . import bitwise as _bitwise  # noqa: E402 - bitwise ops and shifts on integer tensors

for _op in _bitwise.BINARY:
    _register(_op, "injective", (lambda op: lambda i, a: _bitwise.bitwise_binary(op, i[0], i[1]))(_op))
_register("bitwise_not", "injective", lambda i, a: _bitwise.bitwise_not_(i[0]))


def _conv2d_transpose(i, a):
    """ConvTranspose's X, W [C, OC/groups, KH, KW] and optional bias [OC], added per channel."""
    from .conv2d_transpose import conv2d_transpose
    from .elementwise import add, static_shape
    from .shape_ops import reshape
    Y = conv2d_transpose(i[0], i[1], tuple(a["stride"]), tuple(a["padding"]), tuple(a.get("output_padding", (0, 0))),
                         tuple(a.get("dilation", (1, 1))), int(a.get("groups", 1)))
    if len(i) > 2 and i[2] is not None:
        Y = add(Y, reshape(i[2], (static_shape(i[2])[0], 1, 1), name="bias.r"), name="bias")
    return Y


_register("conv2d_transpose", "anchor", _conv2d_transpose)
