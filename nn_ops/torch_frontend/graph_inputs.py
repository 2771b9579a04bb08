"""What each input of a dynamo ``GraphModule`` is, and the module that exports it with its state frozen.

Dynamo hands a backend a GraphModule whose placeholders are the user's tensors, the module's
parameters and buffers (lifted to inputs), and, where it marked sizes dynamic, the sizes themselves
(``SymInt`` placeholders such as ``s33``).  ``InputPlan`` sorts them:

* module state (a ``Parameter``, a buffer, any value read off an attribute of an argument, such as
  ``self``, or off a global) becomes a constant of the exported graph, so loopweave folds it
  (batch-norm folding, packed weights) instead of taking it as an input on every call; a Python
  number dynamo wrapped as a 0-d tensor and only reads back with ``.item()`` (a LayerNorm's eps under
  ``dynamic=True``) is passed as a numpy scalar, whose ``.item()`` the exporter sees as a constant
  rather than as a value known only at run time;
* the user's tensors stay inputs;
* a size placeholder is read off the tensor dimension that carries the same symbol, so the graph's
  inputs are tensors only and a symbolic size becomes a named dimension of the ONNX model (a size
  dynamo specialised while tracing, such as a Linear layer's input width, stays a number).

The weights are read when the graph compiles: a compiled graph is for inference, and changing a
parameter in place afterwards does not reach it (compile again, e.g. after ``torch._dynamo.reset()``).
"""
from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Dict, List, Optional, Tuple

#: the source of a value the caller passes: an argument, or an item of one (not an attribute)
_CALLER_SOURCE = re.compile(r"^L\['[^']+'\](\[[^\]]+\])*$")


def _source_name(node) -> str:
    grapharg = node.meta.get("grapharg")
    source = getattr(grapharg, "source", None)
    if source is None:
        return ""
    name = source.name
    return name() if callable(name) else str(name)


@dataclass
class InputPlan:
    """How the GraphModule's placeholders map to the exported graph: constants (by position), tensor
    inputs (positions in call order) and sizes (position -> (tensor input, dimension))."""
    count: int
    constants: Dict[int, object] = field(default_factory=dict)
    tensors: List[int] = field(default_factory=list)
    sizes: Dict[int, Tuple[int, int]] = field(default_factory=dict)
    #: per tensor input, its symbolic dimensions: {dimension: symbol}
    symbolic: List[Dict[int, str]] = field(default_factory=list)

    @property
    def dynamic(self) -> bool:
        return any(self.symbolic)

    def tensor_args(self, args) -> list:
        return [args[i] for i in self.tensors]


def _as_scalar(node, tensor):
    """``tensor`` as a numpy scalar where it is a 0-d tensor every use of which is ``.item()``."""
    if tensor.dim() == 0 and node.users and all(u.op == "call_method" and u.target == "item" for u in node.users):
        import numpy as np
        return np.asarray(tensor.item())[()]
    return tensor


def plan_inputs(gm, example_inputs) -> InputPlan:
    """Sort ``gm``'s placeholders (see the module docstring); an unmatched size symbol raises ValueError."""
    import torch
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    plan = InputPlan(count=len(placeholders))
    size_symbols: Dict[str, int] = {}
    for i, (node, example) in enumerate(zip(placeholders, example_inputs)):
        source = _source_name(node)
        if isinstance(example, torch.SymInt) or isinstance(node.meta.get("example_value"), torch.SymInt):
            size_symbols[str(node.meta.get("example_value", example))] = i
        elif not isinstance(example, torch.Tensor):
            plan.constants[i] = example
        elif isinstance(example, torch.nn.Parameter) or not _CALLER_SOURCE.match(source):
            plan.constants[i] = _as_scalar(node, example.detach())
        else:
            plan.tensors.append(i)
    for k, i in enumerate(plan.tensors):
        fake = placeholders[i].meta.get("example_value")
        dims = {}
        for d, size in enumerate(getattr(fake, "shape", ())):
            if isinstance(size, torch.SymInt) and not getattr(size.node.expr, "is_number", False):
                dims[d] = str(size)
                if str(size) in size_symbols:
                    plan.sizes.setdefault(size_symbols[str(size)], (k, d))
        plan.symbolic.append(dims)
    missing = sorted(s for s, i in size_symbols.items() if i not in plan.sizes)
    if missing:
        raise ValueError(f"sizes {', '.join(missing)} are not dimensions of an input tensor")
    return plan


def frozen_module(gm, plan: InputPlan, size_values: Optional[Dict[int, int]] = None):
    """A module of the tensor inputs only that calls ``gm`` with the constants in place and each size
    read off its tensor (or, given ``size_values``, fixed to those numbers)."""
    import torch

    class Frozen(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.gm = gm
            for i, value in plan.constants.items():
                if isinstance(value, torch.Tensor):
                    self.register_buffer(f"state_{i}", value)

        def forward(self, *inputs):
            args: list = [None] * plan.count
            for i, value in plan.constants.items():
                args[i] = getattr(self, f"state_{i}") if isinstance(value, torch.Tensor) else value
            for k, i in enumerate(plan.tensors):
                args[i] = inputs[k]
            for i, (k, d) in plan.sizes.items():
                args[i] = size_values[i] if size_values is not None else inputs[k].shape[d]
            return self.gm(*args)

    return Frozen().eval()
