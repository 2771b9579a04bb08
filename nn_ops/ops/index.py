"""Data movement by index: gather, gather_elements, expand, tile, trilu.

All are single ``"injective"`` stages: each output element reads one input element at
an index computed from its own position (and, for gathers, from an index tensor read at
run time).  Run-time indices are checked where they are used (``dsl.expr.checked_index``:
one compare per index): a negative one counts from the end (``k + n``, as ONNX says), and
one outside ``[-n, n)`` makes the call raise ``ArgumentError`` naming the tensor, the axis
and the index (onnxruntime refuses them too; nothing is clamped silently).
"""
from __future__ import annotations

from numbers import Integral
from typing import Sequence, Union

from ...dsl.expr import as_expr, cast, checked_index, const, select
from ...dsl.intrinsics import elementwise_max, elementwise_min
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import broadcast_index, broadcast_shape, extents
from .logic import select_invariant


def _runtime_index(k, n: int, axis: int, data: Tensor, indices: Tensor):
    """``k`` read from ``indices``, checked as an index into ``axis`` of ``data`` (size ``n``)."""
    return checked_index(k, n, f"axis {axis} of '{data.name}' (an index read from '{indices.name}')", wrap=True)


def _check_index_dtype(indices: Tensor) -> None:
    if indices.dtype not in ("int32", "int64"):
        raise ExprError(f"indices must be int32 or int64, got {indices.dtype}")


def gather(data: Tensor, indices: Union[Tensor, int], axis: int = 0, name: str = "gather") -> Tensor:
    """``numpy.take(data, indices, axis)``; ``indices`` a tensor or one constant int.  Sizes may be
    symbolic (a constant index into a symbolic axis, ``-1`` for the last token, is then the caller's
    to check against it, and clamped to the axis here so that no read leaves it; indices read
    from a tensor are checked where they are read)."""
    src = extents(data)
    nd = len(src)
    axis = axis + nd if axis < 0 else axis
    if not 0 <= axis < nd:
        raise ExprError(f"gather axis {axis} out of range for rank {nd}")
    n = src[axis]
    if isinstance(indices, Tensor):
        _check_index_dtype(indices)
        qshape = extents(indices)
    else:
        k = int(indices)
        if isinstance(n, int) and not -n <= k < n:
            raise ExprError(f"gather index {k} out of range for axis {axis} of size {n}")
        if isinstance(n, int):
            k %= n
        else:
            k = elementwise_min(const(k, "int64"), n - 1) if k >= 0 else elementwise_max(n + k, const(0, "int64"))
        qshape = ()
    q = len(qshape)
    shape = src[:axis] + qshape + src[axis + 1:]

    def fcompute(*idx):
        if isinstance(indices, Tensor):
            k_expr = _runtime_index(indices[tuple(idx[axis:axis + q])], n, axis, data, indices)
        else:
            k_expr = k
        return data[tuple(idx[:axis]) + (k_expr,) + tuple(idx[axis + q:])]

    return compute(shape, fcompute, name=name, tag="injective")


def gather_elements(data: Tensor, indices: Tensor, axis: int = 0, name: str = "gather_elements") -> Tensor:
    """``out[i] = data[i with axis replaced by indices[i]]`` (ONNX GatherElements).  Sizes may be
    symbolic (the symbolic ones of ``indices`` are taken to fit; every index read is checked
    against ``axis`` of ``data``)."""
    _check_index_dtype(indices)
    src, qshape = extents(data), extents(indices)
    nd = len(src)
    axis = axis + nd if axis < 0 else axis
    if len(qshape) != nd or any(isinstance(q, int) and isinstance(s, int) and q > s
                                for k, (q, s) in enumerate(zip(qshape, src)) if k != axis):
        raise ExprError(f"gather_elements: indices of shape {qshape} do not fit data of shape {src}")

    def fcompute(*idx):
        index = list(idx)
        index[axis] = _runtime_index(indices[idx], src[axis], axis, data, indices)
        return data[tuple(index)]

    return compute(qshape, fcompute, name=name, tag="injective")


def expand(x: Tensor, shape: Sequence[int], name: str = "expand") -> Tensor:
    """Broadcast ``x`` to the numpy broadcast of its shape and ``shape`` (sizes ints or ``lw.var``
    extents: a constant broadcast to a run-time batch)."""
    out = broadcast_shape(extents(x), tuple(int(d) if isinstance(d, Integral) else d for d in shape))
    return compute(out, lambda *idx: broadcast_index(x, len(out), idx), name=name, tag="injective")


def tile(x: Tensor, repeats: Sequence[int], name: str = "tile") -> Tensor:
    src = extents(x)            # symbolic extents allowed (shape-polymorphic kernels)
    if len(repeats) != len(src):
        raise ExprError(f"tile: {len(repeats)} repeats for rank {len(src)}")
    shape = tuple(d * int(r) for d, r in zip(src, repeats))
    return compute(shape, lambda *idx: x[tuple(i if int(r) == 1 else i % d for i, d, r in zip(idx, src, repeats))],
                   name=name, tag="injective")


def trilu(x: Tensor, upper: bool = True, k: int = 0, name: str = "trilu") -> Tensor:
    """Keep the upper (``j - i >= k``) or lower (``j - i <= k``) triangle of the last two axes."""
    shape = extents(x)
    if len(shape) < 2:
        raise ExprError(f"trilu needs rank >= 2, got {len(shape)}")

    def fcompute(*idx):
        i, j = idx[-2], idx[-1]
        keep = (j - i >= k) if upper else (j - i <= k)
        return select(keep, x[idx], const(0, x.dtype))

    return compute(shape, fcompute, name=name, tag="injective")


