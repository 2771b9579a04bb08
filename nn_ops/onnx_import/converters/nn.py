"""Converters for convolution, normalization, pooling and matrix products."""
from __future__ import annotations

import math

import numpy as np

from ..context import ImportContext, Unsupported, converter


def _spatial_padding(ctx: ImportContext, node, in_hw, kernel, stride, dilation):
    """ONNX ``pads``/``auto_pad`` as (top, left, bottom, right)."""
    auto_pad = ctx.attr(node, "auto_pad", "NOTSET")
    if auto_pad in ("NOTSET", ""):
        pads = list(ctx.attr(node, "pads", [0] * 4))
        if len(pads) != 4:
            raise Unsupported(f"pads {pads}: only 2-d (4 pads) is supported")
        return pads[0], pads[1], pads[2], pads[3]
    if auto_pad == "VALID":
        return 0, 0, 0, 0
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = []
        for size, k, s, d in zip(in_hw, kernel, stride, dilation):
            total = max(0, (math.ceil(size / s) - 1) * s + (k - 1) * d + 1 - size)
            small, big = total // 2, total - total // 2
            out.append((small, big) if auto_pad == "SAME_UPPER" else (big, small))
        return out[0][0], out[1][0], out[0][1], out[1][1]
    raise Unsupported(f"auto_pad={auto_pad!r}")


def _check_2d(ctx, node, name):
    shape = ctx.shape(node.input[0])
    if len(shape) != 4:
        raise Unsupported(f"input of rank {len(shape)}: only 2-d {name} on NCHW tensors is supported")
    return shape


def _is_1d(ctx, node) -> bool:
    return len(ctx.shape(node.input[0])) == 3


def _window_1d(ctx, node, length: int, kernel: int):
    """A 1-d window's stride, dilation and padding as the 2-d ones of an [N, C, 1, L] input."""
    (stride,) = ctx.attr(node, "strides", [1])
    (dilation,) = ctx.attr(node, "dilations", [1])
    if ctx.attr(node, "auto_pad", "NOTSET") in ("NOTSET", ""):
        pads = list(ctx.attr(node, "pads", [0, 0]))
        if len(pads) != 2:
            raise Unsupported(f"pads {pads}: a 1-d window takes 2 pads")
        padding = (0, pads[0], 0, pads[1])
    else:
        padding = _spatial_padding(ctx, node, (1, length), (1, kernel), (1, stride), (1, dilation))
    return (1, int(stride)), (1, int(dilation)), tuple(int(p) for p in padding)


def _as_rows(ctx, name: str) -> str:
    """[N, C, L] -> [N, C, 1, L] (a constant is reshaped at import)."""
    n, c, length = ctx.shape(name)
    value = ctx.const(name)
    if value is not None:
        return ctx.add_constant(name + ".rows", value.reshape(n, c, 1, length))
    return ctx.emit("reshape", [name], ctx.graph.fresh_name(name + ".rows"), {"shape": (n, c, 1, length)})


def _from_rows(ctx, node, op_type: str, inputs, attrs, out=None) -> str:
    """Emit a 2-d op on [N, C, 1, L] operands, then reshape its result to the 1-d ``out``
    (default: the node's output)."""
    out = out or node.output[0]
    rows = ctx.emit(op_type, inputs, ctx.graph.fresh_name(out + ".rows"), attrs, name=node.name)
    n, c, _, length = ctx.shape(rows)
    return ctx.emit("reshape", [rows], out, {"shape": (n, c, length)}, name=node.name + ".1d")


