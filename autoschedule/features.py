"""Features of a lowered kernel for the cost model.

Walks the loop IR of ``lw.lower`` and summarises every store under its loop nest: the
product of enclosing extents (how often it runs), the extents and kinds of its innermost
loops, vector lanes, the parallel extent above it, unrolled loops, nesting depth; then
allocations (local buffer sizes: register blocks, packed panels) and operation counts.
Stores are aggregated (sum / max) into a fixed-length vector, so kernels with different
numbers of stages share one feature space.
"""
from __future__ import annotations

import dataclasses
import math
from typing import List

import numpy as np

from ..lowering.ir import Allocate, BufferLoad, BufferStore, For, Ramp
from .task import const_int

NAMES = ["stores", "log_store_execs", "max_depth", "vector_stores", "max_lanes", "log_parallel_extent",
         "unrolled_loops", "log_unrolled_extent", "log_inner_extent", "inner_is_vector", "loads",
         "vector_loads", "log_alloc_elems", "allocs", "log_max_alloc", "serial_loops", "log_second_inner",
         "guards"]


def _children(node):
    if dataclasses.is_dataclass(node):
        for f in dataclasses.fields(node):
            v = getattr(node, f.name)
            if isinstance(v, tuple):
                for x in v:
                    if dataclasses.is_dataclass(x):
                        yield x
            elif dataclasses.is_dataclass(v):
                yield v


def extract(func) -> np.ndarray:
    """A fixed-length float vector describing the lowered function ``func``."""
    acc = dict.fromkeys(NAMES, 0.0)

    def count_loads(node):
        stack, n, nv = [node], 0, 0
        while stack:
            x = stack.pop()
            if isinstance(x, BufferLoad):
                n += 1
                if any(isinstance(i, Ramp) for i in x.indices):
                    nv += 1
            stack.extend(_children(x))
        return n, nv

    def walk(node, loops: List[For]):
        if isinstance(node, For):
            loops = loops + [node]
            if node.kind == "serial":
                acc["serial_loops"] += 1
            elif node.kind == "unrolled":
                acc["unrolled_loops"] += 1
                acc["log_unrolled_extent"] += math.log2(max(1, const_int(node.extent) or 1))
        elif isinstance(node, Allocate):
            n = const_int(node.extent) or 1
            acc["allocs"] += 1
            acc["log_alloc_elems"] += math.log2(max(1, n))
            acc["log_max_alloc"] = max(acc["log_max_alloc"], math.log2(max(1, n)))
        elif type(node).__name__ == "IfThenElse":
            acc["guards"] += 1
        elif isinstance(node, BufferStore):
            execs = 1
            par = 1
            for lp in loops:
                e = const_int(lp.extent) or 64
                execs *= e
                if lp.kind == "parallel":
                    par *= e
            lanes = 1
            for i in node.indices:
                if isinstance(i, Ramp):
                    lanes = max(lanes, const_int(getattr(i, "lanes", 1)) or 1)
            acc["stores"] += 1
            acc["log_store_execs"] += math.log2(max(1, execs))
            acc["max_depth"] = max(acc["max_depth"], len(loops))
            acc["vector_stores"] += lanes > 1
            acc["max_lanes"] = max(acc["max_lanes"], lanes)
            acc["log_parallel_extent"] = max(acc["log_parallel_extent"], math.log2(par))
            if loops:
                acc["log_inner_extent"] += math.log2(max(1, const_int(loops[-1].extent) or 1))
                acc["inner_is_vector"] += loops[-1].kind == "vectorized" or lanes > 1
            if len(loops) >= 2:
                acc["log_second_inner"] += math.log2(max(1, const_int(loops[-2].extent) or 1))
            n, nv = count_loads(node.value)
            acc["loads"] += n
            acc["vector_loads"] += nv
            return
        for c in _children(node):
            walk(c, loops)

    walk(func.body, [])
    return np.array([acc[n] for n in NAMES], dtype=np.float64)


def encode_choice(space, choice) -> np.ndarray:
    """The decisions as numbers (index of the choice in its list), appended to the IR features."""
    out = []
    for name, choices in space.decisions:
        v = choice.get(name)
        out.append(float(choices.index(v)) if v in choices else -1.0)
        if all(isinstance(c, int) and not isinstance(c, bool) for c in choices):
            out.append(math.log2(max(1, v or 1)) if isinstance(v, int) else 0.0)
    return np.array(out, dtype=np.float64)
