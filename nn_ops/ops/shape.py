"""Data movement as index arithmetic: reshape, transpose, concat, pad; and softmax.

reshape/transpose/concat/pad are tagged ``"injective"`` (inlined into consumers by the
registry).  softmax is three stages: a max reduction, a sum-of-exponentials reduction and
an elementwise division.
"""
from __future__ import annotations

import math
from typing import Sequence

from ...dsl.expr import Const, cast, const, if_then_else, logical_and, select
from ...dsl.intrinsics import exp, log as lw_log
from ...dsl.reduction import max as lw_max, sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .elementwise import extents, static_shape
from .registry import (compute_all_at, constant_divisor_prefix, register_schedule, schedule_injective,
                       vectorized_reduction)


def reshape(X: Tensor, shape: Sequence[int], name: str = "reshape") -> Tensor:
    """Row-major reshape to a static ``shape`` (same number of elements).

    The axes are matched in runs of equal size (``_axis_runs``): an axis of the same extent on both
    sides is read by its own index, and only a run that merges or splits axes takes a flat index
    apart with divisions, so that a reshape which adds or drops unit axes (an attention head
    split's [1, H, S, D] -> [H, S, D]) stays plain index arithmetic however its index is bound."""
    src = static_shape(X)
    shape = tuple(int(d) for d in shape)
    if math.prod(src) != math.prod(shape):
        raise ExprError(f"cannot reshape {src} ({math.prod(src)} elements) to {shape} ({math.prod(shape)})")
    runs = _axis_runs(src, shape)

    def fcompute(*idx):
        return X[index_through_runs(idx, runs, src, shape, const(0))]

    return compute(shape, fcompute, name=name, tag="injective")


def index_through_runs(idx, runs, src: Sequence, dst: Sequence, zero) -> tuple:
    """The source index that a reshape from ``src`` to ``dst`` reads at output index ``idx``, its axes
    matched in ``runs`` ((dst axes, src axes) of equal products; ``zero`` at the unit axes left out).
    Only the sizes of a run's inner axes are read: a run's first size may be symbolic."""
    index = [zero] * len(src)
    for out_axes, in_axes in runs:
        if len(out_axes) == 1 and len(in_axes) == 1:
            index[in_axes[0]] = idx[out_axes[0]]
            continue
        flat = None
        for k, a in enumerate(out_axes):
            stride = math.prod(dst[b] for b in out_axes[k + 1:])
            term = idx[a] * stride if stride != 1 else idx[a]
            flat = term if flat is None else flat + term
        for k, a in enumerate(in_axes):
            stride = math.prod(src[b] for b in in_axes[k + 1:])
            q = flat // stride if stride != 1 else flat
            index[a] = q % src[a] if k else q
    return tuple(index)


def _axis_runs(src: Sequence[int], dst: Sequence[int]):
    """The axes of a reshape from ``src`` to ``dst`` (same size) in runs ``(dst axes, src axes)`` of
    equal products, as short as they can be, unit axes left out (a src unit axis is read at 0)."""
    outs = [a for a, d in enumerate(dst) if d != 1]
    ins = [a for a, d in enumerate(src) if d != 1]
    if 0 in src:            # no elements: one run (its body is never evaluated)
        return [(outs, ins)] if outs and ins else []
    runs, o, i = [], 0, 0
    while o < len(outs):
        run_out, run_in = [outs[o]], [ins[i]]
        po, pi = dst[outs[o]], src[ins[i]]
        o, i = o + 1, i + 1
        while po != pi:
            if po < pi:
                run_out.append(outs[o])
                po *= dst[outs[o]]
                o += 1
            else:
                run_in.append(ins[i])
                pi *= src[ins[i]]
                i += 1
        runs.append((run_out, run_in))
    return runs


def transpose(X: Tensor, perm: Sequence[int], name: str = "transpose") -> Tensor:
    src = extents(X)
    perm = [int(p) for p in perm]
    if sorted(perm) != list(range(len(src))):
        raise ExprError(f"transpose: {perm} is not a permutation of {len(src)} axes")
    shape = tuple(src[p] for p in perm)

    def fcompute(*idx):
        index = [None] * len(src)
        for out_axis, p in enumerate(perm):
            index[p] = idx[out_axis]
        return X[tuple(index)]

    return compute(shape, fcompute, name=name, tag="injective", attrs=dict(perm=tuple(perm)))


