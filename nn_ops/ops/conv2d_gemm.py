"""conv2d as an implicit GEMM: the form the GPU schedule tiles like a matmul.

``Y[n, o, y, x] = sum_r W2[o, r] * cols[r, q]`` with ``W2 = W.reshape(OC, C*KH*KW)`` (a free
reshape of the ONNX weight) and ``q = (n*OH + y)*OW + x`` running over every output pixel
of every image; ``cols[r, q]`` is the input value tap ``r`` of pixel ``q`` reads (the
padding inlined), never stored: the schedule inlines it into the shared-memory copy of a
K-step panel.  So a convolution is one matrix product of ``OC x K`` by ``K x N*OH*OW``
(3x3 64->64 at 56x56: 64 x 576 by 576 x 3136), whatever its kernel, stride or padding, and
the images are part of the columns: batch 1 and batch 32 tile the same way.  Used for
``groups == 1`` convolutions with constant weights on the GPU (``passes.choose_cuda_conv``).
"""
from __future__ import annotations

from ...dsl.expr import binary, const, if_then_else
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError


def conv2d_implicit_gemm(X: Tensor, W2: Tensor, kernel, stride, padding, dilation,
                         name: str = "conv2d", columns_multiple: int = 1, out_channels=None) -> Tensor:
    """``X [N, C, H, W]`` convolved with ``W2 [OC, C*KH*KW]`` (the weight reshaped); Y [N, OC, OH, OW].

    For the tensor cores (whole tiles only) the product may be padded: ``columns_multiple`` pads
    its columns (the pixels of all images) with zero columns to a multiple of it; a W2 with more
    columns than ``C*KH*KW`` (zeros: its taps read 0) or more rows than ``out_channels`` pads the
    reduction and the rows.  Y reads the first ``out_channels`` rows and ``N*OH*OW`` columns."""
    if X.ndim != 4 or W2.ndim != 2:
        raise ExprError(f"conv2d_implicit_gemm takes X [N, C, H, W] and W2 [OC, C*KH*KW], got ranks "
                        f"{X.ndim} and {W2.ndim}")
    n, c, h, w = (int(d.value) for d in X.shape)
    rows, k = (int(d.value) for d in W2.shape)
    oc = rows if out_channels is None else int(out_channels)
    kh, kw = kernel
    sh, sw = stride
    dh, dw = dilation
    pt, pl, pb, pr = padding
    taps = c * kh * kw
    if k < taps or oc > rows or (k > taps and out_channels is None):
        raise ExprError(f"conv2d_implicit_gemm: W2 is {rows} x {k}, but {oc} output channels and C*KH*KW = "
                        f"{c}*{kh}*{kw} = {taps} taps need at least {oc} x {taps} (more only as zero padding, "
                        f"with out_channels given)")
    oh = (h + pt + pb - (kh - 1) * dh - 1) // sh + 1
    ow = (w + pl + pr - (kw - 1) * dw - 1) // sw + 1
    pixels = oh * ow
    columns = -(-n * pixels // columns_multiple) * columns_multiple

    def tap(q, r):
        nn, p, channel = q // pixels, q % pixels, r // (kh * kw)
        if columns != n * pixels:     # a padding column reads image n - 1's pixel, masked to 0
            nn = binary("min", nn, const(n - 1))
        if k != taps:                 # so does a padding tap, with channel c - 1
            channel = binary("min", channel, const(c - 1))
        yy = (p // ow) * sh + (r // kw % kh) * dh - pt
        xx = (p % ow) * sw + (r % kw) * dw - pl
        inside = (yy >= 0) & (yy < h) & (xx >= 0) & (xx < w)
        if columns != n * pixels:
            inside = inside & (q < n * pixels)
        if k != taps:
            inside = inside & (r < taps)
        return if_then_else(inside, X[nn, channel, yy, xx], 0.0)
    cols = compute((k, columns), lambda r, q: tap(q, r), name=name + ".cols", tag="conv2d.im2col")
    rk = reduce_axis((0, k), name="rk")
    Yf = compute((rows, columns), lambda o, q: lw_sum(W2[o, rk] * cols[rk, q], axis=rk),
                 name=name + ".gemm", tag="conv2d.gemm")
    # fused (n, y, x) in this order, so that (q // P) * P + (q % P) // OW * OW + (q % P) % OW folds to q
    return compute((n, oc, oh, ow), lambda nn, o, yy, xx: Yf[o, nn * pixels + (yy * ow + xx)], name=name,
                   tag="conv2d_gemm", attrs=dict(kernel=(kh, kw), stride=(sh, sw), padding=(pt, pl, pb, pr),
                                                 dilation=(dh, dw), in_channels=c, out_channels=oc))