def accumulate_float16_in_float32(ctx: ImportContext, node, emit) -> None:
    """``emit(ctx, node, inputs, out)`` on the node's present inputs into its output; for float16
    inputs on float32 copies, rounding once at the end (long float16 sums lose digits)."""
    inputs = [i for i in node.input if i]
    if ctx.dtype(inputs[0]) != "float16":
        emit(ctx, node, inputs, node.output[0])
        return
    wide = [ctx.emit("cast", [i], ctx.graph.fresh_name(i + ".f32"), {"to": "float32"}) for i in inputs]
    out = emit(ctx, node, wide, ctx.graph.fresh_name(node.output[0] + ".f32"))
    ctx.emit("cast", [out], node.output[0], {"to": "float16"}, name=node.name + ".f16")


@converter("Conv", since=1)
def conv(ctx: ImportContext, node):
    """2-d convolution; a 1-d one (rank-3 input and weight) runs as a 2-d one on rows of height 1.
    float16 convolutions accumulate in float32 and round once at the end."""
    accumulate_float16_in_float32(ctx, node, _conv)


def _conv(ctx: ImportContext, node, inputs, out: str) -> str:
    """The convolution of ``node`` over ``inputs`` (X, W[, bias]) into ``out``."""
    group = int(ctx.attr(node, "group", 1))
    x, w, bias = inputs[0], inputs[1], inputs[2:]
    if len(ctx.shape(x)) == 3 and len(ctx.shape(w)) == 3:
        stride, dilation, padding = _window_1d(ctx, node, ctx.shape(x)[2], ctx.shape(w)[2])
        return _from_rows(ctx, node, "conv2d", [_as_rows(ctx, x), _as_rows(ctx, w)] + bias,
                          {"stride": stride, "padding": padding, "dilation": dilation, "groups": group}, out)
    N, C, H, W = _check_2d(ctx, node, "convolution")
    w_shape = ctx.shape(w)
    if len(w_shape) != 4:
        raise Unsupported("only 1-d and 2-d convolution is supported")
    kernel = list(ctx.attr(node, "kernel_shape", w_shape[2:]))
    stride = list(ctx.attr(node, "strides", [1, 1]))
    dilation = list(ctx.attr(node, "dilations", [1, 1]))
    padding = _spatial_padding(ctx, node, (H, W), kernel, stride, dilation)
    return ctx.emit("conv2d", [x, w] + bias, out,
                    {"stride": tuple(stride), "padding": tuple(padding), "dilation": tuple(dilation),
                     "groups": group}, name=node.name)


def inference_scale_shift(scale, bias, mean, var, eps: float):
    """Inference BatchNormalization as ``x * a + b`` per channel: (a, b) in float32."""
    a = (scale / np.sqrt(np.asarray(var, np.float64) + eps)).astype(np.float32)
    return a, (bias - mean * a).astype(np.float32)


@converter("BatchNormalization", since=9)
def batch_norm(ctx: ImportContext, node):
    if ctx.attr(node, "training_mode", 0):
        _training_batch_norm(ctx, node)
        return
    if len(node.output) > 1 and any(node.output[1:]):
        raise Unsupported("running mean/var outputs (training) are not supported")
    eps = float(ctx.attr(node, "epsilon", 1e-5))
    if not all(ctx.const(node.input[k]) is not None for k in range(1, 5)):
        _dynamic_batch_norm(ctx, node, eps)
        return
    # y = x * a + b per channel; the fold_batch_norm pass moves a and b into a preceding conv
    a, b = inference_scale_shift(*(ctx.const(node.input[k]) for k in range(1, 5)), eps)
    rank = len(ctx.shape(node.input[0]))
    shape = (-1,) + (1,) * (rank - 2)
    a_name = ctx.add_constant(node.output[0] + ".bn_scale", a.reshape(shape))
    b_name = ctx.add_constant(node.output[0] + ".bn_shift", b.reshape(shape))
    scaled = ctx.graph.fresh_name(node.output[0] + ".bn_mul")
    ctx.emit("mul", [node.input[0], a_name], scaled, name=node.name + ".mul")
    ctx.emit("add", [scaled, b_name], node.output[0], name=node.name)


