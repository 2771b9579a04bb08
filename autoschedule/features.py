"""Task-independent features of a lowered kernel, for one cost model across tasks.

Ansor's kind, per store of the loop IR of ``lw.lower``: its arithmetic by kind (instructions per
run: a vector operation counts once), its loads by access pattern along the innermost loop
(contiguous, strided, invariant), the bytes its accesses touch inside the innermost 1, 2, 3 and 4
loops and the whole nest (the footprint each cache level must hold) with the reuse that gives and
the bytes brought in by all runs of those loops (traffic), its vector lanes and the vector registers
one operation fills (a partial one wastes lanes), the parallel extent above it, the share of the
threads' time that loop keeps busy, how often the pool starts it and the work of one of its chunks,
the unrolled extent around it and the shape of its loop nest.  A kernel's vector is the heaviest
store's features (by instructions run), sums over all its stores of the counts (how much work, and
how much per thread, in all), the allocations (local buffers against the register file,
intermediates), and the target's properties (lanes, vector registers, threads), so one model ranks
schedules of any kernel on any CPU target.  Beside them, their changes from the task's untuned
kernel: how much a schedule recomputed, vectorised or shrank relative to its own task, which ranks
a task's candidates in units that mean the same for a blur and a conv (on held-out tasks, pairwise
accuracy 0.847 against 0.822 with the own features alone, means of six seeds).  Nothing in it names a task's
tensors, axes or decisions.  Cache sizes are not among them: ``target_info`` knows them, a layer above the tuner; the
footprints per loop level let the model learn the thresholds of the CPUs it was trained on.
"""
from __future__ import annotations

import dataclasses
import math
from functools import lru_cache
from typing import Dict, List

import numpy as np

from ..dsl.expr import Binary, Call, Cast, Compare, Logical, Select, Var
from ..lowering.lower import lower
from ..lowering.ir import Allocate, BufferLoad, BufferStore, For, IfThenElse, LetStmt, Ramp, Seq
from ..target import resolve_target
from .task import const_int

#: operation kinds counted per store (Binary ops map to a kind by name)
OP_KINDS = ("add", "mul", "div", "minmax", "math", "compare", "cast")
_BINARY_KIND = {"add": "add", "sub": "add", "mul": "mul", "div": "div", "floordiv": "div", "mod": "div",
                "floormod": "div", "truncdiv": "div", "truncmod": "div", "min": "minmax", "max": "minmax"}
#: loop levels, innermost first, whose footprint is measured (0: the whole nest)
LEVELS = (1, 2, 3, 4, 0)

STORE_NAMES = (
    [f"ops_{k}" for k in OP_KINDS]
    + ["loads", "loads_contiguous", "loads_strided", "loads_invariant", "loads_vector",
       "log_execs", "lanes", "depth", "log_inner_extent", "inner_vector", "inner_unrolled", "log_second_extent",
       "log_parallel", "parallel_per_thread", "log_unrolled", "store_contiguous", "store_invariant",
       "vector_registers_wide", "partial_vector", "thread_use", "log_launches", "log_work_per_chunk"]
    + [f"log_bytes_l{lv}" for lv in LEVELS] + [f"log_reuse_l{lv}" for lv in LEVELS]
    + [f"log_traffic_l{lv}" for lv in LEVELS]
)
SUM_NAMES = ([f"sum_ops_{k}" for k in OP_KINDS]
             + ["sum_loads", "sum_execs", "sum_bytes", "stores", "heavy_share", "parallel_share", "vector_share",
                "sum_work", "sum_work_per_thread", "sum_launches"] + [f"sum_traffic_l{lv}" for lv in LEVELS])
KERNEL_NAMES = ["log_local_bytes", "local_over_registers", "log_max_local", "local_allocs", "log_global_bytes",
                "guards", "nests"]
TARGET_NAMES = ["lanes_f32", "vector_registers", "threads"]
#: a kernel's own features, then how each of them (the target's left out) differs from its task's untuned kernel
OWN_NAMES = ["heavy_" + n for n in STORE_NAMES] + SUM_NAMES + KERNEL_NAMES + TARGET_NAMES
CHANGE_NAMES = ["change_" + n for n in OWN_NAMES[:-len(TARGET_NAMES)]]
NAMES = OWN_NAMES + CHANGE_NAMES


def _log(x: float) -> float:
    return math.log2(1.0 + max(0.0, x))


@lru_cache(maxsize=None)
def _field_names(cls) -> tuple:
    """The field names of the IR node class ``cls`` (``dataclasses.fields`` per node was a fifth of
    extracting a kernel's features)."""
    return tuple(f.name for f in dataclasses.fields(cls))


def _children(node):
    for name in _field_names(type(node)):
        v = getattr(node, name)
        if isinstance(v, tuple):
            for x in v:
                if dataclasses.is_dataclass(x):
                    yield x
        elif dataclasses.is_dataclass(v):
            yield v


