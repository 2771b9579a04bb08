"""Compile a static Graph into one native entry point, run it, save and load it.

``compile_graph(graph, target)``:

1. graph passes (``passes.optimize``, ``materialize_output_copies``), then ``fuse_operators`` into
   kernels, of which ``concats_in_place`` and ``slices_as_views`` (``passes/``) leave out the
   concats and slices that read as places in other values' memory;
2. each kernel's computation is built from the op table over placeholders named
   ``in0, in1, ...`` (so identical layers lower to identical IR), scheduled with the
   registry's default schedules, lowered and built; identical kernels are built once
   (keyed first by a structural signature, then by the symbol, a hash of the lowered IR);
3. a static memory plan gives every intermediate value an offset in one arena,
   reusing memory whose value is dead (a kernel's output never overlaps its inputs);
   reshape-like nodes are aliases of their input's memory;
4. a small native function ``void run(ptr inputs, ptr outputs, ptr arena, ptr weights, ptr err)``
   (``backends/llvm/runner.py``, given each call's kernel symbol and buffer locations) calls every
   kernel in order with its buffer pointers; it is compiled and cached like the kernels, and
   loaded, as they are, once per process (``backends/loaded_objects.py``).  ``Executable.run`` checks the inputs and makes one ctypes call.  A kernel
   whose index check fails (a Gather's index out of range) writes the error slot ``err``;
   the runner then stops and ``run`` raises ``IndexOutOfRangeError`` (an ``ArgumentError``)
   naming the node.

``Executable.save(path)`` writes a zip (``meta.json``, ``kernels/<symbol>.o``,
``runner.o``, ``weights/<k>.npy``; no pickle); ``load_static(path)`` loads the objects into the
JIT without compiling anything.
"""
from __future__ import annotations

import ctypes
import functools
from contextlib import nullcontext
import io
import sys
import threading
import time
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Tuple

import numpy as np
from tqdm.auto import tqdm

from ...autoschedule import apply_best
from ...backends import build_workers, loaded_objects
from ...backends.aligned_memory import ALIGN, aligned_empty, aligned_size
from ...backends.build import build, build_many, cannot_run_here, optimized_llvm_ir
from ...backends.runtime import (KERNEL_ENTRY, clear_error_slot, data_pointer, index_error_text, new_error_slot,
                                 read_index_error)
from ...backends.llvm.runner import RUNNER_ENTRY, network_runner
from ...backends.timing import per_call_medians
from ...dsl.tensor import placeholder
from ...errors import ArgumentError, DamagedFileError, IndexOutOfRangeError, InternalError
from ...target import Target, compiling_for, host_target, resolve_target, saved_target
from ..ops.registry import schedule
from . import kernel_cache
from .archive import ArchiveReader, ArchiveWriter, MetaChecker
from .cuda_executable import CudaExecutable
from .export_levels import export_levels
from .saved_levels import save_levels
from .feed import check_static_feed
from .graph import Graph
from .limits import memory_limit_bytes
from .op_table import OPS, scalar_constants
from .memory_root import memory_root
from .passes import (concats_in_place, fuse_operators, materialize_output_copies, optimize, pack_weights,
                     slices_as_views)

FORMAT_VERSION = 3      # 2: every member checksummed (archive.py); 3: kernels and runner take an error slot (older files are refused)
# the graph ops whose kernels check indices read from data (an error names the node of this kind)
INDEX_CHECKING_OPS = ("gather", "gather_elements", "gather_nd", "scatter_elements", "scatter_nd", "nll_terms",
                      "nll_weights", "rotary_embedding")


def index_out_of_range(slot, inputs, where: str, node: str) -> IndexOutOfRangeError:
    """The error for the failed index check a network's kernel wrote in ``slot`` (cleared here): the
    kernel's ``inK`` named as the graph values ``inputs``, raised at ``where`` (``node 'x' (op)``)."""
    what, index, extent, wraps = read_index_error(slot)
    clear_error_slot(slot)
    for k, value in enumerate(inputs):
        what = what.replace(f"'in{k}'", f"'{value}'")
    return IndexOutOfRangeError(f"{where}: {index_error_text(what, index, extent, wraps)}.\n"
                                f"  fix: check the values fed to the network (e.g. token ids against the "
                                f"vocabulary size); ONNX leaves out-of-range indices undefined, and loopweave "
                                f"refuses them", index, extent, what, node)


# ---------------------------------------------------------------- storage locations
# a location is (space, index_or_offset): ("input", k), ("output", k), ("weight", byte offset),
# ("arena", byte offset)


@dataclass
class KernelCall:
    symbol: str
    name: str
    args: List[Tuple[str, int]]     # locations, in the kernel's parameter order (output last)
    ops: Tuple[str, ...] = ()       # the fused group: op types of its nodes, in order (for display)
    shape: Optional[Tuple[int, ...]] = None   # the kernel's output shape (for display)
    nodes: Tuple[str, ...] = ()     # the graph node names of the fused group, in order (for errors)
    inputs: Tuple[str, ...] = ()    # the value names behind the kernel's inputs in0, in1, ... (for errors)


