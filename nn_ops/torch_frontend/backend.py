"""``torch.compile(module, backend="loopweave")``: dynamo's graphs compiled by loopweave.

Registered with torch through the ``torch_dynamo_backends`` entry point of ``pyproject.toml`` (torch
looks the name up there on first use), so ``import loopweave`` never imports torch.

For each graph dynamo captures, the backend freezes the module's state into constants
(``graph_inputs.py``), exports the graph to ONNX in memory (``export.py``), imports and compiles it.
Where dynamo marked sizes dynamic it exports them as symbolic dimensions and compiles once for all
of them; where that export or its import fails, it compiles once per input shape on first use.  A graph that uses
an op loopweave does not import, or tensors not on the CPU, runs eagerly in torch, with one
``EagerFallbackWarning`` naming the op(s) or the device.

``options``: ``{"target": "llvm ...", "tuning_log": "tune.jsonl"}`` (as ``lw.compile`` takes them).
Compiled graphs are kept for the process, keyed by the graph's code, its weights and input types,
so compiling the same module again reuses the executable; the kernel cache on disk makes a new
process compile no kernel it compiled before.
"""
from __future__ import annotations

import threading
import warnings
from collections import OrderedDict
from typing import Optional

from ...errors import (ArgumentError, EagerFallbackWarning, InternalError, LoopweaveError, OnnxImportError,
                       TorchExportError)
from ...target import resolve_target
from ..compile import compile as compile_graph
from ..models import from_onnx
from .compiled_graph import CompiledGraph, Fallback
from .export import to_onnx
from .graph_inputs import frozen_module, plan_inputs
from .tensors import device_of

OPTIONS = ("target", "tuning_log")
#: compiled graphs kept per process (the least recently used go first)
CACHE_SIZE = 64

_cache: "OrderedDict[tuple, CompiledGraph]" = OrderedDict()
_cache_lock = threading.Lock()


def _check_options(options: Optional[dict]) -> dict:
    options = dict(options or {})
    unknown = sorted(set(options) - set(OPTIONS))
    if unknown:
        raise ArgumentError(f"torch.compile(backend='loopweave', options=...): unknown option(s) "
                            f"{', '.join(map(repr, unknown))}; it takes {', '.join(map(repr, OPTIONS))}")
    target = resolve_target(options.get("target", "llvm"))
    if target.kind != "llvm":
        raise ArgumentError(f"torch.compile(backend='loopweave') runs CPU tensors: target must be an 'llvm' "
                            f"target, not {target.kind!r}")
    options["target"] = options.get("target", "llvm")
    return options


def _cache_key(gm, plan, example_inputs, options) -> tuple:
    """The graph's code, each piece of module state by identity, address and version (an in-place change
    of a weight bumps its version), the input types with symbolic sizes as ``?``, and the options."""
    import torch
    state = tuple((i, id(v), v.data_ptr(), tuple(v.shape), v.dtype, v._version) if isinstance(v, torch.Tensor)
                  else (i, repr(v)) for i, v in ((i, example_inputs[i]) for i in sorted(plan.constants)))
    inputs = tuple((tuple("?" if d in dims else s for d, s in enumerate(example_inputs[i].shape)),
                    example_inputs[i].dtype) for i, dims in zip(plan.tensors, plan.symbolic))
    return gm.code, state, inputs, str(options["target"]), str(options.get("tuning_log"))


def _fallback(gm, why: str):
    warnings.warn(f"torch.compile(backend='loopweave') runs this graph eagerly in torch: {why}",
                  EagerFallbackWarning, stacklevel=3)
    return gm.forward


def _unsupported_ops(exc: OnnxImportError) -> str:
    ops = sorted({op for _, op, _, _ in exc.unsupported})
    return ", ".join(ops) if ops else str(exc).splitlines()[0]


def _output_structure(gm):
    """The output pytree spec and, per leaf, (whether the network makes it, the value otherwise)."""
    import torch.fx
    from torch.utils._pytree import tree_flatten
    out = next(n for n in gm.graph.nodes if n.op == "output")
    leaves, spec = tree_flatten(out.args[0])
    return spec, [(isinstance(leaf, torch.fx.Node), None if isinstance(leaf, torch.fx.Node) else leaf)
                  for leaf in leaves]


def _compile_model(model, options, outputs: int):
    """The executable of ``model`` and its input names; the model must have ``outputs`` outputs (one per
    tensor the graph returns)."""
    if len(model.graph.output) != outputs:
        raise TorchExportError(f"the exported graph has {len(model.graph.output)} outputs where the torch graph "
                               f"returns {outputs} tensors")
    graph = from_onnx(model)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")      # a per-shape compile of a DynamicGraph is still one executable
        return compile_graph(graph, target=options["target"], progress=False,
                             tuning_log=options.get("tuning_log")), [i.name for i in model.graph.input]


def loopweave_backend(gm, example_inputs, options: Optional[dict] = None):
    """Dynamo's compiler function: a callable running ``gm`` through loopweave (compiled on its first
    call), or ``gm.forward`` (with one warning) where loopweave cannot take the graph."""
    import torch
    options = _check_options(options)
    device = device_of([t for t in example_inputs if isinstance(t, torch.Tensor)])
    if device:
        return _fallback(gm, f"its tensors are on device {device!r}; loopweave runs torch tensors on the CPU")
    try:
        plan = plan_inputs(gm, example_inputs)
    except ValueError as exc:
        return _fallback(gm, str(exc))
    key = _cache_key(gm, plan, example_inputs, options)
    with _cache_lock:
        if key in _cache:
            _cache.move_to_end(key)
            return _cache[key]
    module = frozen_module(gm, plan)
    spec, leaves = _output_structure(gm)
    outputs = sum(made for made, _ in leaves)

    def build(tensors, first: bool):
        """(executable, input names, whether it serves every shape) for ``tensors``."""
        try:
            if first and plan.dynamic:
                dims = tuple({d: torch.export.Dim.AUTO for d in symbolic} for symbolic in plan.symbolic)
                for optimize in (True, False):
                    try:
                        model = to_onnx(module, tensors, dynamic_shapes=(dims,), what="a torch.compile graph",
                                        optimize=optimize)
                        return _compile_model(model, options, outputs) + (True,)
                    except (LoopweaveError, InternalError):
                        pass     # torch's graph optimizer fails on some symbolic graphs; without it, a split
                        # exports as sequence ops loopweave does not import, ...: then compile per shape
            model = to_onnx(module, tensors, what="a torch.compile graph")
            return _compile_model(model, options, outputs) + (not plan.dynamic,)
        except OnnxImportError as exc:
            raise Fallback(f"loopweave does not import {_unsupported_ops(exc)}") from exc
        except TorchExportError as exc:
            raise Fallback(str(exc).splitlines()[0]) from exc

    compiled = CompiledGraph(plan, spec, leaves, build, gm.forward)
    with _cache_lock:
        _cache[key] = compiled
        while len(_cache) > CACHE_SIZE:
            _cache.popitem(last=False)
    return compiled
