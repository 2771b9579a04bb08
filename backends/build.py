"""``build(schedule, args, target)``: lower, generate code, compile (cached), load."""
from __future__ import annotations

import hashlib
from concurrent.futures import ThreadPoolExecutor
from typing import List, Sequence

from llvmlite import binding as llvm

from ..dsl.schedule import Schedule
from ..dsl.visitor import post_order_visit
from ..errors import BuildError
from ..lowering.ir import PrimFunc
from ..lowering.lower import check_checks_argument, lower
from ..target import resolve_target
from . import build_workers, loaded_objects
from .cuda.build import build_cuda, cuda_arch
from .llvm import jit
from .llvm.codegen import CodeGen
from .runtime import Module, ParamSpec, _shape_spec


def build(schedule_or_func, args: Sequence = (), target="llvm", name: str = "main", checks=None) -> Module:
    """Compile a schedule (with its argument tensors) or a lowered PrimFunc into a callable.

    ``checks="bounds"`` makes every load whose index depends on loaded data check that index
    at run time (a bad one raises ``ArgumentError`` naming the tensor, the dimension and the
    index); the default ``None`` keeps only the checks the computation states (the op
    library's gathers and scatters).  A lowered PrimFunc already made its choice."""
    check_checks_argument(checks, BuildError)
    tgt = resolve_target(target)
    if tgt.kind != "cuda":
        return build_llvm(_lowered_for_cpu(schedule_or_func, args, tgt, name, checks), tgt)
    if isinstance(schedule_or_func, PrimFunc):
        func = schedule_or_func
    elif isinstance(schedule_or_func, Schedule):
        func = lower(schedule_or_func, args, name=name, target=tgt, checks=checks)
    else:
        raise BuildError(f"build takes a schedule or a lowered function, got {type(schedule_or_func).__name__}")
    return build_cuda(func, tgt, _written_buffers(func))


def _lowered_for_cpu(schedule_or_func, args, tgt, name, checks) -> PrimFunc:
    """The schedule lowered for the CPU (or a given PrimFunc), refused if it holds GPU code."""
    if isinstance(schedule_or_func, PrimFunc):
        func = schedule_or_func
    elif isinstance(schedule_or_func, Schedule):
        func = lower(schedule_or_func, args, name=name, checks=checks)
    else:
        raise BuildError(f"build takes a schedule or a lowered function, got {type(schedule_or_func).__name__}")
    if _has_kernels(func):
        raise BuildError(f"'{func.name}' was lowered for target 'cuda' (it launches GPU kernels); "
                         f"build it with target='cuda'")
    bound = _thread_bound_loops(func)
    if bound:
        raise BuildError(f"loops {', '.join(bound)} are bound to GPU thread axes (bind), which target "
                         f"'{tgt.kind}' cannot run; build for target='cuda' or use parallel() instead")
    return func


def _thread_bound_loops(func: PrimFunc) -> list:
    found = []
    post_order_visit(func.body, lambda n: found.append(n.var.name) if type(n).__name__ == "For"
                     and n.kind == "thread" else None)
    return found


def _has_kernels(func: PrimFunc) -> bool:
    found = []
    post_order_visit(func.body, lambda n: found.append(1) if type(n).__name__ == "KernelLaunch" else None)
    return bool(found)


def build_llvm(func: PrimFunc, target) -> Module:
    """Compile ``func`` for the CPU; a disk-cache hit skips LLVM IR generation entirely.

    The cache key is the printed lowered IR (structurally unique) plus the target;
    the LLVM IR is generated only on a miss, or when the user asks for it.
    """
    job = _LlvmJob(func, target)
    job.start(lambda ir: _Done(jit.compile_ir(ir, target)))
    return job.finish()


class _Done:
    """A finished result with the interface of a Future."""

    def __init__(self, value):
        self.value = value

    def result(self):
        return self.value


class _LlvmJob:
    """One CPU build in two halves: ``start`` (symbol, disk cache, LLVM IR text: Python work,
    then the LLVM compile handed to ``submit``) and ``finish`` (load, make the Module)."""

    def __init__(self, func: PrimFunc, target, symbol: str = None, obj: bytes = None):
        """``symbol`` and ``obj``: a build finished elsewhere (a ``build_workers`` process)."""
        self.func, self.target = func, target
        if symbol is None:
            digest = hashlib.sha256((func.structural_key() + target.key()).encode()).hexdigest()[:16]
            symbol = f"lw_{func.name}_{digest}"
        self.symbol = symbol
        self.generated = {}
        self.obj = obj
        self.pending = None

    def llvm_ir(self) -> str:
        if "ir" not in self.generated:
            self.generated["ir"] = CodeGen(self.func, self.target, self.symbol).generate()
        return self.generated["ir"]

    def start(self, submit) -> None:
        if loaded_objects.loaded_object(self.symbol) is not None:
            return
        self.obj = jit.cached_object(self.symbol, self.target)
        if self.obj is None:
            self.pending = submit(self.llvm_ir())

    def object_code(self) -> bytes:
        """The object, from the disk cache or the compile ``start`` handed off (then cached)."""
        if self.obj is None:
            self.obj, self.generated["opt"] = self.pending.result()
            jit.store_object(self.symbol, self.target, self.obj)
        return self.obj

    def finish(self) -> Module:
        func, target, symbol, generated = self.func, self.target, self.symbol, self.generated
        if not target.runs_here():      # cross-compiled: object code for export_library, never loaded
            return _module(func, target, symbol, 0, self.object_code(), generated, self.llvm_ir,
                           CrossCompiledModule)
        obj = loaded_objects.loaded_object(symbol) or self.object_code()
        address = loaded_objects.load(symbol, obj)
        return _module(func, target, symbol, address, obj, generated, self.llvm_ir)


