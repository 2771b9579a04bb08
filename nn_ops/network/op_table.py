"""The op vocabulary of the graph IR: for each op type, how to build its computation.

``OPS[op_type]`` is an :class:`OpDef` with ``build(inputs, attrs) -> Tensor`` (inputs are
tensors, or Python floats for scalar constants) and ``kind``:

- ``"anchor"``: a heavy op (conv, dense, matmul) that elementwise consumers fuse into;
- ``"injective"``: elementwise / broadcast / index arithmetic, fusable after anything
  fusable;
- ``"reduce"``: pools, softmax: their own kernel (consumers may fuse after them when
  the schedule allows; today they do not);
- ``"alias"``: reshape-like ops whose output is the input's memory reinterpreted.

Building a computation is cheap (expression trees only), so the importer also uses it
to infer the output shape of every node it emits.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, Sequence

from ...dsl.tensor import Tensor, placeholder
from ...errors import ExprError
from ..ops import elementwise as ew
from ..ops import (arg_reduce, bitwise as _bitwise, cumsum, einsum, grid_sample, index as index_ops,
                   logic as logic_ops, loss as loss_ops, lrn, math as math_ops, patches as _patches, pooling, quantize,
                   recurrent, resize,
                   rotary, scatter, shape as shape_ops, topk)
from ..ops.elementwise import extents, static_shape


@dataclass(frozen=True)
class OpDef:
    build: Callable
    kind: str


OPS: Dict[str, OpDef] = {}


def op(name: str, kind: str):
    def decorate(fn):
        OPS[name] = OpDef(fn, kind)
        return fn
    return decorate


# ------------------------------------------------------------------ anchors
@op("conv2d", "anchor")
def _conv2d(inputs, attrs):
    """An NCHW conv; over symbolic sizes (a squeeze-and-excitation gate's 1x1 on [N, C, 1, 1] that
    stays NCHW) the row path that takes them (``conv2d_rows``)."""
    X, W = inputs[0], inputs[1]
    stride, padding = tuple(attrs["stride"]), tuple(attrs["padding"])
    dilation, groups = tuple(attrs["dilation"]), int(attrs["groups"])
    from ..ops.conv2d import conv2d, conv2d_rows
    if not all(isinstance(d, int) for d in extents(X)):
        return conv2d_rows(X, W, inputs[2] if len(inputs) > 2 else None, stride, padding, dilation, groups)
    Y = conv2d(X, W, stride, padding, dilation, groups)
    if len(inputs) > 2 and inputs[2] is not None:
        B = inputs[2]
        Y = ew.add(Y, shape_ops.reshape(B, (static_shape(B)[0], 1, 1), name="bias.r"), name="bias")
    return Y


@op("conv2d_gemm", "anchor")
def _conv2d_gemm(inputs, attrs):
    """conv2d with its weight reshaped to [OC, C*KH*KW] (passes.choose_cuda_conv, GPU only)."""
    from ..ops.conv2d_gemm import conv2d_implicit_gemm
    Y = conv2d_implicit_gemm(inputs[0], inputs[1], tuple(attrs["kernel"]), tuple(attrs["stride"]),
                             tuple(attrs["padding"]), tuple(attrs["dilation"]),
                             columns_multiple=int(attrs.get("columns_multiple", 1)),
                             out_channels=attrs.get("out_channels"))
    if len(inputs) > 2 and inputs[2] is not None:
        B = inputs[2]
        Y = ew.add(Y, shape_ops.reshape(B, (static_shape(B)[0], 1, 1), name="bias.r"), name="bias")
    return Y


@op("dense", "anchor")
def _dense(inputs, attrs):
    from ..ops.matmul import dense
    return dense(inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None)


SMALL_M = 16


@op("dense_kn", "anchor")
def _dense_kn(inputs, attrs):
    """X [M, K] times a [K, N] weight (transposed at compile time), plus an optional bias [N]; with
    ``panels``, the weight is packed [N/nr, K, nr] (``choose_dense_layout``).  Over a symbolic row
    count the general kernel; ``few_rows`` (the streaming one) and ``row_block`` (of the panels'
    register tile) make the variants a symbolic network runs where the rows are few."""
    from ..ops.gemv import matmul_small_m
    from ..ops.matmul import matmul, matmul_panels
    X, W = inputs[0], inputs[1]
    rows = extents(X)[0]
    if attrs.get("panels"):
        Y = matmul_panels(X, W, attrs.get("columns"), row_block=attrs.get("row_block"))
    elif attrs.get("few_rows") or isinstance(rows, int) and rows <= SMALL_M:
        Y = matmul_small_m(X, W)
    else:
        Y = matmul(X, W)
    if len(inputs) > 2 and inputs[2] is not None:
        Y = ew.add(Y, inputs[2], name="bias")
    return Y


@op("matmul_u8s8", "anchor")
def _matmul_u8s8(inputs, attrs):
    """uint8 (or int8) A [M, 4 Kw] by B's int32 words [Kw, N] (``int8_matmul.pack_words``), exact in int32;
    with ``panels``, the words are packed [N/nr, Kw, nr] (``choose_dense_layout``), with ``pairs`` as
    words of two int16 rows [N/nr, 2 Kw, nr] (a CPU without a byte dot product)."""
    from ..ops.int8_matmul import matmul_u8s8, matmul_u8s8_pair_panels, matmul_u8s8_panels
    if attrs.get("panels") and attrs.get("pairs"):
        return matmul_u8s8_pair_panels(inputs[0], inputs[1], attrs["columns"])
    if attrs.get("panels"):
        return matmul_u8s8_panels(inputs[0], inputs[1], attrs["columns"])
    return matmul_u8s8(inputs[0], inputs[1])


@op("matmul", "anchor")
def _matmul(inputs, attrs):
    """2-d x 2-d, or batched 3-d x 3-d with equal batch sizes (the importer reshapes/broadcasts to these)."""
    from ..ops.matmul import batch_matmul, matmul
    A, B = inputs
    if A.ndim == 2 and B.ndim == 2:
        return matmul(A, B)
    if A.ndim == 3 and B.ndim == 3:
        return batch_matmul(A, B)
    raise ExprError(f"matmul of ranks {A.ndim} and {B.ndim} is not supported (2-d x 2-d or 3-d x 3-d)")


@op("conv2d_blocked", "anchor")
def _conv2d_blocked(inputs, attrs):
    from ..ops.nchwc import conv2d_blocked
    return conv2d_blocked(inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, tuple(attrs["stride"]),
                          tuple(attrs["padding"]), tuple(attrs["dilation"]), groups=int(attrs.get("groups", 1)),
                          **_row_blocks(attrs))


def _row_blocks(attrs) -> dict:
    """A blocked conv's register block of pixels where a kernel over symbolic sizes gives one
    (``row_block``; ``whole_blocks``: only run where it divides the row)."""
    if "row_block" not in attrs:
        return {}
    return {"row_block": int(attrs["row_block"]), "whole_blocks": bool(attrs.get("whole_blocks", False))}


@op("conv2d_winograd_blocked", "anchor")
def _conv2d_winograd_blocked(inputs, attrs):
    """The flat-tile form, or the (tile row, tile column) form where that one's register block
    would be too small (``winograd.takes_rows_form``) or where a register block of tiles is given
    (``tile_block``, ``whole_blocks``: a kernel over symbolic sizes, which the flat form cannot take).
    With ``direct_weight`` (a map of symbolic size) the third input is the packed direct weight, and
    without a ``tile_block`` the kernel is the direct conv (the sizes where Winograd does not pay)."""
    from ..ops.nchwc import conv2d_blocked
    from ..ops.winograd import conv2d_winograd_blocked, takes_rows_form
    from ..ops.winograd_rows import conv2d_winograd_rows
    first_bias = 3 if attrs.get("direct_weight") else 2
    bias = inputs[first_bias] if len(inputs) > first_bias else None
    padding = tuple(attrs["padding"])
    if attrs.get("direct_weight") and "tile_block" not in attrs:
        return conv2d_blocked(inputs[0], inputs[2], bias, (1, 1), padding, (1, 1), **_row_blocks(attrs))
    if "tile_block" in attrs or takes_rows_form(inputs[0], inputs[1], padding):
        return conv2d_winograd_rows(inputs[0], inputs[1], bias, padding, tile_block=attrs.get("tile_block", 7),
                                    whole_blocks=attrs.get("whole_blocks", False))
    return conv2d_winograd_blocked(inputs[0], inputs[1], bias, padding)


@op("depthwise_blocked", "anchor")
def _depthwise_blocked(inputs, attrs):
    from ..ops.nchwc import depthwise_blocked
    return depthwise_blocked(inputs[0], inputs[1], inputs[2] if len(inputs) > 2 else None, tuple(attrs["stride"]),
                             tuple(attrs["padding"]), tuple(attrs["dilation"]), **_row_blocks(attrs))


@op("pool2d_blocked", "reduce")
def _pool2d_blocked(inputs, attrs):
    from ..ops.nchwc import pool2d_blocked
    return pool2d_blocked(inputs[0], attrs["kernel"], attrs["stride"], attrs["padding"], attrs.get("dilation", (1, 1)),
                          attrs["pool_type"], attrs.get("ceil_mode", False), attrs.get("count_include_pad", False))


@op("global_avg_pool_blocked", "reduce")
def _global_avg_pool_blocked(inputs, attrs):
    from ..ops.nchwc import global_pool_blocked
    return global_pool_blocked(inputs[0], attrs.get("kind", "avg"))


@op("to_blocked", "injective")
def _to_blocked(inputs, attrs):
    from ..ops.nchwc import to_blocked
    return to_blocked(inputs[0], attrs["block"])


@op("from_blocked", "injective")
def _from_blocked(inputs, attrs):
    from ..ops.nchwc import from_blocked
    return from_blocked(inputs[0], attrs.get("channels"))


@op("layer_norm", "reduce")
def _layer_norm(inputs, attrs):
    from ..ops.norm import layer_norm
    bias = inputs[2] if len(inputs) > 2 else None
    return layer_norm(inputs[0], inputs[1], bias, attrs.get("axis", -1), attrs.get("epsilon", 1e-5))


@op("layer_norm_stat", "reduce")
def _layer_norm_stat(inputs, attrs):
    from ..ops.norm import layer_norm_stat_output
    return layer_norm_stat_output(inputs[0], attrs["which"], attrs.get("axis", -1), attrs.get("epsilon", 1e-5))


@op("gelu", "injective")
def _gelu(inputs, attrs):
    from ..ops.norm import gelu
    return gelu(inputs[0], attrs.get("approximate", "none"))


# ------------------------------------------------------------------ injective
def _erf(v):
    from ...dsl.intrinsics import erf
    return erf(v)


def pow_constant(v, exponent: float, dtype: str):
    """``v ** exponent`` for a constant exponent: products and sqrt where they are exact forms."""
    from ...dsl.expr import const
    from ...dsl.intrinsics import pow as lw_pow, sqrt
    if exponent == 2.0:
        return v * v
    if exponent == 3.0:     # GPT-2's tanh GELU: x + 0.044715 x^3 (a general pow is exp(3 log|x|) with sign fixes)
        return v * v * v
    if exponent == 1.0:
        return v
    if exponent == 0.5:
        return sqrt(v)
    return lw_pow(v, const(float(exponent), dtype))


for _name in ("add", "sub", "mul", "div", "max", "min", "pow"):
    def _make(opname):
        return lambda inputs, attrs: ew.binary(opname, inputs[0], inputs[1], name=opname)
    OPS[_name] = OpDef(_make(_name), "injective")

_UNARY = {
    "relu": lambda x, a: ew.relu(x),
    "clip": lambda x, a: ew.clip(x, a.get("min"), a.get("max")),
    "sigmoid": lambda x, a: ew.sigmoid(x),
    "tanh": lambda x, a: ew.tanh(x),
    "leaky_relu": lambda x, a: ew.leaky_relu(x, a.get("alpha", 0.01)),
    "hard_sigmoid": lambda x, a: ew.hard_sigmoid(x, a.get("alpha", 0.2), a.get("beta", 0.5)),
    "hard_swish": lambda x, a: ew.hard_swish(x),
    "exp": lambda x, a: ew.exp_(x),
    "sqrt": lambda x, a: ew.sqrt(x),
    "neg": lambda x, a: ew.negative(x),
    "copy": lambda x, a: ew.identity(x),
    "erf": lambda x, a: ew.unary(_erf, x, "erf"),
    "pow_const": lambda x, a: ew.unary(lambda v: pow_constant(v, a["exponent"], x.dtype), x, "pow"),
}
for _name, _fn in _UNARY.items():
    OPS[_name] = OpDef((lambda f: lambda inputs, attrs: f(inputs[0], attrs))(_fn), "injective")

OPS["transpose"] = OpDef(lambda inputs, attrs: shape_ops.transpose(inputs[0], attrs["perm"]), "injective")
OPS["concat"] = OpDef(lambda inputs, attrs: shape_ops.concat(list(inputs), attrs["axis"]), "injective")
OPS["patches"] = OpDef(lambda inputs, attrs: _patches.patches(
    inputs[0], attrs["kernel"], attrs["stride"], attrs["padding"], attrs["dilation"],
    inputs[1] if len(inputs) > 1 else None, attrs.get("channels")), "injective")
OPS["pad"] = OpDef(lambda inputs, attrs: shape_ops.pad(inputs[0], attrs["before"], attrs["after"],
                                                        attrs.get("value", 0.0)), "injective")

# ------------------------------------------------------------------ aliases
OPS["reshape"] = OpDef(lambda inputs, attrs: shape_ops.reshape(inputs[0], attrs["shape"]), "alias")
OPS["reshape_copy"] = OpDef(lambda inputs, attrs: shape_ops.reshape(inputs[0], attrs.get("shape", static_shape(
    inputs[0]))), "injective")
OPS["identity"] = OpDef(lambda inputs, attrs: shape_ops.reshape(inputs[0], static_shape(inputs[0])), "alias")


# ------------------------------------------------------------------ reductions
@op("max_pool2d", "reduce")
def _max_pool(inputs, attrs):
    return pooling.pool2d(inputs[0], attrs["kernel"], attrs["stride"], attrs["padding"], attrs["dilation"], "max",
                          ceil_mode=attrs.get("ceil_mode", False), name="max_pool")


@op("max_pool2d_indices", "reduce")
def _max_pool_indices(inputs, attrs):
    return pooling.pool2d(inputs[0], attrs["kernel"], attrs["stride"], attrs["padding"], attrs["dilation"], "max",
                          ceil_mode=attrs.get("ceil_mode", False), name="max_pool_indices", with_indices=True,
                          column_major=attrs.get("column_major", False))


@op("avg_pool2d", "reduce")
def _avg_pool(inputs, attrs):
    return pooling.pool2d(inputs[0], attrs["kernel"], attrs["stride"], attrs["padding"], attrs.get("dilation", (1, 1)),
                          "avg", count_include_pad=attrs.get("count_include_pad", False),
                          ceil_mode=attrs.get("ceil_mode", False), name="avg_pool")


OPS["global_avg_pool"] = OpDef(lambda inputs, attrs: pooling.global_pool(inputs[0], "avg"), "reduce")
OPS["global_max_pool"] = OpDef(lambda inputs, attrs: pooling.global_pool(inputs[0], "max"), "reduce")
OPS["reduce"] = OpDef(lambda inputs, attrs: shape_ops.reduce(inputs[0], attrs["axes"], attrs["kind"],
                                                              attrs.get("keepdims", True)), "reduce")
OPS["slice"] = OpDef(lambda inputs, attrs: shape_ops.strided_slice(inputs[0], attrs["begin"], attrs["end"],
                                                                    attrs["step"]), "injective")
OPS["softmax"] = OpDef(lambda inputs, attrs: shape_ops.softmax(inputs[0], attrs.get("axis", -1)), "reduce")


def infer_output(op_type: str, input_shapes: Sequence, input_dtypes: Sequence, attrs, scalars=()) -> Tensor:
    """Build ``op_type`` over placeholders of the given shapes; the result carries shape and dtype.

    ``scalars`` maps input positions to Python floats (scalar constants passed by value).  A size
    may be a sympy expression of symbolic sizes: the placeholder's extent is then that expression
    over one ``lw.var`` per symbol, and ``output_shape`` gives the result's sizes back as sympy.
    """
    from . import symbolic as S
    scalars = dict(scalars)
    names = sorted({n for shape in input_shapes if shape is not None for d in shape for n in S.free_symbols(d)})
    variables = S.dsl_variables(names)
    inputs = []
    for k, (shape, dtype) in enumerate(zip(input_shapes, input_dtypes)):
        if k in scalars:
            inputs.append(scalars[k])
        elif shape is None:
            inputs.append(None)
        else:
            dims = tuple(int(d) if S.is_static(d) else S.to_dsl(d, variables) for d in shape)
            inputs.append(placeholder(dims, name=f"in{k}", dtype=dtype))
    return OPS[op_type].build(inputs, attrs)


def output_shape(t: Tensor):
    """``t``'s shape: ints, and sympy sizes where it is symbolic (``infer_output`` over sympy sizes)."""
    from . import symbolic as S
    return tuple(int(d) if isinstance(d, int) else S.simplify(S.from_dsl(d)) for d in extents(t))


