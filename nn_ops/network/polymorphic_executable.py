"""PolymorphicExecutable: a network compiled once for every binding of its symbolic sizes.

Made by ``lw.compile(graph, polymorphic=True)`` from a DynamicGraph
(``onnx_import/polymorphic.py`` builds the kernels).  Each kernel was built once with its
symbolic extents as ``lw.var`` sizes, which the kernel takes as arguments (the runtime binds
them from the arrays' shapes).  ``run`` checks the feed against the symbolic signature,
evaluates the symbolic memory plan (``symbolic_plan.py``) at the binding, and calls the
kernels in order on views of one arena; nothing is compiled at run time.

What it is not yet (issue 18): one native entry point (the kernels are called from Python, one
ctypes call each), fused (one kernel per graph node, except a MatMul's bias), or saved
(``save`` refuses).  Shapes that are views of others (Reshape and friends) cost nothing.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Dict, List, Sequence, Tuple

import numpy as np

from ...errors import ArgumentError
from . import symbolic as S
from .feed import check_names_and_dtypes, show_shape
from .signature import SymbolicSignature
from .symbolic_plan import SymbolicPlan


@dataclass
class KernelCall:
    """One kernel call: ``module(*arrays of args)``; ``node`` names the graph node it computes."""

    node: str
    module: object
    args: Tuple[str, ...]


@dataclass
class View:
    """``name`` is ``source`` read with another shape (a Reshape of contiguous data)."""

    name: str
    source: str
    shape: tuple


class PolymorphicExecutable:
    def __init__(self, signature: SymbolicSignature, calls: Sequence[KernelCall], views: Sequence[View],
                 plan: SymbolicPlan, constants: Dict[str, np.ndarray], outputs: Sequence[str], name: str = "graph"):
        self.signature, self.calls, self.plan = signature, list(calls), plan
        self.views = list(views)
        self.constants = dict(constants)
        self.output_names = list(outputs)
        self.name = name

    @property
    def inputs(self) -> List[Tuple[str, tuple, str]]:
        return [(n, tuple(S.show(d) if not S.is_static(d) else int(d) for d in s), dt)
                for n, s, dt in self.signature.inputs]

    @property
    def outputs(self):
        return [(n, tuple(S.show(d) for d in s) if s is not None else None, dt) for n, s, dt in self.signature.outputs]

    def bind(self, feed) -> Dict[str, int]:
        binding = self.signature.bind(feed)
        self.signature.check(binding)
        return binding

    def run(self, feed) -> List[np.ndarray]:
        """Run on ``feed`` ({input name: array}); the outputs are new arrays."""
        feed = check_names_and_dtypes(self.signature.inputs, feed)
        binding = self.bind(feed)
        arrays = dict(self.constants)
        arrays.update({n: np.ascontiguousarray(a) for n, a in feed.items()})
        arrays.update(self.plan.arrays(binding))
        for v in self.views:
            if v.name not in self.plan.slot_of or v.source not in self.plan.slot_of:
                arrays[v.name] = arrays[v.source].reshape(tuple(int(S.evaluate(d, binding)) for d in v.shape))
        for call in self.calls:
            try:
                call.module(*(arrays[a] for a in call.args))
            except ArgumentError as exc:        # a kernel refusing planned arrays is a compiler bug
                raise ArgumentError(f"node {call.node!r}: {exc}") from exc
        return [np.array(arrays[n]) for n in self.output_names]

    __call__ = run

    def save(self, path) -> None:
        raise ArgumentError("saving a polymorphic executable is not supported yet (issue 18); compile without "
                            "polymorphic=True to get a DynamicExecutable, which saves its specialisations")

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d}{show_shape(s)}" for n, s, d in self.inputs)
        return (f"<loopweave PolymorphicExecutable {self.name!r} ({ins}): {len(self.calls)} kernel calls, "
                f"{len({id(c.module) for c in self.calls})} distinct kernels, {len(self.plan.slot_sizes)} arena slots>")
