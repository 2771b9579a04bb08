"""Tensors and the operations that produce them: placeholder and compute."""
from __future__ import annotations

import inspect
from dataclasses import dataclass
from typing import Callable, Sequence, Tuple

from ..errors import DTypeError, ExprError
from . import dtypes
from .expr import Const, Expr, ExprOps, Reduce, TensorLoad, Var, as_expr, cast, const
from .expr_printer import expr_to_str
from .printer_html import tensor_definition_html
from .visitor import collect_tensor_loads, contains_reduce


@dataclass(frozen=True, eq=False, slots=True)
class IterVar(ExprOps):
    """An iteration axis: a variable and its domain ``[min, min + extent)``.

    ``kind`` is ``"spatial"`` for an output axis, ``"reduce"`` for a reduction axis,
    ``"thread"`` for a GPU thread axis.  IterVars compare by identity; in expressions
    they stand for their variable.
    """

    var: Var
    min: Expr
    extent: Expr
    kind: str = "spatial"

    @property
    def name(self) -> str:
        return self.var.name

    @property
    def dtype(self) -> str:
        return self.var.dtype

    @property
    def dom(self) -> Tuple[Expr, Expr]:
        return (self.min, self.extent)

    def __hash__(self):
        return id(self)

    def __repr__(self) -> str:
        lo, hi = expr_to_str(self.min), expr_to_str(self.min + self.extent)
        return f"IterVar({self.name}, range({lo}, {hi}), {self.kind})"

    __str__ = __repr__


def _as_extent(value, what: str) -> Expr:
    e = as_expr(value)
    if not dtypes.is_int(e.dtype):
        raise DTypeError(f"{what} must be an integer, got {e} of dtype {e.dtype}")
    if e.dtype != dtypes.INDEX:
        e = cast(dtypes.INDEX, e)
    if isinstance(e, Const) and e.value < 0:
        raise ExprError(f"{what} must not be negative, got {e.value}")
    return e


def normalize_shape(shape, what: str) -> Tuple[Expr, ...]:
    if isinstance(shape, (int, Expr)):
        shape = (shape,)
    try:
        items = tuple(shape)
    except TypeError as exc:
        raise ExprError(f"{what} must be a tuple of sizes, got {shape!r}") from exc
    return tuple(_as_extent(s, f"{what}[{d}]") for d, s in enumerate(items))


def reduce_axis(dom, name: str = "k") -> IterVar:
    """A reduction axis over ``range(dom[0], dom[1])``."""
    try:
        lo, hi = dom
    except (TypeError, ValueError) as exc:
        raise ExprError(f"reduce_axis takes a (min, max) pair, got {dom!r}") from exc
    lo, hi = _as_extent(lo, f"reduce_axis {name!r} min"), _as_extent(hi, f"reduce_axis {name!r} max")
    return IterVar(Var(name), lo, hi - lo, "reduce")


def thread_axis(tag: str) -> IterVar:
    """A GPU thread axis such as ``"blockIdx.x"`` or ``"threadIdx.y"`` for ``bind``."""
    valid = [f"{a}.{c}" for a in ("blockIdx", "threadIdx") for c in "xyz"]
    if tag not in valid:
        raise ExprError(f"unknown thread axis {tag!r}; use one of {', '.join(valid)}")
    return IterVar(Var(tag.replace(".", "_")), const(0), const(-1), "thread")


class Operation:
    """Base of the nodes that produce tensors."""

    name: str
    num_outputs: int = 1

    def output(self, index: int = 0) -> "Tensor":
        return self.outputs[index]

    @property
    def input_tensors(self) -> list:
        return []


class Tensor:
    """An n-dimensional value: output ``value_index`` of operation ``op``."""

    __slots__ = ("op", "value_index", "shape", "dtype", "name")

    def __init__(self, op, value_index: int, shape, dtype: str, name: str):
        self.op, self.value_index, self.shape, self.dtype, self.name = op, value_index, shape, dtype, name

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def __getitem__(self, indices) -> Expr:
        if not isinstance(indices, tuple):
            indices = (indices,)
        if len(indices) != self.ndim:
            raise ExprError(
                f"tensor {self.name!r} has {self.ndim} dimensions but was indexed with "
                f"{len(indices)} indices")
        exprs = []
        for d, index in enumerate(indices):
            if isinstance(index, float):
                raise DTypeError(f"index {d} of {self.name!r} is the float {index!r}; indices must be integers")
            e = as_expr(index, dtypes.INDEX)
            if not dtypes.is_int(e.dtype):
                raise DTypeError(f"index {d} of {self.name!r} is {e} of dtype {e.dtype}; indices must be integers")
            if e.dtype != dtypes.INDEX:
                e = cast(dtypes.INDEX, e)
            exprs.append(e)
        return TensorLoad(self, tuple(exprs))

    def __hash__(self):
        return id(self)

    def __eq__(self, other):
        return self is other

    def structural_key(self):
        return ("Tensor", id(self))

    def __repr__(self) -> str:
        dims = ", ".join(expr_to_str(s) for s in self.shape)
        return f"Tensor({self.name}, shape=({dims}), {self.dtype})"

    def _repr_html_(self) -> str:
        return tensor_definition_html(self)


