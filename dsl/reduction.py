"""Commutative reducers: sum, max, min, prod, argmax/argmin and user reducers."""
from __future__ import annotations

from typing import Callable, Tuple

import numpy as np

from ..errors import ExprError
from . import dtypes
from .expr import Expr, Reduce, Var, as_expr, binary, compare, const, logical_and, logical_or, select
from .tensor import IterVar


class CommReducer:
    """``combine(lhs, rhs) -> result`` with ``identity``, over tuples of values."""

    def __init__(self, name: str, lhs: Tuple[Var, ...], rhs: Tuple[Var, ...], result: Tuple[Expr, ...],
                 identity: Tuple[Expr, ...]):
        self.name, self.lhs, self.rhs, self.result, self.identity = name, lhs, rhs, result, identity

    def structural_key(self):
        return ("CommReducer", id(self))

    def __repr__(self):
        return f"CommReducer({self.name})"

    def __call__(self, source, axis, where=None, *unused):
        if not isinstance(axis, (list, tuple)):
            axis = (axis,)
        if not axis or not all(isinstance(a, IterVar) and a.kind == "reduce" for a in axis):
            raise ExprError(f"{self.name}(..., axis=...) needs reduce axes made by lw.reduce_axis, got {axis!r}")
        sources = tuple(source) if isinstance(source, (tuple, list)) else (source,)
        if len(sources) != len(self.lhs):
            raise ExprError(f"reducer {self.name} combines {len(self.lhs)} values, got {len(sources)}")
        sources = tuple(as_expr(s, v.dtype) for s, v in zip(sources, self.lhs))
        for s, v in zip(sources, self.lhs):
            if s.dtype != v.dtype:
                raise ExprError(f"reducer {self.name} was made for {v.dtype} values, got {s} of dtype {s.dtype}")
        condition = const(True) if where is None else as_expr(where)
        parts = tuple(Reduce(self, sources, tuple(axis), condition, k) for k in range(len(sources)))
        return parts[0] if len(parts) == 1 else parts


def comm_reducer(fcombine: Callable, fidentity: Callable, name: str = "reduce"):
    """A user-defined commutative reducer, as ``te.comm_reducer`` in TVM.

    ``fcombine(x, y)`` combines two values (or two tuples), ``fidentity(dtype, ...)``
    gives the identity.  The result is called as ``reducer(expr, axis=k)``; dtypes are
    bound on first use, so one reducer serves every dtype.
    """
    cache = {}

    def make(dtype_list: Tuple[str, ...]) -> CommReducer:
        if dtype_list not in cache:
            lhs = tuple(Var(f"x{k}", d) for k, d in enumerate(dtype_list))
            rhs = tuple(Var(f"y{k}", d) for k, d in enumerate(dtype_list))
            if len(dtype_list) == 1:
                result = (as_expr(fcombine(lhs[0], rhs[0]), dtype_list[0]),)
                identity = (as_expr(fidentity(dtype_list[0]), dtype_list[0]),)
            else:
                result = tuple(as_expr(r, d) for r, d in zip(fcombine(lhs, rhs), dtype_list))
                identity = tuple(as_expr(r, d) for r, d in zip(fidentity(*dtype_list), dtype_list))
            cache[dtype_list] = CommReducer(name, lhs, rhs, result, identity)
        return cache[dtype_list]

    def reducer(source, axis=None, where=None):
        if axis is None:
            raise ExprError(f"lw.{name}(...) as a reducer needs axis=<reduce axis>")
        sources = tuple(source) if isinstance(source, (tuple, list)) else (source,)
        dtype_list = tuple(as_expr(s).dtype for s in sources)
        return make(dtype_list)(source, axis, where)

    reducer.__name__ = name
    reducer.make = make
    return reducer


def _lowest(dtype: str):
    if dtypes.is_float(dtype):
        return -np.inf
    return int(np.iinfo(dtype).min) if dtype != dtypes.BOOL else False


def _highest(dtype: str):
    if dtypes.is_float(dtype):
        return np.inf
    return int(np.iinfo(dtype).max) if dtype != dtypes.BOOL else True


_sum = comm_reducer(lambda x, y: x + y, lambda t: const(0, t), name="sum")
_prod = comm_reducer(lambda x, y: x * y, lambda t: const(1, t), name="prod")
_max = comm_reducer(lambda x, y: binary("max", x, y), lambda t: const(_lowest(t), t), name="max")
_min = comm_reducer(lambda x, y: binary("min", x, y), lambda t: const(_highest(t), t), name="min")


def sum(expr, axis, where=None):  # noqa: A001 - the reducer's name
    """Sum of ``expr`` over reduce axis (or axes) ``axis``, optionally where ``where`` holds."""
    return _sum(expr, axis, where)


def prod(expr, axis, where=None):
    return _prod(expr, axis, where)


def max(expr, b=None, axis=None, where=None):  # noqa: A001
    """``lw.max(a, b)`` is elementwise; ``lw.max(expr, axis=k)`` reduces."""
    if axis is None and b is not None and not isinstance(b, IterVar) and not isinstance(b, (list, tuple)):
        return binary("max", expr, b)
    return _max(expr, axis if axis is not None else b, where)


def min(expr, b=None, axis=None, where=None):  # noqa: A001
    """``lw.min(a, b)`` is elementwise; ``lw.min(expr, axis=k)`` reduces."""
    if axis is None and b is not None and not isinstance(b, IterVar) and not isinstance(b, (list, tuple)):
        return binary("min", expr, b)
    return _min(expr, axis if axis is not None else b, where)


def _arg_combine(better: str):
    def combine(x, y):
        (xi, xv), (yi, yv) = x, y
        strictly = compare(better, yv, xv)
        tie = logical_and(compare("eq", yv, xv), compare("lt", yi, xi))
        take_y = logical_or(strictly, tie)
        return select(take_y, yi, xi), select(take_y, yv, xv)
    return combine


argmax = comm_reducer(_arg_combine("gt"), lambda ti, tv: (const(-1, ti), const(_lowest(tv), tv)), name="argmax")
argmax.__doc__ = """Tuple reduction over (index, value) pairs: the first index of the largest value.

``idx, val = lw.compute((m,), lambda i: lw.argmax((k, A[i, k]), axis=k))``
"""
argmin = comm_reducer(_arg_combine("lt"), lambda ti, tv: (const(-1, ti), const(_highest(tv), tv)), name="argmin")
