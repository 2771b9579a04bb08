"""``lw.extract_tasks``: a network's kernels as tuning tasks, for static graphs and DynamicGraphs alike.

A static Graph's tasks are its fused groups (``network/tasks.py``).  A DynamicGraph compiles once
(``builder.py``), into kernels over ``lw.var`` extents, which the tuner cannot time; its tasks are
those kernels at one binding of the graph's symbols (``KernelRecipe.args_at``): the kernel each call
runs there (a variant where the binding picks one), weighted by how many calls run it.  Their
records carry their sizes, and ``lw.compile(graph, tuning_log=...)`` replays them on the kernels of
symbolic sizes (``tuned.py``).  A DynamicGraph the compile-once walk does not cover compiles per
shape: its tasks are those of its static specialisation at the binding.
"""
from __future__ import annotations

from typing import Dict, List, Optional

from ...errors import ArgumentError, OnnxImportError
from ...target import resolve_target
from ..network import symbolic as S, tasks as static_tasks
from ..network.graph import Graph
from ..network.tasks import KernelTask
from ..onnx_import.dynamic import DynamicGraph
from .builder import walker

#: the size every symbol takes when ``extract_tasks`` is not told (``sizes``), but the leading axis of
#: an input (a batch, by ONNX convention), which takes 1: a sequence of 64 tokens, a 64x64 image
TUNING_SIZE = 64


def extract_tasks(graph, target="llvm", sizes: Optional[Dict[str, int]] = None) -> List[KernelTask]:
    """The kernels ``graph`` compiles to for ``target``, one task per distinct kernel, in first-use
    order: what ``autoschedule.tune_network`` tunes.  For a DynamicGraph, the compile-once kernels
    at the binding ``sizes`` ({symbol: int}; by default ``representative_sizes``)."""
    if isinstance(graph, Graph):
        if sizes is not None:
            raise ArgumentError("extract_tasks: sizes= binds the symbols of a model with dynamic shapes; this "
                                "graph's shapes are static")
        return static_tasks.extract_tasks(graph, target)
    if not isinstance(graph, DynamicGraph):
        raise ArgumentError(f"extract_tasks takes a static network graph or a DynamicGraph (lw.from_onnx(...)), "
                            f"got {type(graph).__name__}")
    if graph.value_inputs:
        raise ArgumentError(f"extract_tasks: {graph.name!r} has shape inputs ({', '.join(graph.value_inputs)}), "
                            f"whose values change its kernels: import it with fixed shapes "
                            f"(from_onnx(..., input_shapes=...)) to tune one specialisation")
    tgt = resolve_target(target)
    binding = _binding(graph, sizes)
    builder = walker(graph, tgt)
    builder.building = False
    try:
        builder.walk()
    except OnnxImportError:         # lw.compile specialises this model per shape: its kernels at the binding
        shapes = {n: tuple(int(S.evaluate(d, binding)) for d in shape) for n, shape, _ in graph.signature.inputs}
        return static_tasks.extract_tasks(graph.specialize(shapes, {}), tgt)
    tasks: Dict[int, KernelTask] = {}
    for call in builder.calls:
        module = call.module_at(binding)
        task = tasks.get(id(module))
        if task is None:
            recipe = builder.recipes[id(module)]
            args = recipe.args_at(recipe.at_graph_binding(binding))
            at = ",".join(f"{k}={v}" for k, v in sorted(binding.items()))
            task = tasks[id(module)] = KernelTask(call.node, f"{recipe.name}@{at}", args, 0, tgt)
        task.weight += 1
        task.groups.append(call.node)
    return list(tasks.values())


def representative_sizes(graph: DynamicGraph) -> Dict[str, int]:
    """Each symbol of ``graph`` at ``TUNING_SIZE``, or 1 where it is first seen as an input's
    leading axis."""
    out: Dict[str, int] = {}
    for _, shape, _ in graph.signature.inputs:
        for axis, d in enumerate(shape):
            if getattr(d, "is_Symbol", False) and d.name not in out:
                out[d.name] = 1 if axis == 0 else TUNING_SIZE
    return out


def _binding(graph: DynamicGraph, sizes: Optional[Dict[str, int]]) -> Dict[str, int]:
    """``sizes`` (or the representative ones) checked: every symbol, whole numbers >= 1, and the
    graph's run-time checks hold."""
    symbols = graph.signature.symbols
    if sizes is None:
        binding = representative_sizes(graph)
    else:
        if not isinstance(sizes, dict):
            raise ArgumentError(f"extract_tasks: sizes= takes {{symbol: int}}, got {type(sizes).__name__}")
        unknown = sorted(set(sizes) - set(symbols))
        if unknown:
            raise ArgumentError(f"extract_tasks: sizes= names {', '.join(unknown)}, which the model's inputs do not "
                                f"have; its symbols: {', '.join(symbols)}")
        binding = {**representative_sizes(graph), **sizes}
    missing = [s for s in symbols if s not in binding]
    if missing:
        raise ArgumentError(f"extract_tasks: give a size for {', '.join(missing)} (sizes={{{missing[0]!r}: 64}})")
    for name, v in binding.items():
        if isinstance(v, bool) or not isinstance(v, int) or v < 1:
            raise ArgumentError(f"extract_tasks: size {name}={v!r} is not a whole number >= 1")
    try:
        graph.signature.check(binding)
    except ArgumentError as exc:
        raise ArgumentError(f"extract_tasks: at sizes {binding}: {exc}; give other sizes= to tune at") from None
    return binding