def _training_batch_norm(ctx: ImportContext, node):
    """training_mode=1: normalise with the batch's own mean and (population) variance per
    channel; the optional outputs are the running statistics updated with ``momentum``."""
    x, scale, bias, mean, var = node.input[:5]
    eps = float(ctx.attr(node, "epsilon", 1e-5))
    momentum = float(ctx.attr(node, "momentum", 0.9))
    shape = ctx.shape(x)
    axes = tuple(a for a in range(len(shape)) if a != 1)
    out = node.output[0]
    dtype = ctx.dtype(x)

    def tmp(tag):
        return ctx.graph.fresh_name(f"{out}.{tag}")

    def scalar(tag, value):
        return ctx.add_constant(f"{out}.{tag}", np.array(value, dtype))

    def per_channel(name, tag):
        return ctx.emit("reshape", [name], tmp(tag), {"shape": (shape[1],) + (1,) * (len(shape) - 2)})

    stats = {"axes": axes, "kind": "mean", "keepdims": False}
    batch_mean = ctx.emit("reduce", [x], tmp("mean"), stats)
    centered = ctx.emit("sub", [x, per_channel(batch_mean, "mean_c")], tmp("centered"))
    batch_var = ctx.emit("reduce", [ctx.emit("mul", [centered, centered], tmp("sq"))], tmp("var"), stats)
    std = ctx.emit("sqrt", [ctx.emit("add", [batch_var, scalar("eps", eps)], tmp("var_eps"))], tmp("std"))
    a = ctx.emit("div", [scale, std], tmp("a"))
    ctx.emit("add", [ctx.emit("mul", [centered, per_channel(a, "a_c")], tmp("scaled")), per_channel(bias, "b_c")],
             out, name=node.name)
    for k, (running, batch) in enumerate(((mean, batch_mean), (var, batch_var)), start=1):
        if len(node.output) > k and node.output[k]:
            kept = ctx.emit("mul", [running, scalar(f"momentum{k}", momentum)], tmp(f"kept{k}"))
            new = ctx.emit("mul", [batch, scalar(f"rest{k}", 1.0 - momentum)], tmp(f"new{k}"))
            ctx.emit("add", [kept, new], node.output[k], name=f"{node.name}.running{k}")


def _dynamic_batch_norm(ctx: ImportContext, node, eps: float):
    """Batch norm whose statistics are graph inputs: the same formula, as elementwise nodes."""
    x, scale, bias, mean, var = node.input[:5]
    rank = len(ctx.shape(x))
    channels = ctx.shape(x)[1]
    out = node.output[0]

    def tmp(tag):
        return ctx.graph.fresh_name(f"{out}.{tag}")

    v = ctx.emit("add", [var, ctx.add_constant(out + ".eps", np.array(eps, np.float32))], tmp("var_eps"))
    a = ctx.emit("div", [scale, ctx.emit("sqrt", [v], tmp("std"))], tmp("a"))
    b = ctx.emit("sub", [bias, ctx.emit("mul", [mean, a], tmp("mean_a"))], tmp("b"))
    shape = (channels,) + (1,) * (rank - 2)
    a_r = ctx.emit("reshape", [a], tmp("a_r"), {"shape": shape})
    b_r = ctx.emit("reshape", [b], tmp("b_r"), {"shape": shape})
    ctx.emit("add", [ctx.emit("mul", [x, a_r], tmp("xa")), b_r], out, name=node.name)


def _pool_1d_attrs(ctx, node):
    (kernel,) = ctx.attr(node, "kernel_shape")
    stride, dilation, padding = _window_1d(ctx, node, ctx.shape(node.input[0])[2], kernel)
    return {"kernel": (1, int(kernel)), "stride": stride, "padding": padding, "dilation": dilation,
            "ceil_mode": bool(ctx.attr(node, "ceil_mode", 0))}