def compile_graph(graph: Graph, tgt, progress: Optional[bool] = None, tuning_log=None, checks=None):
    """Compile a static Graph for target ``tgt`` (llvm or cuda) into an Executable / CudaExecutable.

    With ``tuning_log``, a kernel with a record for ``tgt`` in the log gets the best recorded
    schedule (``autoschedule.apply_best``); the others keep the op library's default schedule.
    ``checks`` is passed to every kernel's ``lw.build`` (``"bounds"``: check every
    data-dependent index)."""
    t0 = time.perf_counter()
    with as_the_cpu(tgt):
        plan = build_kernels(graph, tgt, progress, tuning_log=tuning_log, checks=checks)
    if tgt.kind == "cuda":
        inputs, outputs = plan.signature()
        exe = CudaExecutable(inputs, outputs, plan.calls, plan.modules, plan.arena_size, plan.weights, tgt)
    else:
        exe = plan.cpu_executable(tgt)
    exe.compile_seconds = time.perf_counter() - t0
    exe.source_graph = graph        # what export_library(levels=[target]) compiles again for another CPU
    exe.num_groups = len(plan.calls)
    exe.tuned_kernels = plan.tuned_kernels
    return exe


def as_the_cpu(tgt):
    """For a CPU target other than the host, ``compiling_for`` it: layout and schedule choices made from
    "the CPU" (vector width, registers, Winograd's limits) follow the CPU compiled for; else nothing."""
    return compiling_for(tgt) if tgt.kind == "llvm" and tgt.key() != host_target().key() else nullcontext()


@dataclass
class KernelPlan:
    """What every target's executable is made of: the optimised graph, its kernels (built
    modules by symbol) in call order, the packed weights and the arena size."""
    graph: Graph
    calls: List[KernelCall]
    modules: Dict[str, object]
    weights: np.ndarray
    weight_table: Dict[str, tuple]
    arena_size: int
    tuned_kernels: int = 0      # distinct kernels scheduled from a tuning record
    # per kernel symbol, a function giving its optimised LLVM IR (export links it position-independent)
    kernel_ir: Optional[Dict[str, Callable[[], str]]] = None

    def signature(self):
        """([(name, shape, dtype)] of the inputs, the same of the outputs)."""
        g = self.graph
        return ([(n, list(g.values[n].shape), g.values[n].dtype) for n in g.inputs],
                [(n, list(g.values[n].shape), g.values[n].dtype) for n in g.outputs])

    def cpu_executable(self, tgt) -> "Executable":
        """The CPU executable of this plan (its modules are CPU builds)."""
        inputs, outputs = self.signature()
        kernels = {sym: m.object_code for sym, m in self.modules.items()}
        return Executable(inputs=inputs, outputs=outputs, calls=self.calls, kernels=kernels,
                          arena_size=self.arena_size, weights=self.weights, weight_table=self.weight_table,
                          target=tgt, graph=self.graph, kernel_ir=self.kernel_ir)


def plan_kernel_groups(graph: Graph, target_kind: str, precision: str = "fp32", copy_outputs: bool = True):
    """The graph after the passes for ``target_kind`` and its fused groups: ``(graph, kernel groups in
    run order, {alias output: the value it views}, {concat part: (concat, byte offset)})``; the
    concats computed in place by their parts' kernels are not among the groups.  Shared by the
    compiler and the tuning tasks (which so never tune a copy the network does not run).
    ``copy_outputs=False`` leaves an output that is a view as a view (an executable that copies its
    outputs out of the arena, as the polymorphic one does, needs no kernel for it)."""
    g = optimize(graph, target_kind, precision)
    if copy_outputs:
        g = materialize_output_copies(g)
    groups = fuse_operators(g)
    kernel_groups = [grp for grp in groups if grp.kind != "alias"]
    alias_of = {grp.output: grp.nodes[0].inputs[0] for grp in groups if grp.kind == "alias"}
    kernel_groups, slice_of = concats_in_place(g, kernel_groups, alias_of, ALIGN)
    # the CPU's kernels read any element's address; the GPU's take 16-byte vectors of aligned arguments
    kernel_groups = slices_as_views(g, kernel_groups, alias_of, slice_of, 1 if target_kind == "llvm" else ALIGN)
    return g, kernel_groups, alias_of, slice_of


