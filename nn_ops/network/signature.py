"""The symbolic signature of a network with dynamic shapes, and the checks a feed must pass.

A :class:`SymbolicSignature` is what graph-level symbolic shape inference
(``onnx_import/symbolic_shapes.py``) hands the network compiler: the inputs with symbolic
shapes (``("input", (batch, seq, 256), "float32")``), the outputs' shapes as sizes over the
same symbols, and the :class:`RuntimeCheck` s that import could not prove.  ``bind`` checks a
feed against it (names, dtypes, ranks, fixed sizes, one value per symbol across all inputs)
and ``check`` evaluates the recorded checks; both raise ``ArgumentError`` naming the input (or
node) and the symbol, before anything runs.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Optional, Tuple

from ...errors import ArgumentError
from . import symbolic as S
from .feed import check_names_and_dtypes


@dataclass(frozen=True)
class RuntimeCheck:
    """A condition on the symbols that import could neither prove nor refute (``seq == seq_k``)."""

    node: str
    op: str
    condition: object          # a sympy condition over dimension symbols
    message: str

    def holds(self, binding: Dict[str, int]) -> bool:
        return bool(S.evaluate(self.condition, binding))

    def describe(self, binding: Dict[str, int]) -> str:
        names = sorted(s.name for s in self.condition.free_symbols)
        values = ", ".join(f"{n} = {binding[n]}" for n in names if n in binding)
        return f"node {self.node!r} ({self.op}): {self.message} (here {values})"


PASSED_KEPT = 16     # bindings a signature remembers as checked


class SymbolicSignature:
    """Inputs [(name, sizes, dtype)], outputs [(name, sizes or None, dtype)], run-time checks."""

    def __init__(self, inputs, outputs, checks: List[RuntimeCheck]):
        self.inputs: List[Tuple[str, tuple, str]] = [(n, tuple(S.dim(d) for d in s), dt) for n, s, dt in inputs]
        self.outputs: List[Tuple[str, Optional[tuple], Optional[str]]] = list(outputs)
        self.checks = list(checks)
        self.symbols = sorted({name for _, shape, _ in self.inputs for d in shape for name in S.free_symbols(d)})
        self._passed: Dict[tuple, None] = {}     # recent bindings that passed every check (``check``)

    def bind(self, feed) -> Dict[str, int]:
        """The symbols' values for ``feed`` ({name: array}), checked: names, dtypes, ranks, fixed
        sizes, each symbol bound to one value by every input that uses it, and sizes >= 1."""
        feed = check_names_and_dtypes(self.inputs, feed)
        binding: Dict[str, int] = {}
        bound_by: Dict[str, Tuple[str, int]] = {}
        derived = []
        for name, shape, _ in self.inputs:
            got_shape = tuple(feed[name].shape)
            if len(got_shape) != len(shape):
                raise ArgumentError(f"input {name!r} must have rank {len(shape)} (shape {_show(shape)}), "
                                    f"got shape {got_shape}")
            for k, (want, got) in enumerate(zip(shape, got_shape)):
                if want.is_Symbol:
                    sym = want.name
                    if sym in binding and binding[sym] != got:
                        other, axis = bound_by[sym]
                        raise ArgumentError(f"input {name!r} dimension {k} is {sym!r} = {got}, but input {other!r} "
                                            f"dimension {axis} set {sym!r} = {binding[sym]}")
                    if got == 0:
                        raise ArgumentError(f"input {name!r} has size 0 in dimension {k} ({sym!r}); empty tensors "
                                            f"are not supported")
                    binding.setdefault(sym, int(got))
                    bound_by.setdefault(sym, (name, k))
                elif want.is_Integer:
                    if int(want) != got:
                        raise ArgumentError(f"input {name!r} must have shape {_show(shape)}, got {got_shape} "
                                            f"(dimension {k} must be {int(want)})")
                else:
                    derived.append((name, k, want, got))
        for name, k, want, got in derived:      # sizes like 2*seq: checked once the plain symbols are bound
            missing = [s for s in S.free_symbols(want) if s not in binding]
            if missing:
                raise ArgumentError(f"input {name!r} dimension {k} is {S.show(want)}, but no input binds "
                                    f"{', '.join(map(repr, missing))} on its own")
            value = S.evaluate(want, binding)
            if value != got:
                values = ", ".join(f"{s} = {binding[s]}" for s in S.free_symbols(want))
                raise ArgumentError(f"input {name!r} dimension {k} must be {S.show(want)} = {value} ({values}), "
                                    f"got {got}")
        return binding

    def check(self, binding: Dict[str, int]) -> None:
        """Raise ArgumentError for the first recorded run-time check that ``binding`` breaks.  A
        binding that passed recently is not evaluated again: the checks are exact sympy arithmetic,
        ~13 us each (a U-Net's 18 took 230 us a run)."""
        key = (len(self.checks), tuple(sorted(binding.items())))
        if key in self._passed:
            return
        for c in self.checks:
            if not c.holds(binding):
                raise ArgumentError(f"the inputs' sizes do not fit the model: {c.describe(binding)}")
        self._passed[key] = None
        if len(self._passed) > PASSED_KEPT:
            del self._passed[next(iter(self._passed))]

    def output_shapes(self, binding: Dict[str, int]) -> List[Optional[tuple]]:
        """Each output's concrete shape at ``binding`` (None where inference did not reach it)."""
        return [None if shape is None else tuple(S.evaluate(d, binding) for d in shape)
                for _, shape, _ in self.outputs]

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {dt}{_show(s)}" for n, s, dt in self.inputs)
        outs = ", ".join(f"{n}: {dt}{_show(s) if s is not None else '[?]'}" for n, s, dt in self.outputs)
        checks = f"; {len(self.checks)} run-time check(s)" if self.checks else ""
        return f"<SymbolicSignature ({ins}) -> ({outs}){checks}>"


def _show(shape) -> str:
    return "[" + ", ".join(S.show(d) for d in shape) + "]"


def fixed_shapes_hint(inputs) -> str:
    """What to do about symbolic sizes where fixed ones are needed: the model's own ``inputs`` (name,
    shape, dtype), its symbolic dimensions, and the import that fixes them."""
    def symbolic(d) -> bool:
        return not isinstance(d, int) and not (hasattr(d, "is_Integer") and d.is_Integer)

    shown, fixed, symbols = [], [], []
    for name, shape, dtype in inputs:
        dims = [str(d) if d is not None else "?" for d in shape]
        shown.append(f"{name}: {dtype}[{', '.join(dims)}]")
        if any(symbolic(d) for d in shape):
            fixed.append((name, dims))
            symbols += [str(d) for d in shape if symbolic(d) and str(d) not in symbols]
    python = ", ".join(f"{name!r}: ({', '.join(dims)}{',' if len(dims) == 1 else ''})" for name, dims in fixed)
    cli = " ".join(f"--input-shape {name}={'x'.join(dims)}" for name, dims in fixed)
    return (f"this model's inputs are {'; '.join(shown)}: import it with numbers for {', '.join(symbols)}: "
            f"lw.from_onnx(model, input_shapes={{{python}}}) (CLI: {cli})")


def export_needs_fixed_shapes(inputs):
    """The error of ``export_library`` on an executable of symbolic sizes (the C API has fixed shapes),
    naming the model's ``inputs`` and how to fix them (``fixed_shapes_hint``)."""
    return ArgumentError(f"export_library needs fixed input shapes (the C library's shapes are static); "
                         f"{fixed_shapes_hint(inputs)}, compile, then export")
