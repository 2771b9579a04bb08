"""Layer normalization and GELU: the transformer ops around the matmuls.

``layer_norm`` normalises over the trailing axes from ``axis`` on: two reductions per
row (the mean, then the mean squared deviation: two passes, as numerically safe as the
references) and one elementwise stage.  Its schedule runs rows in parallel and computes
both statistics inside the row loop, so each row is read from cache, not memory.
"""
from __future__ import annotations

import math
from typing import Optional, Sequence

from ...dsl.expr import cast, const
from ...dsl.intrinsics import erf, rsqrt, tanh
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .elementwise import extents, static_shape, unary
from .registry import compute_all_at, register_schedule, vectorized_reduction


def _split_axis(X: Tensor, axis: int):
    shape = extents(X)          # the rows may be symbolic (shape-polymorphic kernels); see layer_norm_stats
    nd = len(shape)
    a = axis + nd if axis < 0 else axis
    if not 0 <= a < nd:
        raise ExprError(f"layer_norm: axis {axis} is out of range for a tensor of rank {nd}")
    return shape, a


def _inner_read(T: Tensor, inner_idx: Sequence, n_inner: int):
    """``T`` (shaped like, or broadcastable to, the normalised axes) read at ``inner_idx``."""
    shape = static_shape(T)
    if len(shape) > n_inner:
        if any(d != 1 for d in shape[:len(shape) - n_inner]):
            raise ExprError(f"layer_norm: scale/bias of shape {shape} does not broadcast to the normalised axes")
        shape = shape[len(shape) - n_inner:]
        lead = (0,) * (len(static_shape(T)) - n_inner)
    else:
        lead = ()
    tail = inner_idx[n_inner - len(shape):]
    return T[lead + tuple(0 if d == 1 else i for d, i in zip(shape, tail))]


def layer_norm_stats(X: Tensor, axis: int = -1, epsilon: float = 1e-5, name: str = "layer_norm"):
    """(mean, inverse standard deviation) over the axes from ``axis`` on, shaped ``X.shape[:axis]``."""
    shape, a = _split_axis(X, axis)
    outer, inner = shape[:a], shape[a:]
    if not all(isinstance(d, int) for d in inner):
        raise ExprError(f"layer_norm: the normalised axes {inner} must have constant extents")
    n = math.prod(inner)
    rows = outer or (1,)

    def x_at(row_idx, inner_idx):
        return X[tuple(row_idx[:len(outer)]) + tuple(inner_idx)]

    r1 = [reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(inner)]
    mean = compute(rows, lambda *i: lw_sum(x_at(i, r1) * const(1.0 / n, X.dtype), axis=r1), name=name + ".mean",
                   tag="layer_norm_stat")
    r2 = [reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(inner)]

    def sq_dev(i):
        d = x_at(i, r2) - mean[i]
        return d * d * const(1.0 / n, X.dtype)

    var = compute(rows, lambda *i: lw_sum(sq_dev(i), axis=r2), name=name + ".var", tag="layer_norm_stat")
    inv_std = compute(rows, lambda *i: rsqrt(var[i] + const(epsilon, X.dtype)), name=name + ".inv_std",
                      tag="elemwise")
    return mean, inv_std


def layer_norm(X: Tensor, scale: Tensor, bias: Optional[Tensor] = None, axis: int = -1, epsilon: float = 1e-5,
               name: str = "layer_norm") -> Tensor:
    """``(X - mean) / sqrt(var + epsilon) * scale + bias`` over the axes from ``axis`` on."""
    shape, a = _split_axis(X, axis)
    n_inner = len(shape) - a
    mean, inv_std = layer_norm_stats(X, axis, epsilon, name)

    def body(*idx):
        row = idx[:a] if a else (0,)
        inner = idx[a:]
        y = (X[idx] - mean[row]) * inv_std[row] * _inner_read(scale, inner, n_inner)
        return y + _inner_read(bias, inner, n_inner) if bias is not None else y

    return compute(shape, body, name=name, tag="layer_norm", attrs={"row_axes": a})


