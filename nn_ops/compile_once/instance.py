"""A compile-once kernel at one binding of its sizes: the static computation a tuning task is of.

The builder makes each kernel with ``make(*placeholders, extent=f)``, ``f`` mapping a graph size (a
sympy expression) to the kernel's ``lw.var`` (``_Builder.kernel``).  ``KernelRecipe`` keeps that
recipe, so the same ``make`` can be called with ``f`` giving numbers: the static kernel of one
binding.  Tuning works on those (the tuner times real runs), and a record of one applies to the
kernel of symbolic sizes when its sizes are ones the kernel covers (``binding_of``).
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict, Optional, Sequence, Tuple

import sympy

from ...dsl.tensor import placeholder
from ..network import symbolic as S


@dataclasses.dataclass(frozen=True)
class KernelRecipe:
    """How the builder made one kernel: ``make``, the graph sizes of its arguments (inputs, then the
    output: ``arg_shapes``), the inputs' dtypes, and what the kernel fixes of its sizes."""

    name: str
    make: Callable
    arg_shapes: Tuple[tuple, ...]      # sympy sizes (aliases resolved), one shape per argument
    dtypes: Tuple[str, ...]            # of the inputs whose placeholders the builder makes
    own: int                           # arguments from here on are made by ``make`` (with the output)
    derived: bool                      # the output's (and own inputs') sizes are the kernel's own expressions
    variables: Tuple[object, ...]      # the graph sizes that are size vars, in var order
    multiples: Tuple[Tuple[object, int, int], ...] = ()   # (size, k, r): the kernel takes size = k * var + r
    units: Tuple[object, ...] = ()     # sizes that are 1 wherever this kernel runs
    condition: Optional[Tuple[object, int]] = None    # a variant's: it runs where size <= at_most

    def args_at(self, binding: Dict[object, int]) -> list:
        """The kernel's arguments (placeholders, then the output) with every size var at ``binding``
        ({graph size: int}, one entry per ``variables``)."""
        def extent(d):
            return int(d) if S.is_static(d) else int(binding[d])
        holders = [placeholder(tuple(extent(d) for d in shape), name=f"in{k}", dtype=dtype)
                   for k, (shape, dtype) in enumerate(zip(self.arg_shapes[:self.own], self.dtypes))]
        out = self.make(*holders, extent=extent)
        if isinstance(out, tuple):
            out, made = out
            holders = holders + list(made)
        return holders + [out]

    def binding_of(self, shapes: Sequence[Sequence[int]]) -> Optional[Dict[object, int]]:
        """The binding of ``variables`` at which this kernel's arguments have ``shapes`` (a record's
        sizes), or None where no binding gives them (another rank or constant, one size read as two
        values, a size this kernel fixes to 1 or to ``k * var + r`` that the shapes break, a binding
        where this variant does not run or where its condition cannot be told from the kernel's sizes).
        Sizes the kernel derives itself are left to the key to check."""
        if len(shapes) != len(self.arg_shapes):
            return None
        binding: Dict[object, int] = {}
        for k, (want, got) in enumerate(zip(self.arg_shapes, shapes)):
            if len(want) != len(got):
                return None
            for d, v in zip(want, got):
                if S.is_static(d):
                    if int(d) != v:
                        return None
                elif d in self.variables:
                    if binding.setdefault(d, v) != v or v < 1:
                        return None
                elif not (self.derived and k >= self.own):
                    return None
        if set(binding) != set(self.variables):
            return None
        if any(binding[d] != 1 for d in self.units):
            return None
        if any((binding[d] - r) % k or (binding[d] - r) // k < 1 for d, k, r in self.multiples):
            return None
        if self.condition is not None:
            size = _value_at(self.condition[0], binding)
            if size is None or size > self.condition[1]:
                return None
        return binding

    def at_graph_binding(self, sizes: Dict[str, int]) -> Dict[object, int]:
        """``variables`` evaluated at ``sizes`` ({symbol name: int}, a binding of the graph)."""
        return {d: int(S.evaluate(d, sizes)) for d in self.variables}


def volume(binding: Dict[object, int]) -> int:
    """The product of a binding's sizes (how large a binding is, for picking among several)."""
    total = 1
    for v in binding.values():
        total *= v
    return total



def _value_at(size, binding: Dict[object, int]) -> Optional[int]:
    """``size`` (sympy, over the graph's symbols) where the kernel's sizes are ``binding``, or None
    where they do not fix it."""
    if size in binding:
        return binding[size]
    value = sympy.sympify(size).xreplace({d: sympy.Integer(v) for d, v in binding.items()})
    if value.free_symbols:
        return None
    return int(S.evaluate(value, {}))