def optimized_llvm_ir(schedule, args, target, name: str):
    """``(symbol, optimised LLVM IR)`` of the CPU build ``build(schedule, args, target, name)`` would make
    (the same symbol), generated without compiling or loading anything: ``export_library`` links it
    position-independent when the process has only the kernel's object code (a kernel cache hit)."""
    tgt = resolve_target(target)
    job = _LlvmJob(_lowered_for_cpu(schedule, args, tgt, name, None), tgt)
    return job.symbol, _optimized_ir(job.llvm_ir(), tgt)


def build_many(jobs: Sequence, target="llvm", checks=None, progress=None) -> List[Module]:
    """``[build(s, args, target, name) for s, args, name in jobs]``, using the machine's cores: worker
    processes lower and compile some kernels (``build_workers``) while this process lowers the
    others, each one's LLVM compile (native code, no GIL) on a background thread while the next is
    lowered.  ``progress()`` is called once per kernel."""
    check_checks_argument(checks, BuildError)
    tgt = resolve_target(target)
    if tgt.kind != "llvm":
        return _build_many_cuda(jobs, tgt, checks, progress)
    with ThreadPoolExecutor(max_workers=1, thread_name_prefix="loopweave-llvm") as pool:
        compiling = []

        def build_here(index: int) -> _LlvmJob:
            # at most one LLVM compile waits behind the running one: a longer backlog kept this
            # process lowering jobs a worker would have finished sooner, then waiting for LLVM
            while len(compiling) >= 2:
                compiling.pop(0).result()
            s, args, name = jobs[index]
            job = _LlvmJob(_lowered_for_cpu(s, args, tgt, name, checks), tgt)
            job.start(lambda ir: pool.submit(jit.compile_ir, ir, tgt))
            if job.pending is not None:
                compiling.append(job.pending)
            return job

        workers = build_workers.worker_count(len(jobs)) if tgt.runs_here() else 0
        started = build_workers.build_spread(
            jobs, tgt, checks, build_here, lambda func, symbol, obj: _LlvmJob(func, tgt, symbol, obj),
            progress, workers)
        return [job.finish() for job in started]


def _build_many_cuda(jobs: Sequence, tgt, checks, progress) -> List[Module]:
    """GPU builds, the lowering (most of a network's compile) spread over worker processes like
    the CPU's; a worker also compiles the kernel's PTX into the disk cache, which this
    process's build then finds."""
    def build_here(index: int):
        s, args, name = jobs[index]
        return build(s, args, tgt, name, checks)

    workers = build_workers.worker_count(len(jobs))
    return build_workers.build_spread(jobs, tgt, checks, build_here, lambda func, _s, _o: build(func, (), tgt),
                                      progress, workers, extra={"cuda_arch": cuda_arch(tgt)} if workers else None)


def cannot_run_here(target, what: str) -> BuildError:
    """The error of running code compiled for a CPU this machine cannot run."""
    from ..target import host_target
    host = host_target()
    machine = target.triple or host.arch
    return BuildError(f"{what} was compiled for {machine} (cpu {target.cpu}), which this machine ({host.arch}, "
                      f"cpu {host.cpu}) cannot run; export it with export_library(...) and run it there, or "
                      f"compile for target='llvm' to run here")


class CrossCompiledModule(Module):
    """A kernel compiled for another CPU (``lw.build(..., target="llvm -mtriple=... -mcpu=...")``): its
    code is for ``export_library``; calling or timing it raises ``BuildError``."""

    def __call__(self, *args) -> None:
        raise cannot_run_here(self.target, f"kernel {self.name!r}")

    def time(self, *args, **kwargs) -> float:
        raise cannot_run_here(self.target, f"kernel {self.name!r}")


def _module(func: PrimFunc, target, symbol: str, address: int, obj: bytes, generated: dict, llvm_ir,
            cls=Module) -> Module:
    outputs = {id(b) for b in _written_buffers(func)}
    size_names = [v.name for v in func.size_vars]
    if len(set(size_names)) != len(size_names):
        raise BuildError(f"two different size variables share a name in {size_names}; give each lw.var a unique name")
    params = [ParamSpec(b.name, b.dtype, _shape_spec(b.shape, {}), id(b) in outputs) for b in func.params]
    sources = {
        "lowered": lambda: str(func),
        "ll": llvm_ir,
        "ll-opt": lambda: generated.get("opt") or _optimized_ir(llvm_ir(), target),
        "asm": lambda: jit.assembly(llvm_ir(), target),
    }
    module = cls(func.name, address, params, size_names, sources, target)
    module.object_code = obj
    module.symbol = symbol
    return module


def _optimized_ir(llvm_ir: str, target) -> str:
    m = llvm.parse_assembly(llvm_ir)
    jit.optimize(m, target)
    return str(m)


def _written_buffers(func: PrimFunc):
    found = []
    post_order_visit(func.body, lambda n: found.append(n.buffer) if type(n).__name__ == "BufferStore" else None)
    return found