def build_kernels(graph: Graph, tgt, progress: Optional[bool], build_fn=None, tuning_log=None,
                  checks=None) -> KernelPlan:
    """Graph passes, fusion into kernels, one build per distinct kernel, weights and the memory plan.

    Each kernel is scheduled with its best record in ``tuning_log`` if it has one, else with the
    op library's schedules for ``tgt``, and built by ``build_fn(schedule, args, name)`` (default
    ``lw.build`` for ``tgt``; the CUDA network tests pass a CPU emulation of the GPU schedules)."""
    g, kernel_groups, alias_of, slice_of = plan_kernel_groups(graph, tgt.kind, tgt.precision)
    progress = sys.stderr.isatty() or len(kernel_groups) > 8 if progress is None else progress
    # a bar where someone watches (terminal, Jupyter); in a log, only the summary line below
    watched = sys.stderr.isatty() or "ipykernel" in sys.modules
    bar = tqdm(total=len(kernel_groups), desc="loopweave: compiling kernels", unit="kernel",
               disable=not (progress and watched), leave=False)
    start = time.perf_counter()
    built: Dict[str, object] = {}
    by_signature: Dict[str, object] = {}
    calls_params: List[Tuple[object, List[str], str]] = []
    reused = 0
    # kernel_cache: CPU builds of the op library's schedules (a tuned build is found by the object
    # cache instead, keyed by its lowered IR)
    # (not for a cross-compile: its export needs each kernel's LLVM IR, which a remembered kernel lacks)
    remembered = (tgt.kind == "llvm" and build_fn is None and tuning_log is None and checks is None
                  and tgt.runs_here())
    # the GPU's modules are made from the lowered function: a cached one skips scheduling and lowering
    lowered_cache = (tgt.kind == "cuda" and build_fn is None and tuning_log is None and checks is None)
    tuned = cached = 0
    jobs, job_signatures = [], []
    group_params = []
    kernel_ir: Dict[str, Callable[[], str]] = {}
    for grp in kernel_groups:
        signature, params = group_signature(g, grp)
        group_params.append((signature, params, grp.name))
        if signature in by_signature or signature in job_signatures:
            reused += 1
            bar.update()
            continue
        module = kernel_cache.lookup(signature, tgt) if remembered else None
        if module is not None:      # object code only: its IR, if export asks, comes from lowering the group again
            kernel_ir[module.symbol] = _group_ir_function(g, grp, params, tgt, module.symbol)
            cached += 1
        elif lowered_cache:
            func = kernel_cache.lookup_lowered(signature, tgt)
            module = None if func is None else build(func, (), tgt)
            cached += module is not None
        if module is None and build_fn is not None:
            module, from_record = _build_group(g, grp, params, tgt, build_fn, tuning_log, checks)
            tuned += from_record
        if module is not None:
            by_signature[signature] = module
            bar.update()
            continue
        if not jobs and (tgt.kind == "cuda" or tgt.runs_here()):
            build_workers.prestart()        # the first kernel to build: workers start while the rest are scheduled
        s, args, from_record = _group_schedule(g, grp, params, tgt, tuning_log)
        tuned += from_record
        jobs.append((s, args, kernel_name(grp)))
        job_signatures.append(signature)
    # the LLVM compile of each new kernel overlaps the lowering of the next (build_many)
    for signature, module in zip(job_signatures, build_many(jobs, tgt, checks, progress=bar.update)):
        by_signature[signature] = module
        kernel_ir[module.symbol] = functools.partial(module.get_source, "ll-opt")
        if remembered:
            kernel_cache.store(signature, tgt, module)
        if lowered_cache:
            kernel_cache.store_lowered(signature, tgt, module.lowered_function)
    for signature, params, name in group_params:
        module = by_signature[signature]
        built.setdefault(module.symbol, module)
        calls_params.append((module, params, name))
    bar.close()
    if progress and kernel_groups:
        compiled = len(kernel_groups) - reused - cached
        print(kernel_count_line(len(kernel_groups), compiled, cached, reused, time.perf_counter() - start),
              file=sys.stderr)
    weights, weight_offsets = pack_weights(g, {p for _, params, _ in calls_params for p in params})
    steps = [(params, grp.output) for (_, params, _), grp in zip(calls_params, kernel_groups)]
    locations, arena_size = _plan_memory(g, steps, alias_of, weight_offsets, slice_of)
    calls = [KernelCall(m.symbol, name, [locations[p] for p in params] + [locations[grp.output]],
                        ops=tuple(n.op_type for n in grp.nodes), shape=tuple(g.values[grp.output].shape),
                        nodes=tuple(n.name or n.op_type for n in grp.nodes), inputs=tuple(params))
             for (m, params, name), grp in zip(calls_params, kernel_groups)]
    has_ir = tgt.kind == "llvm" and all(sym in kernel_ir for sym in built)
    return KernelPlan(g, calls, built, weights, weight_offsets, arena_size, tuned, kernel_ir if has_ir else None)


def group_signature(g: Graph, grp) -> Tuple[str, List[str]]:
    """A structural key of the group's computation and its parameter value names (in order)."""
    params: List[str] = []
    index: Dict[str, str] = {}
    parts = []
    for node in grp.nodes:
        scalars = scalar_constants(g, node.op_type, node.inputs)
        args = []
        for pos, i in enumerate(node.inputs):
            if pos in scalars:
                args.append(f"s{scalars[pos]!r}")
                continue
            if i not in index:
                if i in grp.inputs:
                    index[i] = f"in{len(params)}"
                    params.append(i)
                else:
                    index[i] = f"t{len(index)}"
            v = g.values[i]
            args.append(f"{index[i]}:{v.dtype}{list(v.shape)}")
        index[node.outputs[0]] = f"t{len(index)}"
        attrs = sorted((k, repr(v)) for k, v in node.attrs.items())
        parts.append(f"{node.op_type}({','.join(args)};{attrs})->{index[node.outputs[0]]}")
    return "|".join(parts), params


