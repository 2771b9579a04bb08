"""conv2d_transpose: the transpose (input gradient) of conv2d, as ONNX ConvTranspose and PyTorch's
ConvTranspose2d compute it, with its CPU default schedule.

Each input pixel scatters ``X[n, c, i, j] * W[c, o, ky, kx]`` to output pixel
``(i*sh + ky*dh - pt, j*sw + kx*dw - pl)``.  Written as a gather, so that each output
element is one reduction and the usual schedules apply::

    Y[n, o, y, x] = sum over c (o's group), ky, kx of X[n, c, iy, ix] * W[c, o % OCg, ky, kx]
    with iy = (y + pt - ky*dh) / sh, ix = (x + pl - kx*dw) / sw

where a term counts only when both divisions are exact and ``(iy, ix)`` lies inside X
(``if_then_else``: the read happens only then).  The output is
``OH = (H - 1)*sh + (KH - 1)*dh + 1 + output_padding_h - pt - pb`` (likewise OW).
Correct first: with stride ``s`` only one tap in ``s*s`` contributes, and the others cost
a compare each.
"""
from __future__ import annotations

from ...dsl.expr import Const, if_then_else
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .elementwise import extents
from .registry import fused_output, register_schedule

TAG = "conv2d_transpose"


def _ints(value, n: int, what: str, low):
    """``value`` (an int or ``n`` ints) as an n-tuple, each at least ``low`` (None: any int)."""
    values = (value,) * n if isinstance(value, int) and not isinstance(value, bool) else value
    if not isinstance(values, (tuple, list)) or len(values) != n or \
            not all(isinstance(v, int) and not isinstance(v, bool) for v in values):
        raise ExprError(f"conv2d_transpose: {what} must be an int or {n} ints, got {value!r}")
    if low is not None and any(v < low for v in values):
        raise ExprError(f"conv2d_transpose: {what} must be at least {low}, got {value!r}")
    return tuple(values)


def _static(t: Tensor, what: str):
    if not all(isinstance(d, Const) for d in t.shape):
        raise ExprError(f"conv2d_transpose: {what} {t.name} must have a static shape, got "
                        f"{tuple(map(str, t.shape))}")
    return [int(d.value) for d in t.shape]