def one_hot(indices: Tensor, values: Tensor, depth: int, axis: int = -1, name: str = "one_hot") -> Tensor:
    """``values[1]`` where the position along the new ``axis`` equals the index, else ``values[0]``.

    Negative indices count from ``depth``; indices outside ``[-depth, depth)`` give a row of
    ``values[0]`` (ONNX OneHot).  Float indices are truncated to integers first.
    """
    qshape = extents(indices)       # symbolic extents allowed (shape-polymorphic kernels)
    nd = len(qshape) + 1
    axis = axis + nd if axis < 0 else axis
    if not 0 <= axis < nd:
        raise ExprError(f"one_hot axis {axis} out of range for rank {nd}")
    shape = qshape[:axis] + (int(depth),) + qshape[axis:]

    def fcompute(*idx):
        k = cast("int64", indices[tuple(idx[:axis]) + tuple(idx[axis + 1:])])
        k = select(k < const(0, "int64"), k + const(int(depth), "int64"), k)
        if axis == nd - 1:       # the condition varies along the vectorized axis, the values do not
            return select_invariant(k == idx[axis], values[1], values[0], idx[axis])
        return select(k == idx[axis], values[1], values[0])

    return compute(shape, fcompute, name=name, tag="injective")


def gather_nd(data: Tensor, indices: Tensor, batch_dims: int = 0, name: str = "gather_nd") -> Tensor:
    """ONNX GatherND: the last axis of ``indices`` holds coordinates into ``data`` (after
    ``batch_dims`` shared leading axes); the remaining axes of ``data`` are copied.  Sizes may be
    symbolic but the last of ``indices`` (the depth of a coordinate)."""
    _check_index_dtype(indices)
    dshape, ishape = extents(data), extents(indices)
    m = ishape[-1]
    if not isinstance(m, int):
        raise ExprError(f"gather_nd: indices of shape {ishape}, whose last size (the depth of a coordinate) is "
                        f"symbolic")
    if batch_dims + m > len(dshape) or any(isinstance(i, int) and isinstance(d, int) and i != d
                                           for i, d in zip(ishape[:batch_dims], dshape[:batch_dims])):
        raise ExprError(f"gather_nd: indices of shape {ishape} do not fit data of shape {dshape} "
                        f"with batch_dims={batch_dims}")
    lead = len(ishape) - 1
    shape = ishape[:-1] + dshape[batch_dims + m:]

    def fcompute(*idx):
        q = tuple(idx[:lead])
        coords = tuple(_runtime_index(indices[q + (j,)], dshape[batch_dims + j], batch_dims + j, data, indices)
                       for j in range(m))
        return data[tuple(idx[:batch_dims]) + coords + tuple(idx[lead:])]

    return compute(shape, fcompute, name=name, tag="injective")


def reverse_sequence(x: Tensor, lengths: Tensor, batch_axis: int = 1, time_axis: int = 0,
                     name: str = "reverse_sequence") -> Tensor:
    """Reverse the first ``lengths[b]`` steps along ``time_axis`` of each batch entry ``b`` (sizes
    may be symbolic)."""
    _check_index_dtype(lengths)
    shape = extents(x)
    steps = as_expr(shape[time_axis], "int64")

    def fcompute(*idx):
        n = elementwise_min(cast("int64", lengths[(idx[batch_axis],)]), steps)
        t = idx[time_axis]
        index = list(idx)
        index[time_axis] = select(t < n, n - const(1, "int64") - t, t)
        return x[tuple(index)]

    return compute(shape, fcompute, name=name, tag="injective")


def pad_index(x: Tensor, before: Sequence[int], after: Sequence[int], mode: str, name: str = "pad") -> Tensor:
    """Pad by reading inside ``x``: ``edge`` repeats the border, ``reflect`` mirrors without
    repeating it, ``wrap`` continues periodically (ONNX Pad modes; numpy's edge/reflect/wrap).

    Sizes may be symbolic but for a wrapped axis.  A reflected axis of symbolic size reads at an
    index clamped to the axis, so a size not larger than the pad (ONNX leaves it undefined; the
    network's signature refuses it at run time) reads inside ``x`` still."""
    src = extents(x)            # symbolic extents allowed (shape-polymorphic kernels)
    if mode not in ("edge", "reflect", "wrap"):
        raise ExprError(f"pad mode {mode!r}")
    if mode == "wrap" and any((b or a) and not isinstance(d, int) for d, b, a in zip(src, before, after)):
        raise ExprError("wrap padding of an axis of symbolic size (a static size is needed)")
    if mode == "reflect" and any((b or a) and isinstance(d, int) and (b >= d or a >= d)
                                 for d, b, a in zip(src, before, after)):
        raise ExprError(f"reflect padding {list(before)}/{list(after)} reaches past the edge of shape {src}")
    shape = tuple(d + b + a for d, b, a in zip(src, before, after))

    def source(i, d, b):
        j = i - b if b else i
        if mode == "edge":
            return elementwise_min(elementwise_max(j, 0), d - 1)
        if mode == "wrap":
            return j % d
        j = select(j < 0, 0 - j, j)
        j = select(j >= d, 2 * (d - 1) - j, j)
        return j if isinstance(d, int) else elementwise_min(elementwise_max(j, 0), d - 1)

    def fcompute(*idx):
        return x[tuple(source(i, d, b) if (b or a) else i for i, d, b, a in zip(idx, src, before, after))]

    return compute(shape, fcompute, name=name, tag="injective")