def group_norm(X: Tensor, scale: Tensor, bias: Tensor, groups: int, epsilon: float = 1e-5,
               name: str = "group_norm") -> Tensor:
    """``(X - mean) / sqrt(var + epsilon) * scale[c] + bias[c]``, the statistics of each image and
    group of ``C / groups`` channels over those channels and the axes from 2 on (ONNX
    GroupNormalization from opset 21; InstanceNormalization is ``groups = C``).  The sizes after
    the channels may be symbolic (the count is then computed per call).  Two reductions (the mean,
    then the mean squared deviation: two passes, as numerically safe as the references) and one
    elementwise stage."""
    shape = extents(X)
    if len(shape) < 3 or not isinstance(shape[1], int) or shape[1] % groups:
        raise ExprError(f"group_norm: {groups} groups of an input of shape {shape} (N, C divisible by the groups, "
                        f"and at least one more axis)")
    n, channels, rest = shape[0], shape[1], shape[2:]
    per = channels // groups
    count = per * math.prod(rest)
    inverse = const(1.0 / count, X.dtype) if isinstance(count, int) else const(1.0, X.dtype) / cast(X.dtype, count)

    def statistic(value, which):
        rc, rr = reduce_axis((0, per), name="rc"), [reduce_axis((0, d), name=f"r{k}") for k, d in enumerate(rest)]
        return compute((n, groups), lambda i, g: lw_sum(value(X[(i, g * per + rc) + tuple(rr)], i, g) * inverse,
                                                        axis=[rc] + rr), name=f"{name}.{which}", tag="reduce")
    mean = statistic(lambda v, i, g: v, "mean")
    var = statistic(lambda v, i, g: (v - mean[i, g]) * (v - mean[i, g]), "var")
    eps = const(epsilon, X.dtype)
    return compute(shape, lambda i, c, *r: (X[(i, c) + r] - mean[i, c // per]) * rsqrt(var[i, c // per] + eps)
                   * scale[c] + bias[c], name=name, tag="elemwise")


def layer_norm_stat_output(X: Tensor, which: str, axis: int = -1, epsilon: float = 1e-5) -> Tensor:
    """ONNX LayerNormalization's optional outputs: Mean or InvStdDev, shaped like X with 1s from ``axis``."""
    shape, a = _split_axis(X, axis)
    mean, inv_std = layer_norm_stats(X, axis, epsilon, "layer_norm")
    src = mean if which == "mean" else inv_std
    out_shape = shape[:a] + (1,) * (len(shape) - a)
    return compute(out_shape, lambda *idx: src[idx[:a] if a else (0,)], name=f"layer_norm.{which}",
                   tag="layer_norm", attrs={"row_axes": a})


def gelu_value(v, approximate: str = "none"):
    """``v * Phi(v)`` of one element: with erf (exact) or the tanh approximation (``"tanh"``)."""
    if approximate == "none":
        return v * const(0.5, v.dtype) * (const(1.0, v.dtype) + erf(v * const(1 / math.sqrt(2), v.dtype)))
    if approximate == "tanh":
        inner = const(math.sqrt(2 / math.pi), v.dtype) * (v + const(0.044715, v.dtype) * v * v * v)
        return v * const(0.5, v.dtype) * (const(1.0, v.dtype) + tanh(inner))
    raise ExprError(f"gelu: approximate={approximate!r}; use 'none' or 'tanh'")


def gelu(X: Tensor, approximate: str = "none", name: str = "gelu") -> Tensor:
    """``x * Phi(x)``: with erf (exact) or the tanh approximation (``approximate="tanh"``)."""
    if approximate not in ("none", "tanh"):
        raise ExprError(f"gelu: approximate={approximate!r}; use 'none' or 'tanh'")
    return unary(lambda v: gelu_value(v, approximate), X, name)


def _stat_ops(op):
    """The layer_norm_stat stages ``op`` reads, directly or through inlined elementwise stages."""
    found, stack, seen = [], [op], set()
    while stack:
        cur = stack.pop()
        for t in getattr(cur, "input_tensors", []):
            if id(t.op) in seen:
                continue
            seen.add(id(t.op))
            tag = getattr(t.op, "tag", "")
            if tag == "layer_norm_stat":
                found.append(t)
            if tag in ("layer_norm_stat", "elemwise"):
                stack.append(t.op)
    return found


@register_schedule("layer_norm", "llvm")
def schedule_layer_norm(s, op, target):
    """Rows in parallel; per row both statistics (vector-accumulated when one axis is
    normalised) and the vectorized output."""
    from ...dsl.expr import Const
    stage = s[op]
    n_rows = int(op.attrs.get("row_axes", 0))
    axes = list(stage.leaf_iter_vars)
    row_axes, inner_axes = axes[:n_rows], axes[n_rows:]
    lanes = target.lanes(op.outputs[0].dtype)
    stats = _stat_ops(op)
    if len(inner_axes) == 1 and isinstance(inner_axes[0].extent, Const) and inner_axes[0].extent.value >= lanes:
        stats += [vectorized_reduction(s, st, lanes) for st in list(stats)]
        _, vec = stage.split(inner_axes[0], factor=lanes)
        stage.vectorize(vec)
    if not row_axes:
        return
    row = stage.fuse(*row_axes) if len(row_axes) > 1 else row_axes[0]
    stage.parallel(row)
    compute_all_at(s, stats, stage, row)