SCALAR_OPS = ("add", "sub", "mul", "div", "max", "min")


def scalar_constants(graph, op_type: str, inputs: Sequence[str]) -> Dict[int, float]:
    """Inputs of a binary op that are one-element constants not raising the rank: passed by value."""
    if op_type not in SCALAR_OPS:
        return {}
    ranks = [len(graph.values[i].shape) for i in inputs]
    out = {}
    for k, i in enumerate(inputs):
        arr = graph.initializers.get(i)
        others = [r for j, r in enumerate(ranks) if j != k]
        if arr is not None and arr.size == 1 and others and arr.ndim <= max(others) and len(out) < len(inputs) - 1 \
                and _exact_as_float(arr):
            out[k] = float(arr.reshape(()))
    return out


def _exact_as_float(arr) -> bool:
    """A Python float holds the value exactly (integers beyond 2**53 stay tensors)."""
    return arr.dtype.kind == "f" or abs(int(arr.reshape(()))) <= 2 ** 53


# ------------------------------------------- comparisons, logic, casts, math, gathers, resize, ...
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
_register("rescale", "injective", lambda i, a: quantize.rescale(i[0], i[1], i[2], a["to"],
                                                                int32_range=bool(a.get("int32_range"))))
_register("rescale_add", "injective", lambda i, a: quantize.rescale_add(i[0], i[1], a["multipliers"], a["offset"],
                                                                          a["to"]))
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


