"""The distinct kernels of a network, as tuning tasks for the autoscheduler.

A task is one fused group's compute DAG (placeholders ``in0, in1, ...`` and the output,
built from the op table exactly as the compiler builds it), keyed by the group's structural
signature, weighted by how many times one run of the network calls it, with the op
library's default schedule as the yardstick (and first candidate) the tuner must beat.

``extract_tasks(graph, target)`` (``lw.extract_tasks``, TVM's ``auto_scheduler.extract_tasks``)
lists them, and ``autoschedule.tune_network`` takes that list: the network compiler sits above
the autoscheduler, so it hands the tuner plain tasks and the tuner never imports it.
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Dict, List

from ...errors import ArgumentError
from ...target import Target, resolve_target
from ..ops.registry import schedule
from .executable import group_signature, group_computation, kernel_name, plan_kernel_groups
from .graph import Graph


@dataclass
class KernelTask:
    """One distinct kernel of a network."""
    name: str                 # a name for people: the first fused group that runs this kernel
    signature: str            # structural key: op types, attributes, shapes and dtypes of the group
    args: list                # the argument list of lw.build: input placeholders, then the output
    weight: int               # how many times one run of the network calls this kernel
    target: Target
    groups: List[str] = field(default_factory=list)   # every fused group that runs it

    def default_schedule(self):
        """The op library's schedule for this kernel (what the network compiles without a record)."""
        return schedule([self.args[-1]], self.target)

    def __repr__(self) -> str:
        out = self.args[-1]
        return (f"KernelTask({self.name!r}, output {out.dtype}{[str(d) for d in out.shape]}, "
                f"weight {self.weight}, {len(self.args) - 1} inputs)")


def extract_tasks(graph: Graph, target="llvm") -> List[KernelTask]:
    """The kernels ``graph`` compiles to for ``target``, one task per distinct kernel, in first-use
    order: what ``autoschedule.tune_network`` tunes."""
    if not isinstance(graph, Graph):
        raise ArgumentError(f"extract_tasks takes a static network graph (lw.from_onnx(...)), got "
                            f"{type(graph).__name__}; a model with dynamic shapes needs fixed input shapes "
                            f"(from_onnx(..., input_shapes=...))")
    tgt = resolve_target(target)
    g, kernel_groups, _, _ = plan_kernel_groups(graph, tgt.kind, tgt.precision)
    tasks: Dict[str, KernelTask] = {}
    for grp in kernel_groups:
        signature, params = group_signature(g, grp)
        task = tasks.get(signature)
        if task is None:
            placeholders, out = group_computation(g, grp, params)
            task = tasks[signature] = KernelTask(kernel_name(grp), signature, placeholders + [out], 0, tgt)
        task.weight += 1
        task.groups.append(grp.name)
    return list(tasks.values())

