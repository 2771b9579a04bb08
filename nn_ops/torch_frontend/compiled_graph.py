"""The callable ``torch.compile(backend="loopweave")`` returns for one dynamo graph.

It takes the graph's placeholders in dynamo's order (parameters and sizes included, as dynamo
passes them), hands the user's tensors to the compiled network as numpy views of their storage,
and returns the outputs as tensors sharing the arrays the network wrote, in the graph's output
structure.

It compiles on its first call, outside dynamo's tracing: torch's exporter traces the graph again,
and tracing with symbolic sizes from inside dynamo's own compile fails.  A graph compiled once for
every size (a DynamicGraph) has one executable; otherwise it keeps one per input shape, compiled on
first use.  Where loopweave cannot compile the graph (``build`` raises ``Fallback``), it warns once and
runs the graph eagerly from then on.  Compiled networks compute no gradients: a call that needs them
(grad mode on and a tensor, weights included, that requires grad) runs eagerly, with one warning.
"""
from __future__ import annotations

import threading
import warnings
from typing import Callable, Dict, Optional

from ...errors import EagerFallbackWarning
from .graph_inputs import InputPlan
from .tensors import as_numpy, as_torch, check_cpu


class Fallback(Exception):
    """``build`` cannot compile the graph; the message says why (the op or the device)."""


class CompiledGraph:
    """``compiled(*args)`` runs the network; ``compiles`` counts the executables built for it;
    ``eager`` is set once it runs the graph in torch instead."""

    def __init__(self, plan: InputPlan, out_spec, out_leaves, build: Callable, eager: Callable):
        self.plan = plan
        self._out_spec = out_spec
        self._out_leaves = list(out_leaves)   # (the network makes it, the value otherwise) per output leaf
        self._build = build                   # (tensors, first) -> (executable, input names, for every shape)
        self._eager = eager
        self.eager = False
        self._warned_grad = False
        self._once: Optional[tuple] = None
        self._executables: Dict[tuple, tuple] = {}
        self._lock = threading.Lock()

    @property
    def compiles(self) -> int:
        return len(self._executables) + (self._once is not None)

    def _executable_for(self, tensors) -> Optional[tuple]:
        if self._once is not None:
            return self._once
        key = tuple((tuple(t.shape), t.dtype) for t in tensors)
        found = self._executables.get(key)
        if found is not None:
            return found
        with self._lock:
            if self.eager:
                return None
            found = self._executables.get(key) or self._once
            if found is None:
                try:
                    executable, names, every_shape = self._build(tensors, first=not self._executables)
                except Fallback as why:
                    warnings.warn(f"torch.compile(backend='loopweave') runs this graph eagerly in torch: {why}",
                                  EagerFallbackWarning, stacklevel=4)
                    self.eager = True
                    return None
                found = (executable, names)
                if every_shape:
                    self._once = found
                else:
                    self._executables[key] = found
        return found

    def _needs_grad(self, args) -> bool:
        import torch
        if not torch.is_grad_enabled() or not any(getattr(a, "requires_grad", False) for a in args):
            return False
        if not self._warned_grad:
            self._warned_grad = True
            warnings.warn("torch.compile(backend='loopweave') runs this graph eagerly in torch while gradients are "
                          "needed (loopweave compiles inference: call it under torch.no_grad() or "
                          "torch.inference_mode())", EagerFallbackWarning, stacklevel=3)
        return True

    def __call__(self, *args):
        from torch.utils._pytree import tree_unflatten
        if self.eager or self._needs_grad(args):
            return self._eager(*args)
        tensors = self.plan.tensor_args(args)
        check_cpu(tensors, "a graph compiled by torch.compile(backend='loopweave')")
        found = self._executable_for(tensors)
        if found is None:
            return self._eager(*args)
        executable, names = found
        outs = iter(executable.run({name: as_numpy(t) for name, t in zip(names, tensors)}))
        leaves = [as_torch(next(outs)) if made else value for made, value in self._out_leaves]
        return tree_unflatten(leaves, self._out_spec)