class PlaceholderOp(Operation):
    def __init__(self, name: str, shape, dtype: str):
        self.name = name
        self.shape = shape
        self.dtype = dtype
        self.outputs = [Tensor(self, 0, shape, dtype, name)]
        self.axis = []
        self.reduce_axis = []

    def __repr__(self):
        return f"PlaceholderOp({self.name})"


class ComputeOp(Operation):
    """``name[axis] = body``; several bodies for tuple reductions (one output each)."""

    def __init__(self, name: str, axis: Sequence[IterVar], body: Sequence[Expr], tag: str = "", attrs=None):
        self.name = name
        self.axis = list(axis)
        self.body = tuple(body)
        self.tag = tag
        self.attrs = dict(attrs or {})
        first = self.body[0]
        self.reduce_axis = list(first.axis) if isinstance(first, Reduce) else []
        shape = tuple(iv.extent for iv in self.axis)
        self.num_outputs = len(self.body)
        suffix = (lambda k: name) if self.num_outputs == 1 else (lambda k: f"{name}.v{k}")
        self.outputs = [Tensor(self, k, shape, b.dtype, suffix(k)) for k, b in enumerate(self.body)]

    @property
    def input_tensors(self) -> list:
        seen = []
        for b in self.body:
            for t in collect_tensor_loads(b):
                if all(t is not s for s in seen):
                    seen.append(t)
        return seen

    def __repr__(self):
        return f"ComputeOp({self.name})"


def placeholder(shape, name: str = "placeholder", dtype: str = "float32") -> Tensor:
    """An input tensor of the given shape (ints or symbolic ``lw.var`` sizes)."""
    shape = normalize_shape(shape, f"shape of placeholder {name!r}")
    return PlaceholderOp(name, shape, dtypes.normalize(dtype)).outputs[0]


def _axis_names(fcompute: Callable, ndim: int) -> list:
    try:
        params = [p.name for p in inspect.signature(fcompute).parameters.values()
                  if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    except (TypeError, ValueError):
        params = []
    if len(params) == ndim:
        return params
    return [f"ax{d}" for d in range(ndim)]


def compute(shape, fcompute: Callable, name: str = "compute", tag: str = "", attrs=None):
    """A tensor whose element at index ``(i, j, ...)`` is ``fcompute(i, j, ...)``.

    Returns one Tensor, or a tuple of Tensors when ``fcompute`` returns a tuple
    reduction (e.g. argmax).
    """
    shape = normalize_shape(shape, f"shape of compute {name!r}")
    names = _axis_names(fcompute, len(shape))
    axis = [IterVar(Var(n), const(0), s, "spatial") for n, s in zip(names, shape)]
    try:
        result = fcompute(*[iv.var for iv in axis])
    except TypeError as exc:
        if "positional argument" in str(exc):
            raise ExprError(f"compute {name!r} has {len(shape)} dimensions; its function must take "
                            f"{len(shape)} index arguments ({exc})") from exc
        raise
    body = tuple(result) if isinstance(result, (tuple, list)) else (result,)
    if not body:
        raise ExprError(f"compute {name!r} returned an empty tuple")
    body = tuple(as_expr(b) for b in body)
    _check_body(name, body)
    op = ComputeOp(name, axis, body, tag, attrs)
    return op.outputs[0] if op.num_outputs == 1 else tuple(op.outputs)


def _check_body(name: str, body: Tuple[Expr, ...]) -> None:
    reduces = [b for b in body if isinstance(b, Reduce)]
    for b in body:
        inner = b.source if isinstance(b, Reduce) else (b,)
        if any(contains_reduce(e) for e in inner) or (isinstance(b, Reduce) and contains_reduce(b.condition)):
            raise ExprError(
                f"compute {name!r}: a reduction must be the whole body of a compute, not part of "
                f"an expression; put the reduction in its own compute and use its result")
    if len(body) > 1:
        if len(reduces) != len(body):
            raise ExprError(f"compute {name!r} returns a tuple; only tuple reductions may do so")
        first = reduces[0]
        for r in reduces[1:]:
            if r.combiner is not first.combiner or tuple(r.axis) != tuple(first.axis) or r.source != first.source:
                raise ExprError(f"compute {name!r}: the parts of a tuple reduction must come from one reducer call")