def concat(tensors: Sequence[Tensor], axis: int, name: str = "concat") -> Tensor:
    """``numpy.concatenate``; sizes may be symbolic (the same expression along the other axes)."""
    shapes = [extents(t) for t in tensors]
    nd = len(shapes[0])
    axis = axis + nd if axis < 0 else axis
    for s in shapes[1:]:
        if len(s) != nd or any(a != b for k, (a, b) in enumerate(zip(s, shapes[0])) if k != axis):
            raise ExprError(f"concat along axis {axis} of incompatible shapes {shapes}")
    offsets = [0]
    for s in shapes:
        offsets.append(offsets[-1] + s[axis])
    shape = list(shapes[0])
    shape[axis] = offsets[-1]

    def fcompute(*idx):
        i = idx[axis]

        def read(k):
            index = list(idx)
            lo = offsets[k]
            index[axis] = i if isinstance(lo, int) and lo == 0 else i - lo     # (lo: symbolic after one)
            return tensors[k][tuple(index)]

        def pick(first, end):
            """Piece ``first .. end - 1`` that holds ``i``: a balanced tree of selects, so a concat of
            many pieces (an unrolled recurrent layer's outputs, one per step) nests log2(n) deep, not n."""
            if end - first == 1:
                return read(first)
            middle = (first + end) // 2
            return if_then_else(i < offsets[middle], pick(first, middle), pick(middle, end))
        return pick(0, len(tensors))

    return compute(tuple(shape), fcompute, name=name, tag="injective")


def pad(X: Tensor, pads_before: Sequence[int], pads_after: Sequence[int], value: float = 0.0,
        name: str = "pad") -> Tensor:
    src = extents(X)            # symbolic extents allowed (shape-polymorphic kernels)
    shape = tuple(d + a + b for d, a, b in zip(src, pads_before, pads_after))

    def fcompute(*idx):
        conds, index = None, []
        for i, d, lo, hi in zip(idx, src, pads_before, pads_after):
            j = i - lo
            index.append(j)
            if lo or hi:
                c = logical_and(j >= 0, j < d)
                conds = c if conds is None else logical_and(conds, c)
        read = X[tuple(index)]
        return read if conds is None else if_then_else(conds, read, const(value, X.dtype))

    return compute(shape, fcompute, name=name, tag="injective")


def softmax(X: Tensor, axis: int = -1, name: str = "softmax", log: bool = False,
            zero_masked_rows: bool = False) -> Tensor:
    """``exp(x - max) / sum(exp(x - max))`` along ``axis`` (``log``: its logarithm, computed as
    ``x - max - log(sum(exp(x - max)))``, exact where the exponentials underflow).
    ``zero_masked_rows``: a row all -inf (attention's keys all masked out) gives zeros, not NaN.

    Four stages: the row maximum, the exponentials (stored once, not recomputed by the
    sum and the division), their sum, and the scaling.  Along the last axis the default
    schedule computes all of them per row, vectorized (see ``schedule_softmax``).
    """
    shape = extents(X)          # symbolic extents allowed (shape-polymorphic kernels)
    nd = len(shape)
    axis = axis + nd if axis < 0 else axis
    rest = tuple(d for k, d in enumerate(shape) if k != axis)

    def with_axis(idx, r):
        idx = list(idx)
        idx.insert(axis, r)
        return tuple(idx)

    def drop(idx):
        return tuple(i for k, i in enumerate(idx) if k != axis)

    k1 = reduce_axis((0, shape[axis]), name="k")
    M = compute(rest, lambda *idx: lw_max(X[with_axis(idx, k1)], axis=k1), name=name + ".max", tag="softmax_stat")

    def top(idx):       # (a masked row's max, -inf, as 0: its exponentials are then 0, not NaN)
        m = M[drop(idx)]
        return select(m == const(-math.inf, X.dtype), const(0.0, X.dtype), m) if zero_masked_rows else m
    E = compute(shape, lambda *idx: exp(X[idx] - top(idx)), name=name + ".exp", tag="softmax_stat")
    k2 = reduce_axis((0, shape[axis]), name="k")
    S = compute(rest, lambda *idx: lw_sum(E[with_axis(idx, k2)], axis=k2), name=name + ".sum", tag="softmax_stat")
    if log:
        return compute(shape, lambda *idx: X[idx] - M[drop(idx)] - lw_log(S[drop(idx)]), name=name, tag="softmax",
                       attrs={"axis": axis})
    one, zero = const(1.0, X.dtype), const(0.0, X.dtype)

    def scaled(*idx):
        total = S[drop(idx)]
        return select(total == zero, zero, E[idx] * (one / total)) if zero_masked_rows else E[idx] * (one / total)
    return compute(shape, scaled, name=name, tag="softmax", attrs={"axis": axis})


