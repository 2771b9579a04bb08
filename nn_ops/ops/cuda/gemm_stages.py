"""The stages every GEMM-shaped CUDA schedule starts from: the product's accumulator and the
block's cooperative copies of its operands into shared memory (``matmul.py``: threads with register
blocks; ``matmul_tensor_cores.py``: warps; ``conv2d_gemm.py``: the implicit-GEMM convolution)."""
from __future__ import annotations

from ....backends.cuda.build import cuda_arch, has_tensor_cores
from ....dsl.tensor import PlaceholderOp, thread_axis
from ..registry import fused_output

VEC = 4             # float4 copies into shared memory


def cooperative_copy(s, cache, threads_y: int, threads_x: int, rows_fastest: bool = False) -> None:
    """All threads of the block copy ``cache``'s region: float4 per thread, thread axes like the consumer's.

    ``rows_fastest``: neighbouring threads take neighbouring rows (the same float4 column of
    each), for a copy stored transposed: their scalar stores then fall in different banks."""
    stage = s[cache]
    *outer, inner = stage.op.axis
    inner, vec = stage.split(inner, factor=VEC)    # the lanes stay outside any index division: one float4
    if rows_fastest:
        *lead, rows = outer
        stage.reorder(*lead, inner, rows, vec)
        outer, inner = [*lead, inner], rows
    rest = stage.fuse(*outer, inner) if outer else inner
    rest, tx = stage.split(rest, factor=threads_x)
    rest, ty = stage.split(rest, factor=threads_y)
    stage.bind(ty, thread_axis("threadIdx.y"))
    stage.bind(tx, thread_axis("threadIdx.x"))
    stage.vectorize(vec)


def gemm_stages(s, op, scope: str):
    """(the stage to tile, the product's accumulator in ``scope``, A, B) of GEMM ``op``: with a fused
    epilogue the output is tiled and ``op`` accumulates inside the tile, else a ``scope`` cache of
    it does; dense's transposed weight (a stage of its own) is inlined into its reader."""
    final = fused_output(s, op)
    if final is s[op]:
        C, acc = s[op], s.cache_write(op.outputs[0], scope)
    else:
        C, acc = final, op.outputs[0]
        if scope != "local":   # (an intermediate computed inside a kernel is per thread already)
            s[acc].set_scope(scope)
    A_t, B_t = s[acc].op.input_tensors[:2]
    if getattr(B_t.op, "tag", "") == "pack":
        s[B_t].compute_inline()
    return C, acc, A_t, B_t


def copied_as_is(operands, target) -> bool:
    """Whether cp.async can fill the shared copies of ``operands``: the ``target`` GPU has it
    (sm_80 and newer) and the copies take inputs as they lie (a computed operand, such as dense's
    transposed weight or im2col, cannot be copied asynchronously)."""
    return has_tensor_cores(cuda_arch(target)) and all(isinstance(t.op, PlaceholderOp) for t in operands)
