"""A tuning task: one kernel's compute DAG, its argument list and the target.

The key is structural: a hash of the untuned kernel's lowered loop IR text (shapes, dtypes and
arithmetic of every stage) with every stage and axis renamed by position first (``canonical.py``),
so a fresh copy of the same DAG, and the same DAG written with other tensor or axis names, gets the
same key; records apply by key, never by object identity, and carry their spelling
(``Task.names``) to be translated to another.  ``legacy_key`` is the key of logs written before:
the hash of the lowered IR under the user's own names.
"""
from __future__ import annotations

import hashlib
import pickle
from dataclasses import dataclass, field
from typing import List, Optional

from ..dsl.tensor import ComputeOp, PlaceholderOp
from ..dsl.schedule import create_schedule
from ..errors import ArgumentError, BuildError
from ..lowering.lower import lower
from ..target import Target, resolve_target
from .canonical import positional, renamed, spelling


def _outputs(args) -> list:
    return [t for t in args if isinstance(getattr(t, "op", None), ComputeOp)]


@dataclass
class Task:
    args: list
    target: Target
    weight: float = 1.0
    name: str = "task"
    key: str = field(init=False)

    def __post_init__(self):
        self.args = list(self.args)
        if not self.args:
            raise ArgumentError("tune: the argument list is empty; pass the placeholders and the outputs, as to lw.build")
        for a in self.args:
            if not hasattr(a, "op"):
                raise ArgumentError(f"tune: argument {a!r} is not a tensor")
        if not self.outputs:
            raise ArgumentError("tune: the argument list has no outputs (no tensor made by lw.compute); "
                                "list the tensors to compute after the placeholders")
        try:
            self.target = resolve_target(self.target)
        except BuildError as exc:
            raise ArgumentError(f"tune: {exc}") from None
        if self.target.kind != "llvm":
            raise ArgumentError(f"tune: target {self.target.kind!r} is not supported by the autoscheduler yet; use 'llvm'")
        symbols = symbolic_sizes(self.args)
        if symbols:
            names = ", ".join(symbols)
            example = symbols[0]
            raise ArgumentError(
                f"tune: the kernel's sizes are symbolic ({names}); tuning times real runs, so every size must be a "
                f"number: declare the tensors with integer sizes for tuning (for example {example} = 1024 in place "
                f"of {example} = lw.var({example!r})); the records then apply to kernels of those sizes")
        self.names = spelling(self.args)
        canonical = renamed(self.args, positional(self.args), canonical=True)
        self.key = _ir_hash(canonical)
        self._legacy_key: Optional[str] = None

    @property
    def legacy_key(self) -> str:
        """The key this task had when keys hashed the lowered IR under the user's names (records
        of older logs carry it; they were tuned in this very spelling)."""
        if self._legacy_key is None:
            self._legacy_key = _ir_hash(self.args)
        return self._legacy_key

    @property
    def spelling_key(self) -> str:
        """The key and a hash of the names: what tells two spellings of one task apart (a measuring
        worker keeps one DAG per spelling, since traces name stages and axes)."""
        return f"{self.key}-{hashlib.sha256(repr(self.names).encode()).hexdigest()[:8]}"

    @property
    def shapes(self) -> List[List[int]]:
        """The sizes of the arguments (all static: symbolic ones are refused)."""
        return [[const_int(d) for d in a.shape] for a in self.args]

    @property
    def outputs(self) -> list:
        return _outputs(self.args)

    def schedule(self):
        return create_schedule(self.outputs)

    def to_bytes(self) -> bytes:
        """The DAG for a measuring worker (expression trees are plain data; no code travels)."""
        return pickle.dumps(self.args)

    def flops(self) -> float:
        """Multiply-adds and arithmetic per output point times points, roughly (for GFLOPS display)."""
        total = 0.0
        for t in _all_compute(self.outputs):
            n = 1
            for d in t.shape:
                n *= const_int(d) or 1
            r = 1
            for ax in t.op.reduce_axis:
                r *= const_int(ax.extent) or 1
            total += 2.0 * n * r
        return total

    def __repr__(self):
        outs = ", ".join(f"{t.name}{[str(d) for d in t.shape]}" for t in self.outputs)
        return f"Task({outs}, key={self.key[:10]}, target={self.target.cpu})"


def _ir_hash(args) -> str:
    text = str(lower(create_schedule(_outputs(args)), args))
    return hashlib.sha256(text.encode()).hexdigest()[:24]


def timing_cpu(target: Target) -> str:
    """The CPU model whose timings stand for ``target``: the model it names (``znver4``,
    ``neoverse-n1``, this machine's for ``"llvm"``), or for a level of features rather than a model
    (``x86-64-v3``, ``generic``) this machine's own, the machine the tuner runs on."""
    from ..target import native_target
    if target.cpu == "generic" or target.cpu.startswith("x86-64") or not target.cpu:
        return native_target().cpu
    return target.cpu


def symbolic_sizes(args) -> List[str]:
    """The names of the size variables (``lw.var``) in the shapes and reduction extents of ``args``
    and of every stage computing them, in first-seen order."""
    from ..dsl.expr import Expr, Var
    from ..dsl.visitor import collect_vars
    names: List[str] = []

    def note(extent):
        if isinstance(extent, Expr):
            for v in collect_vars(extent):
                if isinstance(v, Var) and v.name not in names:
                    names.append(v.name)
    stages = [*args, *_all_compute(_outputs(args))]
    for t in stages:
        for d in t.shape:
            note(d)
        for ax in getattr(t.op, "reduce_axis", ()):
            note(ax.min)
            note(ax.extent)
    return names


def const_int(x):
    """``x`` as a Python int when it is a constant, else None."""
    if isinstance(x, int):
        return x
    v = getattr(x, "value", None)
    return int(v) if isinstance(v, (int,)) or (v is not None and float(v).is_integer()) else None


def _all_compute(outputs) -> List:
    seen, order = set(), []

    def visit(t):
        if id(t.op) in seen:
            return
        seen.add(id(t.op))
        if isinstance(t.op, ComputeOp):
            for inp in t.op.input_tensors:
                visit(inp)
            order.append(t)
    for t in outputs:
        visit(t)
    return order


def compute_stages(outputs) -> List:
    """Compute tensors of the DAG in topological order (producers first)."""
    return _all_compute(outputs)


__all__ = ["Task", "compute_stages", "PlaceholderOp"]