@register_schedule("softmax", "llvm")
def schedule_softmax(s, op, target):
    """One parallel loop over rows; per row: max, exp, sum and scale, each vectorized.

    The two reductions are split by the vector width and factored (``rfactor``) so they
    accumulate whole vectors, then add up one vector at the end.  Softmax along an inner
    axis (not the last) computes each statistic as its own parallel loop instead.
    """
    from ...dsl.expr import Const
    stage = s[op]
    out = op.outputs[0]
    stats, stack = {}, list(op.input_tensors)       # max, exp and sum (a log-softmax reads max and sum)
    while stack:
        t = stack.pop()
        if getattr(t.op, "tag", "") == "softmax_stat":
            stats[t.op.name.rsplit(".", 1)[1]] = t
            stack.extend(t.op.input_tensors)
    M, E, S = stats["max"], stats["exp"], stats["sum"]
    axes = list(stage.leaf_iter_vars)
    nd = len(axes)
    lanes = target.lanes(out.dtype)
    if int(op.attrs.get("axis", nd - 1)) != nd - 1 or nd == 1:
        for stat in (M, E, S):
            (schedule_reduce if stat.op.reduce_axis else schedule_injective)(s, stat.op, target)
        schedule_injective(s, op, target)
        return
    n = axes[-1].extent
    factored = []
    if not isinstance(n, Const) or n.value >= lanes:   # a symbolic row: full vectors + a guarded tail
        factored = [vectorized_reduction(s, stat, lanes) for stat in (M, S)]
        for st in (stage, s[E]):
            _, vec = st.split(st.leaf_iter_vars[-1], factor=lanes)
            st.vectorize(vec)
    rows = axes[:-1]
    # rows of symbolic extents are fused only as far as their index comes apart by constants: a
    # fused index divided by a run-time size is one bound inference cannot follow, and every row
    # then computed the statistics of all rows
    fused = rows[:constant_divisor_prefix(rows)]
    outer = stage.fuse(*fused) if len(fused) > 1 else fused[0]
    stage.parallel(outer)
    row = rows[-1] if len(fused) < len(rows) else outer     # the innermost row loop: statistics per row
    if not isinstance(n, Const):    # a row's tail as one masked vector (lowering/passes/pad_tail_tiles.py)
        stage.pragma(row, "pad_tails")
    compute_all_at(s, [M, E, S] + factored, stage, row)


def strided_slice(X: Tensor, begin: Sequence[int], end: Sequence[int], step: Sequence[int],
                  name: str = "slice") -> Tensor:
    """``X[begin:end:step]`` per axis, with normalised (in-range) bounds; numpy semantics."""
    src = static_shape(X)
    shape = []
    for d, b, e, s in zip(src, begin, end, step):
        if s == 0:
            raise ExprError("slice step must not be 0")
        shape.append(len(range(b, e, s)))
    def index(i, b, s):
        if s == 1:
            return i + b if b else i
        return i * s + b

    return compute(tuple(shape), lambda *idx: X[tuple(index(i, b, s) for i, b, s in zip(idx, begin, step))],
                   name=name, tag="injective")


def reduce(X: Tensor, axes: Sequence[int], kind: str = "sum", keepdims: bool = True, name: str = "reduce") -> Tensor:
    """Sum / mean / max / min / prod of X over ``axes`` (one stage, tagged ``"reduce"``); X's sizes
    may be symbolic (a mean then divides by the count computed per call)."""
    from ...dsl.reduction import min as lw_min
    src = extents(X)
    nd = len(src)
    axes = sorted({a + nd if a < 0 else a for a in axes}) if axes else list(range(nd))
    raxes = {a: reduce_axis((0, src[a]), name=f"r{a}") for a in axes}
    out_shape = tuple((1 if a in raxes else d) for a, d in enumerate(src) if keepdims or a not in raxes)
    count = math.prod(src[a] for a in axes)
    if kind == "mean":      # (integer and boolean reductions of other kinds have no reciprocal)
        inverse = const(1.0 / max(1, count), X.dtype) if isinstance(count, int) else \
            const(1.0, X.dtype) / cast(X.dtype, count)
    from ...dsl.reduction import prod as lw_prod
    reducer = {"sum": lw_sum, "mean": lw_sum, "max": lw_max, "min": lw_min, "prod": lw_prod}[kind]

    def body(*idx):
        it = iter(idx)
        index = []
        for a in range(nd):
            if a in raxes:
                if keepdims:
                    next(it)
                index.append(raxes[a])
            else:
                index.append(next(it))
        value = X[tuple(index)]
        if kind == "mean":
            value = value * inverse
        return reducer(value, axis=[raxes[a] for a in axes])

    trailing = axes == list(range(nd - len(axes), nd))
    return compute(out_shape, body, name=name, tag="reduce", attrs={"trailing": trailing})