def _pool_3d(ctx, node, op_type: str, extra: dict, source=None, out=None) -> str:
    """A 3-d max or average pool as two 2-d ones: over (H, W) on [N, C*D, H, W], then over D
    on [N, C, D, OH*OW].  A box window factors per axis (its max, its sum, and the count an
    average divides by, with or without padding and ceil mode), so this is exact."""
    n, c, d, h, w = ctx.shape(node.input[0])
    kd, kh, kw = (int(k) for k in ctx.attr(node, "kernel_shape"))
    sd, sh, sw = (int(v) for v in ctx.attr(node, "strides", [1, 1, 1]))
    dd, dh, dw = (int(v) for v in ctx.attr(node, "dilations", [1, 1, 1]))
    auto_pad = ctx.attr(node, "auto_pad", "NOTSET")
    if auto_pad not in ("NOTSET", "", "VALID"):
        raise Unsupported(f"auto_pad={auto_pad!r} on a 3-d pool")
    pads = [0] * 6 if auto_pad == "VALID" else [int(p) for p in ctx.attr(node, "pads", [0] * 6)]
    ceil_mode = bool(ctx.attr(node, "ceil_mode", 0))
    out = out or node.output[0]
    planes = ctx.emit("reshape", [source or node.input[0]], ctx.graph.fresh_name(out + ".planes"),
                      {"shape": (n, c * d, h, w)})
    hw = ctx.emit(op_type, [planes], ctx.graph.fresh_name(out + ".hw"),
                  dict(extra, kernel=(kh, kw), stride=(sh, sw), dilation=(dh, dw), ceil_mode=ceil_mode,
                       padding=(pads[1], pads[2], pads[4], pads[5])), name=node.name + ".hw")
    oh, ow = ctx.shape(hw)[2:]
    columns = ctx.emit("reshape", [hw], ctx.graph.fresh_name(out + ".columns"), {"shape": (n, c, d, oh * ow)})
    depth = ctx.emit(op_type, [columns], ctx.graph.fresh_name(out + ".d"),
                     dict(extra, kernel=(kd, 1), stride=(sd, 1), dilation=(dd, 1), ceil_mode=ceil_mode,
                          padding=(pads[0], 0, pads[3], 0)), name=node.name + ".d")
    return ctx.emit("reshape", [depth], out, {"shape": (n, c, ctx.shape(depth)[2], oh, ow)}, name=node.name)


def _pool_common(ctx, node, kind):
    N, C, H, W = _check_2d(ctx, node, kind)
    kernel = list(ctx.attr(node, "kernel_shape"))
    if len(kernel) != 2:
        raise Unsupported(f"kernel_shape {kernel}: only 2-d pooling is supported")
    stride = list(ctx.attr(node, "strides", [1, 1]))
    dilation = list(ctx.attr(node, "dilations", [1, 1]))
    padding = _spatial_padding(ctx, node, (H, W), kernel, stride, dilation)
    return {"kernel": tuple(kernel), "stride": tuple(stride), "padding": tuple(padding),
            "dilation": tuple(dilation), "ceil_mode": bool(ctx.attr(node, "ceil_mode", 0))}


@converter("MaxPool", since=1)
def max_pool(ctx: ImportContext, node):
    indices = len(node.output) > 1 and node.output[1]
    if indices and len(ctx.shape(node.input[0])) != 4:
        raise Unsupported("the Indices output of a MaxPool that is not 2-d")
    if indices:
        attrs = dict(_pool_common(ctx, node, "max pooling"), column_major=bool(ctx.attr(node, "storage_order", 0)))
        ctx.emit("max_pool2d_indices", [node.input[0]], node.output[1], attrs, name=node.name + ".indices")
    if _is_1d(ctx, node):
        _from_rows(ctx, node, "max_pool2d", [_as_rows(ctx, node.input[0])], _pool_1d_attrs(ctx, node))
        return
    if len(ctx.shape(node.input[0])) == 5:
        _pool_3d(ctx, node, "max_pool2d", {})
        return
    ctx.emit("max_pool2d", [node.input[0]], node.output[0], _pool_common(ctx, node, "max pooling"), name=node.name)