def group_computation(g: Graph, grp, params: List[str]):
    """The compute DAG of a fused group: ``(placeholders in0, in1, ... for params, output tensor)``,
    built from the op table (so identical layers give structurally identical computations)."""
    tensors = {}
    placeholders = []
    for k, name in enumerate(params):
        v = g.values[name]
        t = placeholder(v.shape, name=f"in{k}", dtype=v.dtype)
        tensors[name] = t
        placeholders.append(t)
    for node in grp.nodes:
        scalars = scalar_constants(g, node.op_type, node.inputs)
        args = [scalars[pos] if pos in scalars else tensors[i] for pos, i in enumerate(node.inputs)]
        t = OPS[node.op_type].build(args, node.attrs)
        if list(_static(t)) != list(g.values[node.outputs[0]].shape):
            raise InternalError(f"kernel for {node.op_type} computed shape {_static(t)}, the graph says "
                                f"{g.values[node.outputs[0]].shape}")
        tensors[node.outputs[0]] = t
    return placeholders, tensors[grp.output]


def _group_schedule(g: Graph, grp, params: List[str], target, tuning_log=None):
    """(schedule, argument tensors, whether the schedule came from a tuning record) of a group."""
    placeholders, out = group_computation(g, grp, params)
    args = placeholders + [out]
    s = apply_best(tuning_log, args, target) if tuning_log is not None else None
    if s is None:
        return schedule([out], target), args, False
    return s, args, True


def _group_ir_function(g: Graph, grp, params: List[str], target, symbol: str) -> Callable[[], str]:
    """A function giving the optimised LLVM IR of the group's default-schedule kernel ``symbol`` (one the
    kernel cache remembered as object code), lowered again; an ``InternalError`` if that is not the
    same kernel (its symbol hashes its lowered IR and the target)."""
    def llvm_ir() -> str:
        with as_the_cpu(target):        # lowered as it was built (a kernel's IR is asked for later)
            s, args, _ = _group_schedule(g, grp, params, target)
            found, text = optimized_llvm_ir(s, args, target, kernel_name(grp))
        if found != symbol:
            raise InternalError(f"kernel {kernel_name(grp)!r} lowered again is {found}, not the cached {symbol}")
        return text
    return llvm_ir


def _build_group(g: Graph, grp, params: List[str], target, build_fn=None, tuning_log=None, checks=None):
    """The group's compiled kernel, and whether its schedule came from a tuning record."""
    s, args, from_record = _group_schedule(g, grp, params, target, tuning_log)
    name = kernel_name(grp)
    if build_fn is not None:
        return build_fn(s, args, name), from_record
    return build(s, args, target=target, name=name, checks=checks), from_record


def kernel_count_line(calls: int, compiled: int, cached: int, reused: int, seconds: float) -> str:
    """The compile's status line: how many kernel calls the network makes, and of its distinct kernels
    how many were compiled now and how many came from the disk cache (``reused``: calls of a kernel
    another call already has)."""
    return (f"loopweave: {calls} kernel calls: {compiled} kernels compiled, {cached} from the cache, {reused} "
            f"calls reuse one of them; {seconds:.1f}s")


def kernel_name(grp) -> str:
    """The group's name as an ASCII identifier (a symbol and a CUDA C function name: any other
    character of a model's node names becomes '_')."""
    return "".join(ch if ch.isascii() and ch.isalnum() else "_" for ch in grp.name)


def _static(t):
    return tuple(int(d.value) for d in t.shape)


def _plan_memory(g: Graph, steps: List[Tuple[List[str], str]], alias_of: Dict[str, str], weight_offsets,
                 slice_of: Optional[Dict[str, Tuple[str, int]]] = None):
    """Locations of every value; intermediates share one arena, reused by liveness.

    ``steps`` are the kernels in order as (input value names, output value name).  A view
    (``alias_of``) shares its source's memory; a part of a concat computed in place (``slice_of``)
    lives at its offset in the concat's, which is placed when its first part is computed.
    """
    slice_of = slice_of or {}

    def root(v: str) -> str:
        return memory_root(v, alias_of, slice_of)[0]

    locations: Dict[str, Tuple[str, int]] = {}
    for k, name in enumerate(g.inputs):
        locations[name] = ("input", k)
    for k, name in enumerate(g.outputs):
        locations[name] = ("output", k)
    for name, (off, _, _) in weight_offsets.items():
        locations[name] = ("weight", off)
    last_use: Dict[str, int] = {}
    for k, (params, _) in enumerate(steps):
        for p in params:
            last_use[root(p)] = k
    live: List[Tuple[int, int, str]] = []   # (offset, size, root value)
    arena_size = 0
    for k, (_, out) in enumerate(steps):
        r = root(out)
        if r not in locations:
            v = g.values[r]
            size = aligned_size(int(np.prod(v.shape, dtype=np.int64)) * np.dtype(v.dtype).itemsize)
            offset = _first_fit(live, size)
            live.append((offset, size, r))
            live.sort()
            locations[r] = ("arena", offset)
            arena_size = max(arena_size, offset + size)
        # free what dies here, after the output got its place (so it never overlaps its inputs)
        live = [blk for blk in live if last_use.get(blk[2], -1) > k]
    for v in g.values:
        r, offset = memory_root(v, alias_of, slice_of)
        if v not in locations and r in locations:
            space, where = locations[r]
            if offset and space != "arena":
                raise InternalError(f"{v!r} is placed {offset} bytes into {r!r}, which is not in the arena")
            locations[v] = (space, where + offset)
    return locations, arena_size