LONG_REDUCTION = 4096     # values reduced per output from which few outputs are split (``_split_reduction``)
FEW_OUTPUTS = 4


def _long_and_few(op, stage) -> bool:
    """At most FEW_OUTPUTS outputs, each reducing at least LONG_REDUCTION values (static sizes, no bools)."""
    reduce_leaves = [iv for iv in stage.leaf_iter_vars if iv.kind == "reduce"]
    if len(reduce_leaves) != 1 or op.output(0).dtype == "bool" or \
            not all(isinstance(iv.extent, Const) for iv in list(op.axis) + list(op.reduce_axis)):
        return False
    return math.prod(iv.extent.value for iv in op.axis) <= FEW_OUTPUTS and \
        math.prod(iv.extent.value for iv in op.reduce_axis) >= LONG_REDUCTION


def _split_reduction(s, op, target):
    """Few long reductions (DynamicQuantizeLinear's min and max of a whole tensor): one output element
    per thread left a core idle and reduced one value at a time.  Instead each thread reduces its
    share of the values into a vector of partial results (two ``rfactor``s), and the partials are
    reduced after.  min/max of 128 x 768 floats: 48 -> 3.5 us (one-off timing, Zen 5, 2 threads).
    A sum is reassociated (as onnxruntime's and numpy's are)."""
    out = op.output(0)
    r = [iv for iv in s[op].leaf_iter_vars if iv.kind == "reduce"][0]
    share, _ = s[op].split(r, nparts=max(1, target.num_threads))
    per_thread = s.rfactor(out, share)                      # [thread, outputs...]
    lanes = _lane_partials(s, per_thread, s[per_thread].op.reduce_axis[0], 4 * target.lanes(out.dtype))
    s[lanes].parallel(s[lanes].op.axis[0])                  # [thread, outputs..., lane]


def _lane_partials(s, tensor, axis, lanes: int):
    """``tensor``'s reduction ``axis`` split by ``lanes`` and the lane factored out (``rfactor``): a
    stage of partial results, one vector per output, vectorized, its reduction outside the lane."""
    _, lane = s[tensor].split(axis, factor=lanes)
    partials = s.rfactor(tensor, lane, factor_axis=len(s[tensor].op.axis))
    stage = s[partials]
    axes = list(stage.op.axis)
    stage.reorder(*axes[:-1], stage.op.reduce_axis[0], axes[-1])
    stage.vectorize(axes[-1])
    return partials


@register_schedule("reduce", "llvm")
def schedule_reduce(s, op, target):
    """Parallel over the output elements; each reduces serially, over one fused loop.

    (Fusing the reduce axes is not only tidier: LLVM's O3 pipeline was seen to hang on a
    min/max reduction nested two or more loops deep, e.g. 64 x 48, while the same reduction
    as one loop of 3072 compiles in milliseconds.)
    """
    stage = s[op]
    if len(op.reduce_axis) > 1 and all(isinstance(r.extent, Const) for r in op.reduce_axis[1:]):
        stage.fuse(*op.reduce_axis)
    if _long_and_few(op, stage):
        _split_reduction(s, op, target)
        return
    partials = _vector_partials(s, op, target)
    stage = s[op.output(0)]
    axes = list(stage.op.axis)
    axes = axes[:constant_divisor_prefix(axes)]     # symbolic extents: no division by a run-time size
    if len(axes) > 1:
        stage.parallel(stage.fuse(*axes))
    elif axes:
        stage.parallel(axes[0])
    inner = [iv for iv in stage.leaf_iter_vars if iv.kind != "reduce"]
    if partials is not None and inner:          # (a scalar's partials stay at the root)
        s[partials].compute_at(stage, inner[-1])


def _vector_partials(s, op, target):
    """Each output's values reduced in vector lanes first where they are contiguous (the reduced
    axes trailing) and at least two vectors long: ``rfactor`` of the reduction's lane, the partial
    results a vector per output, reduced after.  The rows of a (128, 256) min: 8.6 -> 3.3 us (one-off
    timing, Zen 5, 2 threads); the compile-once DynamicQuantizeLinear reduces its range this way.
    None where it does not apply."""
    stage = s[op]
    reduce_leaves = [iv for iv in stage.leaf_iter_vars if iv.kind == "reduce"]
    dtype = op.output(0).dtype
    if not op.attrs.get("trailing") or len(reduce_leaves) != 1 or dtype == "bool" or \
            not isinstance(reduce_leaves[0].extent, Const):
        return None
    lanes = target.lanes(dtype)
    if reduce_leaves[0].extent.value < 2 * lanes:
        return None
    return _lane_partials(s, op.output(0), reduce_leaves[0], lanes)