@converter("AveragePool", since=1)
def average_pool(ctx: ImportContext, node):
    if len(ctx.shape(node.input[0])) == 5:
        _pool_3d(ctx, node, "avg_pool2d", {"count_include_pad": bool(ctx.attr(node, "count_include_pad", 0))})
        return
    one_d = _is_1d(ctx, node)
    attrs = _pool_1d_attrs(ctx, node) if one_d else _pool_common(ctx, node, "average pooling")
    attrs["count_include_pad"] = bool(ctx.attr(node, "count_include_pad", 0))
    if one_d:
        _from_rows(ctx, node, "avg_pool2d", [_as_rows(ctx, node.input[0])], attrs)
        return
    ctx.emit("avg_pool2d", [node.input[0]], node.output[0], attrs, name=node.name)


@converter("GlobalAveragePool", since=1)
def global_average_pool(ctx: ImportContext, node):
    ctx.emit("global_avg_pool", [node.input[0]], node.output[0], name=node.name)


@converter("GlobalMaxPool", since=1)
def global_max_pool(ctx: ImportContext, node):
    ctx.emit("global_max_pool", [node.input[0]], node.output[0], name=node.name)


@converter("Gemm", since=1)
def gemm(ctx: ImportContext, node):
    """``alpha * A' @ B' + beta * C``: a dense op with the weight as [out, in] when B is constant."""
    alpha, beta = float(ctx.attr(node, "alpha", 1.0)), float(ctx.attr(node, "beta", 1.0))
    trans_a, trans_b = int(ctx.attr(node, "transA", 0)), int(ctx.attr(node, "transB", 0))
    A = node.input[0]
    if len(ctx.shape(A)) != 2:
        raise Unsupported(f"Gemm input A of rank {len(ctx.shape(A))}")
    if trans_a:
        At = ctx.graph.fresh_name(A + ".T")
        ctx.emit("transpose", [A], At, {"perm": (1, 0)}, name=node.name + ".transA")
        A = At
    b = ctx.const(node.input[1])
    c_name = node.input[2] if len(node.input) > 2 and node.input[2] else None
    c = ctx.const(c_name) if c_name else None
    if b is not None:
        w = (b if trans_b else b.T) * np.float32(alpha) if alpha != 1.0 else (b if trans_b else b.T)
        w_name = ctx.add_constant(node.input[1] + (".w" if not trans_b or alpha != 1.0 else ""),
                                  np.ascontiguousarray(w, dtype=np.float32)) \
            if (not trans_b or alpha != 1.0) else node.input[1]
        n_out = w.shape[0]
        inputs = [A, w_name]
        if c is not None and c.size in (1, n_out) and (c.ndim <= 1 or c.shape[-1] == c.size):
            inputs.append(ctx.add_constant(c_name + ".bias", np.broadcast_to(c.reshape(-1) * np.float32(beta),
                                                                                (n_out,)).astype(np.float32)))
            ctx.emit("dense", inputs, node.output[0], name=node.name)
            return
        if c_name is None or beta == 0.0:
            ctx.emit("dense", inputs, node.output[0], name=node.name)
            return
        mid = ctx.graph.fresh_name(node.output[0] + ".mm")
        ctx.emit("dense", inputs, mid, name=node.name + ".dense")
    else:
        B = node.input[1]
        if trans_b:
            Bt = ctx.graph.fresh_name(B + ".T")
            ctx.emit("transpose", [B], Bt, {"perm": (1, 0)}, name=node.name + ".transB")
            B = Bt
        mid = ctx.graph.fresh_name(node.output[0] + ".mm")
        if alpha != 1.0:
            mm = ctx.graph.fresh_name(node.output[0] + ".mm0")
            ctx.emit("matmul", [A, B], mm, name=node.name + ".matmul")
            ctx.emit("mul", [mm, ctx.add_constant(node.name + ".alpha", np.float32(alpha))], mid)
        else:
            ctx.emit("matmul", [A, B], mid, name=node.name + ".matmul")
        if c_name is None or beta == 0.0:
            ctx.emit("copy", [mid], node.output[0], name=node.name)
            return
    cc = c_name
    if beta != 1.0:
        cc = ctx.graph.fresh_name(c_name + ".beta")
        ctx.emit("mul", [c_name, ctx.add_constant(node.name + ".beta", np.float32(beta))], cc)
    ctx.emit("add", [mid, cc], node.output[0], name=node.name)


