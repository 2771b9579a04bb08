"""``build(schedule, args, target)``: lower, generate code, compile (cached), load."""
from __future__ import annotations

import hashlib
from typing import Sequence

from llvmlite import binding as llvm

from ..dsl.schedule import Schedule
from ..dsl.visitor import post_order_visit
from ..errors import BuildError
from ..lowering.ir import PrimFunc
from ..lowering.lower import check_checks_argument, lower
from ..target import resolve_target
from .cuda.build import build_cuda
from .llvm import jit
from .llvm.codegen import CodeGen
from .runtime import Module, ParamSpec, _shape_spec

_loaded = {}


def build(schedule_or_func, args: Sequence = (), target="llvm", name: str = "main", checks=None) -> Module:
    """Compile a schedule (with its argument tensors) or a lowered PrimFunc into a callable.

    ``checks="bounds"`` makes every load whose index depends on loaded data check that index
    at run time (a bad one raises ``ArgumentError`` naming the tensor, the dimension and the
    index); the default ``None`` keeps only the checks the computation states (the op
    library's gathers and scatters).  A lowered PrimFunc already made its choice."""
    check_checks_argument(checks, BuildError)
    tgt = resolve_target(target)
    if isinstance(schedule_or_func, PrimFunc):
        func = schedule_or_func
    elif isinstance(schedule_or_func, Schedule):
        func = lower(schedule_or_func, args, name=name, target=tgt if tgt.kind == "cuda" else None, checks=checks)
    else:
        raise BuildError(f"build takes a schedule or a lowered function, got {type(schedule_or_func).__name__}")
    if tgt.kind == "cuda":
        return build_cuda(func, tgt, _written_buffers(func))
    if _has_kernels(func):
        raise BuildError(f"'{func.name}' was lowered for target 'cuda' (it launches GPU kernels); "
                         f"build it with target='cuda'")
    bound = _thread_bound_loops(func)
    if bound:
        raise BuildError(f"loops {', '.join(bound)} are bound to GPU thread axes (bind), which target "
                         f"'{tgt.kind}' cannot run; build for target='cuda' or use parallel() instead")
    return build_llvm(func, tgt)


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
    lowered = func.structural_key()
    digest = hashlib.sha256((lowered + target.key()).encode()).hexdigest()[:16]
    symbol = f"lw_{func.name}_{digest}"
    generated = {}

    def llvm_ir() -> str:
        if "ir" not in generated:
            generated["ir"] = CodeGen(func, target, symbol).generate()
        return generated["ir"]

    if symbol in _loaded:
        address, obj = _loaded[symbol]
    else:
        obj = jit.cached_object(symbol, target)
        if obj is None:
            obj, generated["opt"] = jit.compile_ir(llvm_ir(), target)
            jit.store_object(symbol, target, obj)
        address = jit.load_object(obj, symbol)
        _loaded[symbol] = (address, obj)
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
    module = Module(func.name, address, params, size_names, sources, target)
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
