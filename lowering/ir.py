"""Loop IR: the statements and vector expressions that lowering produces.

Expressions are the DSL's nodes plus ``BufferLoad``, ``Ramp`` and ``Broadcast``;
statements are frozen slotted dataclasses like the expressions, so the generic
``Mutator`` walks both.  A :class:`Buffer` is an identity object: a named region of
memory with a dtype, a shape and a scope.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Tuple

from ..dsl.expr import Expr, Var, _structural_node
from ..dsl.expr_printer import expr_to_str
from .printer import primfunc_html, primfunc_to_str, stmt_to_str

FOR_KINDS = ("serial", "parallel", "vectorized", "unrolled", "thread")


class Buffer:
    """A region of memory: n-d until storage_flatten, 1-d after."""

    __slots__ = ("name", "shape", "dtype", "scope", "strides", "elem_offset", "data")

    def __init__(self, name: str, shape, dtype: str, scope: str = "global", strides=None):
        self.name, self.shape, self.dtype, self.scope = name, tuple(shape), dtype, scope
        self.strides = tuple(strides) if strides is not None else None
        self.data = Var(name, "handle")

    def structural_key(self):
        return ("Buffer", id(self))

    def __repr__(self):
        return f"Buffer({self.name}, [{', '.join(expr_to_str(s) for s in self.shape)}], {self.dtype}, {self.scope})"


@_structural_node
class BufferLoad(Expr):
    buffer: Any
    indices: Tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.buffer.dtype


@_structural_node
class Ramp(Expr):
    """The vector ``base, base + stride, ..., base + (lanes-1)*stride``."""

    base: Expr
    stride: Expr
    lanes: int

    @property
    def dtype(self) -> str:
        return self.base.dtype


@_structural_node
class Broadcast(Expr):
    value: Expr
    lanes: int

    @property
    def dtype(self) -> str:
        return self.value.dtype


class Stmt:
    __slots__ = ()
    _is_ir_node = True

    def __str__(self) -> str:
        return stmt_to_str(self)

    def __repr__(self):
        return f"<{type(self).__name__}>\n{self}"


def _stmt(cls):
    return dataclass(frozen=True, eq=True, slots=True, repr=False)(cls)


@_stmt
class For(Stmt):
    var: Var
    min: Expr
    extent: Expr
    kind: str
    body: Stmt
    annotations: Tuple = ()


@_stmt
class Seq(Stmt):
    stmts: Tuple[Stmt, ...]


@_stmt
class IfThenElse(Stmt):
    condition: Expr
    then_case: Stmt
    else_case: Optional[Stmt] = None


@_stmt
class Allocate(Stmt):
    buffer: Any
    extent: Expr
    body: Stmt


@_stmt
class BufferStore(Stmt):
    buffer: Any
    value: Expr
    indices: Tuple[Expr, ...]


@_stmt
class LetStmt(Stmt):
    var: Var
    value: Expr
    body: Stmt


@_stmt
class Evaluate(Stmt):
    value: Expr


@_stmt
class KernelLaunch(Stmt):
    """A GPU kernel launched from host code (made by ``split_host_device``).

    ``body`` is the device code: the loop nest whose thread-bound loops run as the
    grid (blockIdx) and the block (threadIdx).  ``grid`` and ``block`` are the launch
    extents (x, y, z): ``grid`` may use the size variables, ``block`` is constant.
    ``params`` are the buffers the kernel touches that live outside it (arguments and
    host-allocated intermediates), ``scalars`` the size variables it reads.
    """

    name: str
    grid: Tuple[Expr, ...]
    block: Tuple[Expr, ...]
    params: Tuple[Any, ...]
    scalars: Tuple[Var, ...]
    body: Stmt


SYNC_THREADS = "__syncthreads"   # Evaluate(Call(SYNC_THREADS, (), "int32")): a block-wide barrier


def seq(*stmts) -> Stmt:
    """A Seq of the non-empty statements, flattened; a single statement stays itself."""
    flat: List[Stmt] = []
    for s in stmts:
        if s is None:
            continue
        if isinstance(s, Seq):
            flat.extend(s.stmts)
        elif isinstance(s, Evaluate) and getattr(s.value, "value", None) == 0 and type(s.value).__name__ == "Const":
            continue
        else:
            flat.append(s)
    if len(flat) == 1:
        return flat[0]
    return Seq(tuple(flat))


NOOP = Seq(())


class PrimFunc:
    """A lowered function: buffer parameters, the size variables they use, and a body."""

    def __init__(self, name: str, params: List[Buffer], size_vars: List[Var], body: Stmt,
                 param_tensors=None, stages_ir: Optional[Dict[str, str]] = None):
        self.name, self.params, self.size_vars, self.body = name, params, size_vars, body
        self.param_tensors = param_tensors or []
        self.dumps: Dict[str, Stmt] = {}

    def with_body(self, body: Stmt) -> "PrimFunc":
        f = PrimFunc(self.name, self.params, self.size_vars, body, self.param_tensors)
        f.dumps = self.dumps
        return f

    def __str__(self) -> str:
        return primfunc_to_str(self)

    def __repr__(self) -> str:
        return str(self)

    def _repr_html_(self) -> str:
        return primfunc_html(self)

    def structural_key(self):
        return primfunc_to_str(self, unique_names=True, flat=True)
