"""matmul, dense and batch_matmul: compute definitions and the CPU default schedule.

The schedule is the classic register-blocked one, built from public primitives:
the output is tiled into MR x NR blocks; each block accumulates in a local buffer
(``cache_write``) computed at the block, with the rows unrolled and the columns
vectorized so LLVM keeps the whole block in vector registers; B is packed per column
panel (``cache_read``) so the inner loop reads it contiguously; column panels run in
parallel.
"""
from __future__ import annotations

import numpy as np

from ...dsl.expr import Const, cast, const
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...backends.llvm.cpu_facts import core_facts
from ...errors import ExprError
from .registry import (accumulator_and_tile, const_product, parallel_unless_little, register_schedule,
                       too_little_to_share, unroll_long_epilogue)


def _check(cond: bool, message: str):
    if not cond:
        raise ExprError(message)


def _same_extent(a, b) -> bool:
    return (isinstance(a, Const) and isinstance(b, Const) and a.value == b.value) or a is b or bool(a == b)


def matmul(A: Tensor, B: Tensor, name: str = "matmul") -> Tensor:
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` for A of shape (M, K) and B of shape (K, N)."""
    _check(A.ndim == 2 and B.ndim == 2, f"matmul takes two 2-d tensors, got shapes of rank {A.ndim} and {B.ndim}")
    _check(A.dtype == B.dtype, f"matmul of {A.dtype} and {B.dtype}; cast one side first")
    _check(_same_extent(A.shape[1], B.shape[0]),
           f"matmul: A is {A.name}{tuple(map(str, A.shape))} and B is {B.name}{tuple(map(str, B.shape))}; "
           f"A's columns must equal B's rows")
    k = reduce_axis((0, A.shape[1]), name="k")
    acc = _accumulator(A.dtype)
    C = compute((A.shape[0], B.shape[1]), lambda i, j: lw_sum(_wide(A[i, k], acc) * _wide(B[k, j], acc), axis=k),
                name=name, tag="matmul")
    return _narrowed(C, A.dtype, name)


def matmul_panels(A: Tensor, Bp: Tensor, columns: int = None, name: str = "matmul", row_block: int = None) -> Tensor:
    """``C[i, j] = sum_k A[i, k] * B[k, j]`` with B given as column panels ``Bp[ceil(N/nr), K, nr]``
    (``pack_panels``; ``columns`` = N when the last panel is zero-padded): a constant weight
    packed once, where ``matmul``'s schedule packs every panel again on every call.
    ``row_block``: rows of a register tile (the schedule's ``register_tile_rows`` otherwise)."""
    _check(A.ndim == 2 and Bp.ndim == 3, f"matmul_panels takes a 2-d A and panels [N/nr, K, nr], got ranks "
                                         f"{A.ndim} and {Bp.ndim}")
    _check(_same_extent(A.shape[1], Bp.shape[1]), f"matmul_panels: A's columns {A.shape[1]} differ from the "
                                                   f"panels' rows {Bp.shape[1]}")
    panels, nr = int(Bp.shape[0].value), int(Bp.shape[2].value)
    n = panels * nr if columns is None else int(columns)
    _check((panels - 1) * nr < n <= panels * nr,
           f"matmul_panels: {n} columns do not fit {panels} panels of {nr} (between {(panels - 1) * nr + 1} "
           f"and {panels * nr})")
    k = reduce_axis((0, A.shape[1]), name="k")
    return compute((A.shape[0], n),
                   lambda i, j: lw_sum(A[i, k] * Bp[j // nr, k, j % nr], axis=k), name=name, tag="matmul_panels",
                   attrs={} if row_block is None else dict(row_block=int(row_block)))


def pack_panels(b: np.ndarray, nr: int) -> np.ndarray:
    """B [K, N] -> [ceil(N/nr), K, nr]: each panel of ``nr`` columns contiguous, row after row;
    the last one padded with zeros."""
    k, n = b.shape
    panels = -(-n // nr)
    if panels * nr != n:
        b = np.concatenate([b, np.zeros((k, panels * nr - n), b.dtype)], axis=1)
    return b.reshape(k, panels, nr).transpose(1, 0, 2).copy()


def panel_width(target_lanes: int) -> int:
    """Columns of a register tile (and of a packed panel): two vectors."""
    return 2 * target_lanes


def dense(X: Tensor, W: Tensor, bias: Tensor = None, name: str = "dense") -> Tensor:
    """``Y[i, o] = sum_k X[i, k] * W[o, k] (+ bias[o])``; W is [out, in], as ONNX Gemm with transB."""
    _check(X.ndim == 2 and W.ndim == 2, "dense takes a 2-d input and a 2-d weight [out, in]")
    _check(_same_extent(X.shape[1], W.shape[1]), "dense: the input's features must equal the weight's second dim")
    k = reduce_axis((0, X.shape[1]), name="k")
    # W transposed to [in, out]: the schedule packs it per column panel so the inner loop reads rows
    WT = compute((W.shape[1], W.shape[0]), lambda kk, o: W[o, kk], name=name + ".wT", tag="pack")
    Y = compute((X.shape[0], W.shape[0]), lambda i, o: lw_sum(X[i, k] * WT[k, o], axis=k), name=name, tag="dense")
    if bias is None:
        return Y
    _check(bias.ndim == 1 and _same_extent(bias.shape[0], W.shape[0]), "dense: bias must be [out]")
    return compute(Y.shape, lambda i, o: Y[i, o] + bias[o], name=name + ".bias", tag="elemwise")


def batch_matmul(A: Tensor, B: Tensor, name: str = "batch_matmul") -> Tensor:
    """``C[b, i, j] = sum_k A[b, i, k] * B[b, k, j]``."""
    _check(A.ndim == 3 and B.ndim == 3, "batch_matmul takes two 3-d tensors")
    _check(_same_extent(A.shape[0], B.shape[0]) and _same_extent(A.shape[2], B.shape[1]),
           "batch_matmul: batch sizes must match and A's last dim must equal B's middle dim")
    k = reduce_axis((0, A.shape[2]), name="k")
    acc = _accumulator(A.dtype)
    C = compute((A.shape[0], A.shape[1], B.shape[2]),
                lambda b, i, j: lw_sum(_wide(A[b, i, k], acc) * _wide(B[b, k, j], acc), axis=k), name=name,
                tag="batch_matmul")
    return _narrowed(C, A.dtype, name)


def _accumulator(dtype: str) -> str:
    """float16 products are summed in float32 (as numpy and onnxruntime do): a long float16 sum
    loses several ulps of the result."""
    return "float32" if dtype == "float16" else dtype


def _wide(value, acc: str):
    return value if value.dtype == acc else cast(acc, value)


def _narrowed(C: Tensor, dtype: str, name: str) -> Tensor:
    """``C`` cast back to ``dtype`` by an elementwise epilogue (fused into the matmul's tile)."""
    if C.dtype == dtype:
        return C
    return compute(C.shape, lambda *idx: cast(dtype, C[idx]), name=name + ".cast", tag="elemwise")


#: rows of a gemm register tile at most: with 32 registers 8 x 2 vectors of accumulators (16 rows fit,
#: but 8 already hide the FMA latency and keep the packed panel's rows few); re-measure:
#: ``python -m benchmarks.kernels``
MAX_TILE_ROWS = 8


def register_tile_rows(target, dtype: str) -> int:
    """Rows of the gemm schedules' register tile (its columns: ``panel_width``, two vectors): as many
    as fit the target's vector registers beside the two B vectors and one broadcast of A, at most
    ``MAX_TILE_ROWS``: 6 with AVX2's or SSE's 16, 8 with AVX-512's or NEON's 32."""
    return min(MAX_TILE_ROWS, (target.vector_registers - 1 - 2) // 2)


def _blocking(target, dtype: str):
    return register_tile_rows(target, dtype), panel_width(target.lanes(dtype))


#: column panels a row tile runs in turn at most (``_panel_group``)
MAX_PANEL_GROUP = 4


def _panel_group(target, out, depth, nr: int) -> int:
    """Column panels each row tile runs in turn while its rows of A are in L1 (1: one panel per
    pass over A).  One panel per pass reads all of A once per panel, from memory once A outgrows
    L3; a group of panels, packed together, reads it once per group.  The group's packed panels
    stay in half of L2 beside the rows of A: the most panels, up to ``MAX_PANEL_GROUP``, that divide
    the panels and leave two groups per thread.  Where A stays in L3 (2048 x 2048 and below) the
    group cost 1-4 % (more loop overhead, the panels in L2 rather than L1)."""
    rows, columns = out.shape[-2], out.shape[-1]
    if not all(isinstance(e, Const) for e in (rows, columns, depth)):
        return 1
    facts = core_facts(target)
    l2, l3 = facts.cache("L2"), facts.cache("L3")
    itemsize = np.dtype(out.dtype).itemsize
    if l2 is None or l3 is None or rows.value * depth.value * itemsize <= l3:
        return 1
    panels = -(-columns.value // nr)
    panel_bytes = depth.value * nr * itemsize
    threads = max(1, target.num_threads)
    return max((g for g in range(1, MAX_PANEL_GROUP + 1) if panels % g == 0 and panels // g >= 2 * threads
                and g * panel_bytes <= l2 // 2), default=1)


def _schedule_gemm(s, op, target, batch: bool, b_is_transposed: bool):
    """Register-blocked schedule shared by matmul, dense and batch_matmul."""
    out = op.outputs[0]
    mr, nr = _blocking(target, out.dtype)
    mr = op.attrs.get("row_block", mr)
    B_t = op.input_tensors[1]
    CC, C = accumulator_and_tile(s, op)
    tail = "shift"
    if op.tag == "matmul_panels":
        BB = None           # B was packed into panels when the network was compiled
        nr = int(B_t.shape[2].value)
        if int(out.shape[-1].value) % nr:
            tail = "guard"      # a shifted last tile would straddle two panels (not one vector load)
    elif getattr(B_t.op, "tag", "") == "pack":
        BB = B_t            # the op already transposes B: compute that per panel
    else:
        BB = s.cache_read(B_t, "local", [CC])
    columns = out.shape[-1]
    lanes = target.lanes(out.dtype)
    if op.tag != "matmul_panels" and isinstance(columns, Const) and lanes <= columns.value < 2 * nr \
            and columns.value % nr:
        # a column count short of one or two whole panels (an attention score at 31 or 33 tokens):
        # panels of one vector, the last shifted in.  A 31-wide panel was one 31-lane vector that
        # LLVM split badly (64 heads of 31 x 64 x 31: 540 -> 47 us, 14 -> 170 GFLOPS; 32 tokens:
        # 43 us); 33-47 columns took two 32-wide panels, 64 columns of work (33: 96 -> 81 us, 47:
        # 117 -> 102, Zen 5, one thread).  Wider counts keep 32-wide panels (ViT's 197: 298-320 us,
        # 314-317 with 16-wide ones: the narrower tile costs what the fewer columns save)
        nr = lanes
    axes = list(C.op.axis)
    i, j = axes[-2], axes[-1]
    # full tiles everywhere: the last tile moves inwards instead of being guarded
    jo, ji = C.split(j, factor=nr, tail=tail)
    io, ii = C.split(i, factor=mr, tail="shift")
    tile = io           # the loop of one register tile, where the accumulator is computed
    per_batch = const_product(out.shape[1:])     # multiply-adds per batch (with the depth), where constant
    depth = s[CC].op.reduce_axis[0].extent          # a run-time depth: assumed worth sharing
    if batch:
        C.reorder(axes[0], jo, io, ii, ji)
        if isinstance(jo.extent, Const):
            per_batch = per_batch and per_batch // jo.extent.value
            jo = C.fuse(axes[0], jo)
            outer = jo
        else:   # a fused index of symbolic extents is a div/mod bound inference cannot follow: batches in parallel
            outer = axes[0]
            # the last row and column tiles (a run-time count of rows and columns) keep the register
            # tile: rows padded, columns a masked vector (lowering/passes/pad_tail_tiles.py)
            C.pragma(jo, "pad_tails")
    elif "row_block" in op.attrs and not isinstance(i.extent, Const):
        # a kernel for few rows (of a symbolic count): each row tile runs the column panels in
        # parallel, so the panel loop encloses its column tail's guard directly (loop_partition
        # then gives the whole panels constant extents; under a symbolic row loop it did not, and
        # MobileNetV2's 1000-column classifier ran scalar)
        C.reorder(io, jo, ii, ji)
        outer = tile = jo
    else:
        group = _panel_group(target, out, depth, nr) if BB is not None else 1
        if group > 1:
            groups, tile = C.split(jo, factor=group)
            C.reorder(groups, io, tile, ii, ji)
            outer = jo = groups     # B's panels are packed at jo: here a group of them
        else:
            C.reorder(jo, io, ii, ji)
            outer = jo
    C.vectorize(ji)
    unroll_long_epilogue(s, op, C, [ii])
    if not (isinstance(depth, Const) and too_little_to_share(out.shape, depth.value)):
        parallel_unless_little(C, outer, per_batch * depth.value if batch and per_batch and
                               isinstance(depth, Const) else None)
    s[CC].compute_at(C, tile)
    c_axes = list(s[CC].op.axis)
    ci, cj = c_axes[-2], c_axes[-1]
    ck = s[CC].op.reduce_axis[0]
    if batch:
        s[CC].reorder(c_axes[0], ck, ci, cj)
    else:
        s[CC].reorder(ck, ci, cj)
    s[CC].unroll(ci)
    s[CC].vectorize(cj)
    if BB is not None:
        s[BB].compute_at(C, jo)
        if not b_is_transposed and not _pack_transposed(s, BB, B_t, lanes):
            s[BB].vectorize(s[BB].op.axis[-1])


def _pack_transposed(s, BB, B_t, lanes: int) -> bool:
    """Where B is an inlined prologue (a fused attention head split, ``fuse_operators``) that reads its
    source along the reduction axis (K^T of Q K^T: B[b, k, j] = K[b, j, k]), the panel is packed in
    tiles of ``lanes`` x ``lanes`` read as rows of the source and transposed in registers (the pragma
    ``"transpose"``) instead of one gather per vector.  False (nothing done) otherwise."""
    if s[B_t.op].attach_type != "inline" or not _contiguous_along(s, B_t, -2):
        return False
    depth = B_t.shape[-2]
    if not isinstance(depth, Const) or depth.value % lanes:
        return False
    stage = s[BB]
    k, j = stage.op.axis[-2], stage.op.axis[-1]
    ko, ki = stage.split(k, factor=lanes)
    jo, ji = stage.split(j, factor=lanes)
    stage.reorder(ko, jo, ki, ji)
    stage.vectorize(ji)
    stage.pragma(ki, "transpose")
    return True


def _contiguous_along(s, t: Tensor, axis: int) -> bool:
    """Whether consecutive elements along ``axis`` of ``t``, a chain of inlined single-read computations
    (transposes, reshapes) of a tensor in memory, lie next to each other there: the chain's index is
    evaluated at the origin and one step along ``axis`` and along the last, and the steps' distances in
    memory must be constants (the strides may be run-time sizes: a shape-polymorphic K^T)."""
    from ...dsl.arith import simplify_expr
    from ...dsl.expr import TensorLoad
    from ...dsl.tensor import ComputeOp
    from ...dsl.visitor import post_order_visit, substitute

    def flat(point):
        tensor, index = t, [const(v) for v in point]
        while isinstance(tensor.op, ComputeOp) and s[tensor.op].attach_type == "inline":
            loads = []
            post_order_visit(tensor.op.body[0], lambda n: loads.append(n) if isinstance(n, TensorLoad) else None)
            if len({id(n.tensor) for n in loads}) != 1:
                return None
            mapping = {iv.var: e for iv, e in zip(tensor.op.axis, index)}
            index = [simplify_expr(substitute(e, mapping)) for e in loads[0].indices]
            tensor = loads[0].tensor
        if not all(isinstance(e, Const) for e in index):
            return None
        address = const(0)
        for e, d in zip(index, tensor.shape):       # strides may be run-time sizes; the steps are not
            address = address * d + e
        return address

    if any(isinstance(d, Const) and d.value < 2 for d in t.shape[-2:]):
        return False
    origin = [0] * len(t.shape)
    step, across = list(origin), list(origin)
    step[axis] = 1
    across[-1] = 1
    base, along, last = flat(origin), flat(step), flat(across)
    if any(a is None for a in (base, along, last)):
        return False
    along, last = simplify_expr(along - base), simplify_expr(last - base)
    return isinstance(along, Const) and along.value == 1 and not (isinstance(last, Const) and last.value == 1)


@register_schedule("matmul", "llvm")
def schedule_matmul(s, op, target):
    _schedule_gemm(s, op, target, batch=False, b_is_transposed=False)


@register_schedule("matmul_panels", "llvm")
def schedule_matmul_panels(s, op, target):
    _schedule_gemm(s, op, target, batch=False, b_is_transposed=False)


@register_schedule("dense", "llvm")
def schedule_dense(s, op, target):
    _schedule_gemm(s, op, target, batch=False, b_is_transposed=True)


@register_schedule("batch_matmul", "llvm")
def schedule_batch_matmul(s, op, target):
    _schedule_gemm(s, op, target, batch=True, b_is_transposed=False)