def _first_fit(live, size: int) -> int:
    cursor = 0
    for off, sz, _ in live:
        if off - cursor >= size:
            return cursor
        cursor = max(cursor, off + sz)
    return cursor


def _checked_call(fn, ptrs, sizes, err, name: str) -> None:
    """One call of a kernel entry outside ``run`` (``profile``); its index check is a compiler bug here."""
    fn(ctypes.addressof(ptrs), ctypes.addressof(sizes), ctypes.addressof(err))
    if err[0]:
        clear_error_slot(err)
        raise InternalError(f"kernel {name} failed an index check in profile() after run() passed")


class Executable:
    """A compiled network: ``run({name: array}) -> [outputs]``, ``save(path)``; one native call per run."""

    def __init__(self, inputs, outputs, calls: List[KernelCall], kernels: Dict[str, bytes], arena_size: int,
                 weights: np.ndarray, weight_table, target, graph: Optional[Graph] = None,
                 runner_object: Optional[bytes] = None, runner_symbol: Optional[str] = None,
                 kernel_ir: Optional[Dict[str, Callable[[], str]]] = None):
        self.inputs = [(n, tuple(s), d) for n, s, d in inputs]
        self.outputs = [(n, tuple(s), d) for n, s, d in outputs]
        self.calls, self.kernels = calls, kernels
        self.arena_size, self.weights, self.weight_table = arena_size, weights, weight_table
        self.target, self.graph = target, graph
        self.compile_seconds = 0.0
        self.num_groups = len(calls)
        self.tuned_kernels = 0
        self.last_profile: Optional[List[Tuple[str, float]]] = None   # set by profile(); shown by _repr_html_
        # compiled for another CPU (a cross-compile): nothing is loaded, run() refuses.  export_library
        # links the kernels' LLVM IR (``kernel_ir``: symbol -> a function giving it; None for a loaded
        # .lwx, which holds object code only) into one position-independent object
        self.runs_here = target.runs_here()
        self.kernel_ir = kernel_ir
        self._kernel_ir_text: Optional[Dict[str, str]] = None
        if not self.runs_here and kernel_ir is None:
            raise InternalError("a cross-compiled executable needs its kernels' LLVM IR")
        addresses = ({sym: loaded_objects.load(sym, obj) for sym, obj in kernels.items()} if self.runs_here
                     else {})
        self._addresses = addresses
        runner = network_runner([(c.symbol, c.args) for c in calls], kernels, target, runner_symbol, runner_object)
        self.runner_symbol, self.runner_object, self.runner_ir = runner.symbol, runner.object_code, runner.llvm_ir
        self._entry = RUNNER_ENTRY(loaded_objects.load(runner.symbol, runner.object_code, addresses)
                                   if self.runs_here else 0)
        self._arena = aligned_empty(arena_size)
        self._in_ptrs = (ctypes.c_void_p * max(1, len(self.inputs)))()
        self._out_ptrs = (ctypes.c_void_p * max(1, len(self.outputs)))()
        self._lock = threading.Lock()
        self._err = new_error_slot()
        # the runner's fixed arguments, read once: each ``ndarray.ctypes`` costs ~0.75 us, a fifth of
        # the Python side of a run (a 7x7 depthwise layer's kernel takes 14 us)
        self._fixed_args = (ctypes.addressof(self._in_ptrs), ctypes.addressof(self._out_ptrs), self._arena.ctypes.data,
                            self.weights.ctypes.data, ctypes.addressof(self._err))
        # what a feed that needs no conversion looks like: (name, shape, numpy dtype) per input
        self._plain_inputs = tuple((n, tuple(shape), np.dtype(d)) for n, shape, d in self.inputs)
        self._output_types = tuple((tuple(shape), np.dtype(d)) for _, shape, d in self.outputs)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d}{list(s)}" for n, s, d in self.inputs)
        outs = ", ".join(f"{n}: {d}{list(s)}" for n, s, d in self.outputs)
        return (f"<loopweave Executable ({ins}) -> ({outs}): {len(self.calls)} kernel calls, "
                f"{len(self.kernels)} distinct kernels"
                f"{f' ({self.tuned_kernels} from tuning records)' if self.tuned_kernels else ''}, "
                f"arena {self.arena_size / 1e6:.1f} MB, "
                f"weights {self.weights.nbytes / 1e6:.1f} MB>")

    def _repr_html_(self) -> str:
        """A compact table of the kernel calls: fused group (its ops), output shape, and the
        median time per kernel of the last ``profile(...)`` run (with its share of the total)."""
        import html
        esc = html.escape
        prof = self.last_profile if self.last_profile and len(self.last_profile) == len(self.calls) else None
        total = sum(t for _, t in prof) if prof else 0.0
        longest = max((t for _, t in prof), default=0.0) if prof else 0.0
        head = "<tr><th>#</th><th>kernel</th><th>fused ops</th><th>output shape</th><th>symbol</th>"
        if prof:
            head += "<th>time (ms)</th><th>share</th>"
        rows = []
        for k, c in enumerate(self.calls):
            ops = " + ".join(c.ops) if c.ops else c.name
            shape = "" if c.shape is None else str(list(c.shape))
            row = (f"<tr><td>{k}</td><td><b>{esc(c.name)}</b></td><td>{esc(ops)}</td><td>{esc(shape)}</td>"
                   f"<td><code style='font-size:smaller'>{esc(c.symbol)}</code></td>")
            if prof:
                t = prof[k][1]
                share = t / total if total > 0 else 0.0
                bar = max(1, round(100 * t / longest)) if longest > 0 else 1    # px, the slowest kernel = 100
                row += (f"<td style='text-align:right'>{t * 1e3:.3f}</td><td style='white-space:nowrap'>"
                        f"<span style='display:inline-block;background:#1f6feb;height:0.8em;width:{bar}px'></span>"
                        f" {share:.1%}</td>")
            rows.append(row + "</tr>")
        if prof:
            rows.append(f"<tr><td></td><td><b>total</b></td><td colspan='3'>sum of {len(prof)} kernels, "
                        f"called one by one</td><td style='text-align:right'><b>{total * 1e3:.3f}</b></td>"
                        f"<td></td></tr>")
        ins = ", ".join(f"{n}: {d}{list(s)}" for n, s, d in self.inputs)
        outs = ", ".join(f"{n}: {d}{list(s)}" for n, s, d in self.outputs)
        note = ("time per kernel from the last <code>profile(feed)</code>" if prof else
                "run <code>profile(feed)</code> to add the time per kernel")
        return (f"<div><b>Executable</b> ({esc(ins)}) &rarr; ({esc(outs)}): {len(self.calls)} kernel calls, "
                f"{len(self.kernels)} distinct kernels, arena {self.arena_size / 1e6:.1f} MB, weights "
                f"{self.weights.nbytes / 1e6:.1f} MB; {note}"
                f"<div style='max-height:420px;overflow:auto'><table>{head}</tr>{''.join(rows)}</table></div></div>")

    # ------------------------------------------------------------ running
    def _check_feed(self, feed) -> List[np.ndarray]:
        if not self.runs_here:
            raise cannot_run_here(self.target, "this network")
        return check_static_feed(self.inputs, feed)

    def _plain_feed(self, feed) -> Optional[List[np.ndarray]]:
        """``feed``'s arrays in input order when it is exactly what the kernels take (a dict of the
        input names, C-contiguous arrays of the right shapes and dtypes), else None (``_check_feed``
        then checks it, converts it or names what is wrong).  The full check took a third of the
        Python side of a run (4.1 us on a one-node model against onnxruntime's 3.4)."""
        if type(feed) is not dict or len(feed) != len(self._plain_inputs) or not self.runs_here:
            return None
        arrays = []
        for name, shape, dtype in self._plain_inputs:
            a = feed.get(name)
            if type(a) is not np.ndarray or a.shape != shape or a.dtype != dtype or not a.flags.c_contiguous:
                return None
            arrays.append(a)
        return arrays

    def run(self, feed) -> List[np.ndarray]:
        """Run the network on ``feed`` ({input name: array}); returns the outputs in graph order."""
        arrays = self._plain_feed(feed)
        if arrays is None:
            arrays = self._check_feed(feed)
        outs = [np.empty(shape, dtype) for shape, dtype in self._output_types]
        with self._lock:
            for k, a in enumerate(arrays):
                self._in_ptrs[k] = data_pointer(a)
            for k, o in enumerate(outs):
                self._out_ptrs[k] = data_pointer(o)
            self._entry(*self._fixed_args)
            if self._err[0]:
                self._raise_index_error(self.calls[self._err[3]])
        return outs

    def _raise_index_error(self, call: KernelCall):
        """ArgumentError naming the node whose index check failed (the kernel wrote ``self._err``)."""
        suspects = [n for n, op in zip(call.nodes, call.ops) if op in INDEX_CHECKING_OPS] or list(call.nodes)
        node = (f"node '{suspects[0]}'" if len(suspects) == 1 else
                f"one of the nodes {', '.join(repr(n) for n in suspects)}") if suspects else f"kernel '{call.name}'"
        raise index_out_of_range(self._err, call.inputs, f"{node} ({' + '.join(call.ops) or call.name})",
                                 suspects[0] if len(suspects) == 1 else "")

    __call__ = run

    def profile(self, feed, repeat: int = 10, in_order: bool = False, clock=None) -> List[Tuple[str, float]]:
        """Median seconds of each kernel call, run one by one from Python (for finding hot spots):
        each call ``repeat`` times in a row, or with ``in_order`` the calls in run order ``repeat``
        times, each once per pass, so each reads what a run leaves in the caches (a network's weights
        come from memory; ``backends.timing.per_call_medians``, whose ``clock`` times one call)."""
        arrays = self._check_feed(feed)
        outs = [np.empty(shape, dtype) for _, shape, dtype in self.outputs]
        self.run(feed)
        bases = {"input": [a.ctypes.data for a in arrays], "output": [o.ctypes.data for o in outs]}
        sizes = (ctypes.c_int64 * 1)()
        err = new_error_slot()
        runs = []
        for call in self.calls:
            ptrs = (ctypes.c_void_p * max(1, len(call.args)))()
            for j, (space, where) in enumerate(call.args):
                if space in bases:
                    ptrs[j] = bases[space][where]
                elif space == "arena":
                    ptrs[j] = self._arena.ctypes.data + where
                else:
                    ptrs[j] = self.weights.ctypes.data + where
            runs.append((call.name, functools.partial(_checked_call, KERNEL_ENTRY(self._addresses[call.symbol]),
                                                      ptrs, sizes, err, call.name)))
        result = per_call_medians(runs, repeat, in_order, clock=clock)
        self.last_profile = result
        return result

    # ------------------------------------------------------------ save / load / export
    def kernels_llvm_ir(self) -> Optional[Dict[str, str]]:
        """The optimised LLVM IR of every kernel (symbol -> text), or None when this executable has only
        their object code (loaded from a .lwx).  Kernels the kernel cache supplied are lowered again."""
        if self._kernel_ir_text is None and self.kernel_ir is not None:
            self._kernel_ir_text = {sym: get() for sym, get in sorted(self.kernel_ir.items())}
        return self._kernel_ir_text

    def export_library(self, path, prefix: str = "lw_", params: str = "embed", cc: Optional[str] = None,
                       levels=()):
        """Write this network as a shared library ``path`` with a C API, and its header beside it
        (``model.so`` -> ``model.h``); needs a C compiler (``cc``, ``$CC``).  See ``export.py``.

        Compiled for another CPU (a cross-compile), it writes ``model.o`` (every kernel, the runner, the
        pool and the weights in one position-independent object for that CPU) with ``model.h`` and the
        API's C source ``model.c``; or, given a C compiler for that CPU (``cc="aarch64-linux-gnu-gcc"``),
        the shared library.

        ``levels``: more x86-64 CPU levels in the same library, as targets (``"llvm -mcpu=x86-64-v3"``,
        compiled from this network's graph) or executables of the same network; the library runs the
        first level the CPU has, most capable first (``export_levels.py``)."""
        if levels:
            if params != "embed":
                raise ArgumentError("export_library: a library of several levels embeds its weights (params='embed')")
            builds = [self] + [self._build_for(level) for level in levels]
            return export_levels(builds, path, prefix=prefix, cc=cc)
        from .export import export_library
        return export_library(self, path, prefix=prefix, params=params, cc=cc)

    def _build_for(self, level) -> "Executable":
        """``level`` itself when it is an executable, else this network compiled for that target."""
        if not isinstance(level, (str, Target)):
            return level
        graph = getattr(self, "source_graph", None)
        if graph is None:
            raise ArgumentError(f"export_library: this executable was loaded from a file, without its graph, so it "
                                f"cannot be compiled for {level!r}; compile the network for it (lw.compile(net, "
                                f"target={str(level)!r})) and pass that executable in levels=")
        return compile_graph(graph, resolve_target(level), progress=False)

    def save(self, path, levels=()) -> None:
        """Write a zip: meta.json (with the sha256 of every other member), meta.sha256, kernels/<symbol>.o,
        runner.o, weights/<k>.npy (no pickle); see ``archive.py``.  ``levels``: more CPU levels of this
        network in the one file (targets compiled from its graph, or executables), ``lw.load`` taking
        the first the CPU runs (``saved_levels.py``)."""
        if levels:
            builds = [self] + [self._build_for(level) for level in levels]
            for build in (b for b in builds if not b.runs_here):
                raise ArgumentError(f"save: a level in a .lwx must run on this machine (its objects are JIT code "
                                    f"loaded here); cpu {build.target.cpu!r} does not: export_library(levels=...) "
                                    f"writes a library for CPUs this machine cannot run")
            return save_levels(builds, path)
        if not self.runs_here:
            raise ArgumentError(f"save writes a .lwx to load and run on this machine; this network was compiled for "
                                f"{self.target.triple or self.target.arch} (cpu {self.target.cpu}): write it with "
                                f"export_library(...) instead")
        weights = []
        meta = {
            "format": "loopweave-executable", "version": FORMAT_VERSION,
            "target": {"kind": self.target.kind, "cpu": self.target.cpu, "features": self.target.features},
            "inputs": [[n, list(s), d] for n, s, d in self.inputs],
            "outputs": [[n, list(s), d] for n, s, d in self.outputs],
            "calls": [{"symbol": c.symbol, "name": c.name, "args": [list(a) for a in c.args], "ops": list(c.ops),
                       "shape": None if c.shape is None else list(c.shape), "nodes": list(c.nodes),
                       "inputs": list(c.inputs)} for c in self.calls],
            "kernels": sorted(self.kernels), "runner": self.runner_symbol, "arena_size": self.arena_size,
            "weights_size": int(self.weights.nbytes), "weights": weights,
        }
        with ArchiveWriter(path) as z:
            for k, (name, (off, shape, dtype)) in enumerate(sorted(self.weight_table.items(), key=lambda x: x[1][0])):
                nbytes = int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize
                arr = self.weights[off:off + nbytes].view(dtype).reshape(shape)
                buf = io.BytesIO()
                np.save(buf, arr, allow_pickle=False)
                z.add(f"weights/{k}.npy", buf.getvalue())
                weights.append({"name": name, "file": f"weights/{k}.npy", "offset": off})
            for sym, obj in self.kernels.items():
                z.add(f"kernels/{sym}.o", obj)
            z.add("runner.o", self.runner_object)
            z.finish(meta)


