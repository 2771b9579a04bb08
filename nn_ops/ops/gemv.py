"""Products with few rows: ``Y[i, j] = sum_k A[i, k] * B[k, j]`` for small M (a batch-1 classifier).

The general matmul schedule packs B per column panel, which for one row of A costs as
much as the product.  Here B (typically constant weights laid out [K, N] at compile
time) is streamed once: column blocks of ``4 x lanes`` run in parallel, each keeping its
accumulators in vector registers for all M rows while k walks down B.
"""
from __future__ import annotations

from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .registry import fused_output, register_schedule


def matmul_small_m(A: Tensor, B: Tensor, name: str = "gemv") -> Tensor:
    """``A @ B`` for A [M, K] with small M and B [K, N]; tagged for the streaming schedule."""
    if A.ndim != 2 or B.ndim != 2:
        raise ExprError("matmul_small_m takes two 2-d tensors")
    k = reduce_axis((0, A.shape[1]), name="k")
    return compute((A.shape[0], B.shape[1]), lambda i, j: lw_sum(A[i, k] * B[k, j], axis=k), name=name, tag="gemv")


@register_schedule("gemv", "llvm")
def schedule_gemv(s, op, target):
    own = s[op]
    out_stage = fused_output(s, op)
    lanes = target.lanes(op.outputs[0].dtype)
    block = 4 * lanes
    if out_stage is own:
        i, j = own.op.axis
        k = own.op.reduce_axis[0]
        jo, ji = own.split(j, factor=block)
        own.reorder(jo, i, k, ji)
        jv, jl = own.split(ji, factor=lanes)
        own.unroll(jv)
        own.vectorize(jl)
        own.parallel(jo)
        return
    i, j = out_stage.op.axis
    jo, ji = out_stage.split(j, factor=block)
    out_stage.reorder(jo, i, ji)
    jv, jl = out_stage.split(ji, factor=lanes)
    out_stage.vectorize(jl)
    out_stage.parallel(jo)
    own.compute_at(out_stage, jo)
    ci, cj = own.op.axis
    k = own.op.reduce_axis[0]
    own.reorder(ci, k, cj)
    cv, cl = own.split(cj, factor=lanes)
    own.unroll(cv)
    own.vectorize(cl)