@converter("MatMul", since=1)
def matmul(ctx: ImportContext, node):
    """numpy matmul semantics: 1-d operands get a unit axis, batch axes broadcast.

    A constant 2-d B makes a dense op over A's rows (any leading axes flattened); other
    cases become a batched 3-d matmul over the broadcast batch, operands stretched by a
    copy only where their batch axes broadcast.
    """
    A, B = node.input[0], node.input[1]
    sa, sb = list(ctx.shape(A)), list(ctx.shape(B))
    out = node.output[0]
    if len(sa) == 1:
        A = _reshaped(ctx, A, [1] + sa)
    if len(sb) == 1:
        B = _reshaped(ctx, B, sb + [1])
    ra, rb = list(ctx.shape(A)), list(ctx.shape(B))
    if ra[-1] != rb[-2]:
        raise Unsupported(f"MatMul of shapes {sa} and {sb}: the contracted sizes {ra[-1]} and {rb[-2]} differ")
    batch = list(np.broadcast_shapes(tuple(ra[:-2]), tuple(rb[:-2])))
    result = batch + [ra[-2], rb[-1]]
    final = batch + ([ra[-2]] if len(sa) > 1 else []) + ([rb[-1]] if len(sb) > 1 else [])
    b = ctx.const(B)
    direct = result == list(final)
    target = out if direct else ctx.graph.fresh_name(out + ".nd")
    if b is not None and all(d == 1 for d in rb[:-2]):
        lead = int(np.prod(ra[:-1]))
        w = ctx.add_constant(B + ".T", np.ascontiguousarray(b.reshape(rb[-2:]).T))
        if len(ra) == 2:
            ctx.emit("dense", [A, w], target, name=node.name)
        else:
            mid = ctx.graph.fresh_name(out + ".2d")
            ctx.emit("dense", [_reshaped(ctx, A, [lead, ra[-1]]), w], mid, name=node.name)
            ctx.emit("reshape", [mid], target, {"shape": tuple(result)})
    elif not batch:
        ctx.emit("matmul", [A, B], target, name=node.name)
    else:
        n = int(np.prod(batch))
        a3 = _reshaped(ctx, _stretched(ctx, A, batch + ra[-2:]), [n] + ra[-2:])
        b3 = _reshaped(ctx, _stretched(ctx, B, batch + rb[-2:]), [n] + rb[-2:])
        mid = ctx.graph.fresh_name(out + ".3d")
        ctx.emit("matmul", [a3, b3], mid, name=node.name)
        ctx.emit("reshape", [mid], target, {"shape": tuple(result)})
    if not direct:
        ctx.emit("reshape", [target], out, {"shape": tuple(final)})


def _reshaped(ctx, name: str, shape) -> str:
    """``name`` viewed with ``shape`` (an alias, no copy); ``name`` itself if it already has it."""
    if list(ctx.shape(name)) == list(shape):
        return name
    view = ctx.graph.fresh_name(f"{name}.r")
    ctx.emit("reshape", [name], view, {"shape": tuple(int(d) for d in shape)})
    return view