def conv2d_transpose(X: Tensor, W: Tensor, stride=1, padding=0, output_padding=0, dilation=1, groups: int = 1,
                     name: str = "conv2d_transpose") -> Tensor:
    """Transposed 2-d convolution of X [N, C, H, W] with W [C, OC/groups, KH, KW] (ONNX's weight layout).

    ``stride``, ``dilation``, ``output_padding``: an int or a pair (h, w); ``padding``: an
    int, a pair or (top, left, bottom, right), cropped from the full output (a negative
    pad adds zero rows or columns instead, which is what ONNX's ``output_shape`` can ask
    for); ``output_padding`` adds rows/columns at the bottom/right.  Returns Y [N, OC, OH, OW].
    """
    if not (isinstance(X, Tensor) and isinstance(W, Tensor)):
        raise ExprError("conv2d_transpose takes two tensors X and W")
    if X.ndim != 4 or W.ndim != 4:
        raise ExprError(f"conv2d_transpose: X [N, C, H, W] and W [C, OC/groups, KH, KW] must be 4-d, got shapes "
                        f"{tuple(map(str, X.shape))} and {tuple(map(str, W.shape))}")
    if X.dtype != W.dtype:
        raise ExprError(f"conv2d_transpose of {X.dtype} and {W.dtype}; cast one side first")
    if not isinstance(groups, int) or isinstance(groups, bool) or groups < 1:
        raise ExprError(f"conv2d_transpose: groups must be a positive int, got {groups!r}")
    sh, sw = _ints(stride, 2, "stride", 1)
    dh, dw = _ints(dilation, 2, "dilation", 1)
    oph, opw = _ints(output_padding, 2, "output_padding", 0)
    four = isinstance(padding, (tuple, list)) and len(padding) == 4
    pt, pl, pb, pr = _ints(padding, 4, "padding", None) if four else _ints(padding, 2, "padding", None) * 2
    n, c, h, w = extents(X)          # batch, height and width may be symbolic (a compile-once network)
    if not isinstance(c, int):
        raise ExprError(f"conv2d_transpose: the input channels of {X.name} must be static, got {c}")
    wc, ocg, kh, kw = _static(W, "weight")
    if wc != c:
        raise ExprError(f"conv2d_transpose: W has {wc} input channels but X has C={c} (W is [C, OC/groups, KH, KW])")
    if c % groups:
        raise ExprError(f"conv2d_transpose: groups={groups} does not divide the input channels C={c}")
    oh = (h - 1) * sh + (kh - 1) * dh + 1 + oph - pt - pb
    ow = (w - 1) * sw + (kw - 1) * dw + 1 + opw - pl - pr
    if isinstance(oh, int) and isinstance(ow, int) and (oh < 1 or ow < 1):
        raise ExprError(f"conv2d_transpose: the padding {(pt, pl, pb, pr)} leaves an output of {oh}x{ow}")
    cg = c // groups
    attrs = dict(stride=(sh, sw), padding=(pt, pl, pb, pr), output_padding=(oph, opw), dilation=(dh, dw),
                 groups=groups, kernel=(kh, kw), in_channels=c, out_channels=ocg * groups)
    rc = reduce_axis((0, cg), name="rc")
    ry = reduce_axis((0, kh), name="ry")
    rx = reduce_axis((0, kw), name="rx")

    def body(nn, o, yy, xx):
        cc = rc if groups == 1 else (o // ocg) * cg + rc
        ty, tx = yy + pt - ry * dh, xx + pl - rx * dw       # sh * iy, sw * ix
        inside = (ty >= 0) & (ty < h * sh) & (tx >= 0) & (tx < w * sw) & (ty % sh == 0) & (tx % sw == 0)
        term = X[nn, cc, ty // sh, tx // sw] * W[cc, o if groups == 1 else o % ocg, ry, rx]
        return lw_sum(if_then_else(inside, term, 0), axis=[rc, ry, rx])

    return compute((n, ocg * groups, oh, ow), body, name=name, tag=TAG, attrs=attrs)


@register_schedule(TAG, "llvm")
def schedule_conv2d_transpose(s, op, target):
    """Output rows in parallel; per row, vectors of output pixels accumulate every tap in registers
    (the loop order ``rows, pixel vector, c, ky, kx, lanes``, as the depthwise conv2d's).  A fused
    epilogue (bias, relu) is the tiled stage and computes the sums per pixel vector."""
    out = op.outputs[0]
    ow = int(out.shape[3].value) if isinstance(out.shape[3], Const) else None     # None: symbolic
    lanes = next((v for v in (target.lanes(out.dtype), 8, 4) if ow is None or v <= ow), 1)
    Y = fused_output(s, op)
    conv = s[op]
    n, o, y, x = Y.op.axis
    rows = Y.fuse(n, o, y)
    Y.parallel(rows)
    if lanes == 1:
        if Y is not conv:
            conv.compute_at(Y, rows)
        return
    # an epilogue may recompute a shifted last vector; the reduction itself must not (it guards)
    # (a symbolic width may be under a vector: guarded, and partitioned into whole vectors and a tail)
    xo, xi = Y.split(x, factor=lanes, tail="shift" if ow is not None and ow % lanes and Y is not conv else "guard")
    Y.vectorize(xi)
    rc, ry, rx = conv.op.reduce_axis
    if Y is conv:
        conv.reorder(rows, xo, rc, ry, rx, xi)
        return
    conv.compute_at(Y, xo)
    cn, co, cy, cx = conv.op.axis
    conv.reorder(cn, co, cy, rc, ry, rx, cx)
    conv.vectorize(cx)