@lru_cache(maxsize=64)
def _target_facts(target) -> tuple:
    """(lanes of float32, vector registers, threads) of ``target``."""
    tgt = resolve_target(target)
    return tgt.lanes("float32"), tgt.vector_registers, tgt.num_threads


def _dtype_bytes(dtype: str) -> int:
    digits = "".join(ch for ch in dtype if ch.isdigit())
    return max(1, int(digits) // 8) if digits else 1


class _Walker:
    """One pass over a lowered function collecting each store's features."""

    def __init__(self, facts):
        self.facts = facts
        self.stores: List[np.ndarray] = []
        self.work: List[float] = []
        self.work_per_thread: List[float] = []
        self.launches: List[float] = []
        self.traffic: List[np.ndarray] = []
        self.lets: Dict[int, frozenset] = {}       # id(let var) -> ids of the loop vars it depends on
        self.local_bytes = self.max_local = self.local_allocs = self.global_bytes = 0.0
        self.guards = 0

    # -- expressions ---------------------------------------------------------
    def _vars(self, e) -> frozenset:
        """Ids of the loop variables ``e`` depends on (through lets too)."""
        out, stack = set(), [e]
        while stack:
            x = stack.pop()
            if isinstance(x, Var):
                out.add(id(x))
                out |= self.lets.get(id(x), frozenset())
            elif dataclasses.is_dataclass(x):
                stack.extend(_children(x))
        return frozenset(out)

    def _ops(self, e, counts: dict, loads: list) -> None:
        stack = [e]
        while stack:
            x = stack.pop()
            if isinstance(x, BufferLoad):
                loads.append(x)
                continue          # index arithmetic is address computation, not the kernel's
            kind = None
            if isinstance(x, Binary):
                kind = _BINARY_KIND.get(x.op)
            elif isinstance(x, Call):
                kind = "math"
            elif isinstance(x, (Compare, Logical, Select)):
                kind = "compare"
            elif isinstance(x, Cast):
                kind = "cast"
            if kind is not None:
                counts[kind] += 1
            stack.extend(_children(x))

    # -- statements ----------------------------------------------------------
    def walk(self, node, loops: list) -> None:
        if isinstance(node, For):
            loops = loops + [(node, id(node.var), const_int(node.extent) or 16)]
            return self.walk(node.body, loops)
        if isinstance(node, LetStmt):
            self.lets[id(node.var)] = self._vars(node.value)
            return self.walk(node.body, loops)
        if isinstance(node, Allocate):
            n = (const_int(node.extent) or 1) * _dtype_bytes(node.buffer.dtype)
            if node.buffer.scope == "local":
                self.local_bytes += n
                self.max_local = max(self.max_local, n)
                self.local_allocs += 1
            else:
                self.global_bytes += n
            return self.walk(node.body, loops)
        if isinstance(node, IfThenElse):
            self.guards += 1
            self.walk(node.then_case, loops)
            if node.else_case is not None:
                self.walk(node.else_case, loops)
        elif isinstance(node, Seq):
            for c in node.stmts:
                self.walk(c, loops)
        elif isinstance(node, BufferStore):
            self.store(node, loops)

    def _access(self, buffer, indices, loops, inner_var) -> tuple:
        """(pattern along the innermost loop, lanes, per-level footprint in bytes) of one access."""
        lanes = max([i.lanes for i in indices if isinstance(i, Ramp)], default=1)
        deps = [self._vars(i) for i in indices]
        all_deps = frozenset().union(*deps) if deps else frozenset()
        if inner_var is None or inner_var not in all_deps:
            pattern = "invariant"
        elif inner_var in deps[-1] and not any(inner_var in d for d in deps[:-1]):
            pattern = "contiguous"
        else:
            pattern = "strided"
        size = _dtype_bytes(buffer.dtype) * lanes
        foot = []
        for lv in LEVELS:
            inside = loops if lv == 0 else loops[-lv:]
            f = size
            for _, vid, ext in inside:
                if vid in all_deps:
                    f *= ext
            foot.append(f)
        return pattern, lanes, foot

    def store(self, node: BufferStore, loops: list) -> None:
        lanes_f32, _, threads = self.facts
        counts = dict.fromkeys(OP_KINDS, 0)
        loads: list = []
        self._ops(node.value, counts, loads)
        execs = 1.0
        parallel = unrolled = 1.0
        launches = 0.0          # times the thread pool starts this store's parallel loop
        for lp, _, ext in loops:
            if lp.kind == "parallel":
                launches = launches or execs
                parallel *= ext
            elif lp.kind == "unrolled":
                unrolled *= ext
            execs *= ext
        # the share of the threads' time a parallel loop keeps busy (its last round of chunks may
        # leave threads idle); a serial store keeps one thread of all busy
        thread_use = parallel / (threads * math.ceil(parallel / threads)) if launches else 1.0 / threads
        work = execs * (1 + sum(counts.values()) + len(loads))
        inner_var = loops[-1][1] if loops else None
        patterns = {"contiguous": 0, "strided": 0, "invariant": 0}
        vec_loads = 0
        foot = np.zeros(len(LEVELS))
        accesses = 0
        for ld in loads:
            pattern, lanes, f = self._access(ld.buffer, ld.indices, loops, inner_var)
            patterns[pattern] += 1
            vec_loads += lanes > 1
            foot += f
            accesses += 1
        s_pattern, s_lanes, f = self._access(node.buffer, node.indices, loops, inner_var)
        foot += f
        accesses += 1
        reuse, traffic = [], np.zeros(len(LEVELS))
        for j, lv in enumerate(LEVELS):
            inside = loops if lv == 0 else loops[-lv:]
            n = 1.0
            for _, _, ext in inside:
                n *= ext
            reuse.append(_log(n * accesses * _dtype_bytes(node.buffer.dtype) * s_lanes / max(1.0, foot[j])))
            traffic[j] = foot[j] * execs / n       # bytes brought in by every run of the level's loops
        width = s_lanes * _dtype_bytes(node.buffer.dtype) / (4.0 * lanes_f32)   # in vector registers
        inner = loops[-1] if loops else None
        second = loops[-2] if len(loops) >= 2 else None
        row = ([_log(execs * counts[k]) for k in OP_KINDS]
               + [len(loads), patterns["contiguous"], patterns["strided"], patterns["invariant"], vec_loads,
                  _log(execs), s_lanes, len(loops), _log(inner[2]) if inner else 0.0,
                  float(s_lanes > 1), float(inner is not None and inner[0].kind == "unrolled"),
                  _log(second[2]) if second else 0.0, _log(parallel), parallel / threads, _log(unrolled),
                  float(s_pattern == "contiguous"), float(s_pattern == "invariant"),
                  width, float(s_lanes > 1 and width != math.ceil(width)), thread_use, _log(launches),
                  _log(work / max(1.0, launches * parallel))]
               + [_log(x) for x in foot] + reuse + [_log(x) for x in traffic])
        self.stores.append(np.array(row, dtype=np.float64))
        self.work.append(work)
        self.work_per_thread.append(work / (threads * thread_use))
        self.launches.append(launches)
        self.traffic.append(traffic)


def untuned_features(task) -> np.ndarray:
    """The own features (``OWN_NAMES``) of ``task``'s untuned kernel: what ``extract`` measures a
    schedule's changes from."""
    return own_features(lower(task.schedule(), task.args), task.target)


def extract(func, target, untuned: np.ndarray) -> np.ndarray:
    """The feature vector (``NAMES``) of the lowered function ``func`` built for ``target``, a
    schedule of the task whose untuned kernel has the own features ``untuned``
    (``untuned_features``): its own features and their changes from the untuned kernel's.  The
    changes say what a schedule did to its task (ops recomputed, loads made contiguous, footprints
    shrunk) in the same units for every task."""
    own = own_features(func, target)
    n = len(CHANGE_NAMES)
    return np.concatenate([own, own[:n] - np.asarray(untuned)[:n]])


def own_features(func, target) -> np.ndarray:
    """The features of ``OWN_NAMES`` of the lowered function ``func`` built for ``target``."""
    facts = _target_facts(target)
    lanes_f32, registers, threads = facts
    w = _Walker(facts)
    w.walk(func.body, [])
    nests = len(getattr(func.body, "stmts", (func.body,)))
    if w.stores:
        S = np.stack(w.stores)
        work = np.array(w.work)
        heavy = S[int(np.argmax(work))]
        idx = {n: i for i, n in enumerate(STORE_NAMES)}
        execs = np.exp2(S[:, idx["log_execs"]]) - 1
        sums = [_log(float(np.sum(np.exp2(S[:, idx[f"ops_{k}"]]) - 1))) for k in OP_KINDS]
        sums += [_log(float(np.sum(execs * S[:, idx["loads"]]))), _log(float(np.sum(execs))),
                 _log(float(np.sum(np.exp2(S[:, idx["log_bytes_l0"]]) - 1))), len(w.stores),
                 float(work.max() / work.sum()), float(work[S[:, idx["log_parallel"]] > 0].sum() / work.sum()),
                 float(work[S[:, idx["lanes"]] > 1].sum() / work.sum()),
                 _log(float(work.sum())), _log(float(np.sum(w.work_per_thread))), _log(float(np.sum(w.launches)))]
        sums += [_log(float(x)) for x in np.sum(w.traffic, axis=0)]
    else:
        heavy = np.zeros(len(STORE_NAMES))
        sums = [0.0] * len(SUM_NAMES)
    register_bytes = registers * lanes_f32 * 4
    kernel = [_log(w.local_bytes), w.local_bytes / register_bytes, _log(w.max_local), w.local_allocs,
              _log(w.global_bytes), w.guards, nests]
    tgt = [lanes_f32, registers, threads]
    return np.concatenate([heavy, np.array(sums), np.array(kernel), np.array(tgt, dtype=np.float64)])