def load_static(path, where: str = "") -> "Executable":
    """Load an Executable written by ``Executable.save``; nothing is compiled."""
    with ArchiveReader(path, where) as reader:
        return load_static_from(reader)


def load_static_from(reader: ArchiveReader) -> "Executable":
    """The Executable in an opened archive: every member is verified before numpy or LLVM sees it,
    and meta.json is checked key by key (a bad one is a DamagedFileError naming it)."""
    meta, where, check = reader.meta, reader.where, MetaChecker(reader.where)
    if meta.get("format") != "loopweave-executable" or meta.get("version") != FORMAT_VERSION:
        raise ArgumentError(f"{where}: unsupported format {meta.get('format')!r} version "
                            f"{meta.get('version')!r} (this loopweave reads version {FORMAT_VERSION})")
    target = runnable_saved_target(check, meta, where)
    inputs = check.signature(check.get(meta, "inputs", list), "inputs")
    outputs = check.signature(check.get(meta, "outputs", list), "outputs")
    for name, _, dtype in inputs + outputs:
        try:
            np.dtype(dtype)
        except TypeError:
            check.fail(f"gives {name!r} the unknown dtype {dtype!r:.40}")
    arena_size, weights_size = check.get(meta, "arena_size", int), check.get(meta, "weights_size", int)
    if arena_size + weights_size > memory_limit_bytes():
        check.fail(f"asks for {arena_size + weights_size} bytes of memory, more than the limit "
                   f"{memory_limit_bytes()}")
    kernel_symbols = check.get(meta, "kernels", list)
    runner_symbol = check.get(meta, "runner", str)
    if not all(isinstance(sym, str) for sym in kernel_symbols):
        check.fail("has a kernel symbol that is not a string")
    try:
        calls = [KernelCall(c["symbol"], c["name"], [tuple(a) for a in c["args"]], ops=tuple(c.get("ops", ())),
                            shape=None if c.get("shape") is None else tuple(c["shape"]),
                            nodes=tuple(str(n) for n in c.get("nodes", ())),
                            inputs=tuple(str(n) for n in c.get("inputs", ())))
                 for c in check.get(meta, "calls", list)]
    except (KeyError, TypeError, ValueError, AttributeError):
        check.fail("has a malformed 'calls' table")
    if any(call.symbol not in kernel_symbols for call in calls):
        check.fail("calls a kernel that it does not contain")
    blob = aligned_empty(weights_size)
    table = {}
    for w in check.get(meta, "weights", list):
        member, off = check.get(w, "file", str, "weights."), check.get(w, "offset", int, "weights.")
        data = reader.read(member)
        try:
            arr = np.load(io.BytesIO(data), allow_pickle=False)
        except (ValueError, OSError, EOFError, TypeError) as exc:
            raise DamagedFileError(f"{where} is damaged: member {member!r} is not a numpy array ({exc})",
                                   member) from None
        if off % ALIGN or off + arr.nbytes > weights_size:
            check.fail(f"places {member!r} ({arr.nbytes} bytes) at offset {off}, outside the weights "
                       f"({weights_size} bytes)")
        blob[off:off + arr.nbytes] = np.ascontiguousarray(arr).reshape(-1).view(np.uint8)
        table[check.get(w, "name", str, "weights.")] = (off, list(arr.shape), str(arr.dtype))
    kernels = {sym: reader.read(f"kernels/{sym}.o") for sym in kernel_symbols}
    runner = reader.read("runner.o")
    return Executable(inputs, outputs, calls, kernels, arena_size, blob, table, target,
                      runner_object=runner, runner_symbol=runner_symbol)


def runnable_saved_target(check: MetaChecker, meta: dict, where: str) -> Target:
    """The target an archive's code was compiled for, where this CPU runs it (the same CPU, or a level
    whose features this CPU has: an x86-64-v3 file on an AVX-512 machine); else an ``ArgumentError``."""
    saved = check.get(meta, "target", dict)
    target = saved_target(check.get(saved, "cpu", str, "target."), check.get(saved, "features", str, "target."))
    if not target.runs_here():
        host = resolve_target("llvm")
        missing = sorted(target.enabled_features() - host.enabled_features())
        raise ArgumentError(f"{where} was compiled for cpu {target.cpu!r}, whose features this machine ({host.cpu!r}) "
                            f"lacks ({', '.join(missing[:8]) or 'other CPU features'}); compile the model again here, "
                            f"or save it with levels= for CPUs like this one")
    return target