def _stretched(ctx, name: str, shape) -> str:
    """``name`` broadcast to ``shape``: a copy when its batch axes stretch, else ``name``."""
    src = list(ctx.shape(name))
    if len(src) == len(shape) and src == list(shape):
        return name
    if int(np.prod(src)) == int(np.prod(shape)):
        return _reshaped(ctx, name, shape)
    wide = ctx.graph.fresh_name(f"{name}.b")
    ctx.emit("expand", [name], wide, {"shape": tuple(int(d) for d in shape)})
    return wide


@converter("LayerNormalization", since=17)
def layer_normalization(ctx: ImportContext, node):
    """Y, and the optional Mean / InvStdDev outputs (recomputed by their own small kernels)."""
    x = node.input[0]
    if ctx.dtype(x) != "float32":
        raise Unsupported(f"input {x!r} has dtype {ctx.dtype(x)}; only float32 is supported")
    attrs = {"axis": int(ctx.attr(node, "axis", -1)), "epsilon": float(ctx.attr(node, "epsilon", 1e-5))}
    inputs = [x, node.input[1]] + ([node.input[2]] if len(node.input) > 2 and node.input[2] else [])
    ctx.emit("layer_norm", inputs, node.output[0], attrs, name=node.name)
    for k, which in ((1, "mean"), (2, "inv_std")):
        if len(node.output) > k and node.output[k]:
            ctx.emit("layer_norm_stat", [x], node.output[k], dict(attrs, which=which), name=node.output[k])


@converter("Gelu", since=20)
def gelu(ctx: ImportContext, node):
    approximate = ctx.attr(node, "approximate", "none")
    if approximate not in ("none", "tanh"):
        raise Unsupported(f"approximate={approximate!r} (only 'none' and 'tanh')")
    ctx.emit("gelu", [node.input[0]], node.output[0], {"approximate": approximate}, name=node.name)


@converter("Softmax", since=13)
def softmax(ctx: ImportContext, node):
    ctx.emit("softmax", [node.input[0]], node.output[0], {"axis": int(ctx.attr(node, "axis", -1))}, name=node.name)


@converter("Einsum", since=12)
def einsum(ctx: ImportContext, node):
    ctx.emit("einsum", list(node.input), node.output[0], {"equation": str(ctx.attr(node, "equation"))},
             name=node.name)


@converter("LpPool", since=11)
def lp_pool(ctx: ImportContext, node):
    """``(sum over the window of |x|^p) ** (1/p)``, the sum as ``kernel_size * avg_pool`` with
    padding counted (padded zeros add nothing)."""
    ctx.require_float_input(node)
    x, out = node.input[0], node.output[0]
    p = float(ctx.attr(node, "p", 2))
    powered = ctx.emit("pow_const", [ctx.emit("abs", [x], ctx.temp(out, "abs"))], ctx.temp(out, "pow"),
                       {"exponent": p})
    rank = len(ctx.shape(x))
    if rank == 5:     # 3-d: two 2-d pools (see nn._pool_3d)
        avg = _pool_3d(ctx, node, "avg_pool2d", {"count_include_pad": True}, source=powered,
                       out=ctx.temp(out, "avg"))
    elif rank == 3:   # 1-d: a 2-d pool on rows of height 1
        attrs = dict(_pool_1d_attrs(ctx, node), count_include_pad=True)
        avg = _from_rows(ctx, node, "avg_pool2d", [_as_rows(ctx, powered)], attrs, out=ctx.temp(out, "avg"))
    else:
        attrs = dict(_pool_common(ctx, node, "Lp pooling"), count_include_pad=True)
        avg = ctx.emit("avg_pool2d", [powered], ctx.temp(out, "avg"), attrs)
    count = ctx.add_constant(out + ".count", np.array(float(np.prod(ctx.attr(node, "kernel_shape"))), ctx.dtype(x)))
    total = ctx.emit("mul", [avg, count], ctx.temp(out, "sum"))
    ctx.emit("pow_const", [total], out, {"exponent": 1.0 / p}, name=node.name)