def _lstm_cell(i, a):
    """inputs: gates, h_prev, c_prev, then the peepholes (``peephole``) and the step's mask (``masked``)."""
    rest = list(i[3:])
    peephole = rest.pop(0) if a.get("peephole") else None
    return recurrent.lstm_cell(i[0], i[1], i[2], peephole, rest[0] if a.get("masked") else None,
                               a["activations"], a.get("clip"), a.get("input_forget", False))


_register("lstm_cell", "injective", _lstm_cell)
_register("gru_reset", "injective", lambda i, a: recurrent.gru_reset(i[0], i[1], a["activation"], a.get("clip")))
_register("gru_cell", "injective", lambda i, a: recurrent.gru_cell(
    i[0], i[1], i[2], i[3], i[4] if a.get("masked") else None, a["activations"], a.get("clip")))
_register("gru_cell_linear_before_reset", "injective", lambda i, a: recurrent.gru_cell_linear_before_reset(
    i[0], i[1], i[2], i[3] if a.get("masked") else None, a["activations"], a.get("clip")))
_register("rnn_cell", "injective", lambda i, a: recurrent.rnn_cell(
    i[0], i[1], i[2] if a.get("masked") else None, a["activation"], a.get("clip")))


for _op in _bitwise.BINARY:
    _register(_op, "injective", (lambda op: lambda i, a: _bitwise.bitwise_binary(op, i[0], i[1]))(_op))
_register("bitwise_not", "injective", lambda i, a: _bitwise.bitwise_not_(i[0]))


def _conv2d_transpose(i, a):
    """ConvTranspose's X, W [C, OC/groups, KH, KW] and optional bias [OC], added per channel."""
    from ..ops.conv2d_transpose import conv2d_transpose
    from ..ops.elementwise import add, static_shape
    from ..ops.shape import reshape
    Y = conv2d_transpose(i[0], i[1], tuple(a["stride"]), tuple(a["padding"]), tuple(a.get("output_padding", (0, 0))),
                         tuple(a.get("dilation", (1, 1))), int(a.get("groups", 1)))
    if len(i) > 2 and i[2] is not None:
        Y = add(Y, reshape(i[2], (static_shape(i[2])[0], 1, 1), name="bias.r"), name="bias")
    return Y


_register("conv2d_transpose", "anchor", _conv2d_transpose)
