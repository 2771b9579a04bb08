"""A static network's runner: one native function that calls its kernels in order.

``void symbol(ptr inputs, ptr outputs, ptr arena, ptr weights, ptr err)`` passes each kernel
(loopweave's kernel ABI, ``backends/runtime.py``) its buffers: a pointer from the ``inputs`` or
``outputs`` table, or a byte offset into the ``arena`` or the ``weights``.  After each call one load
tests the error slot: a kernel whose index check failed wrote it, and the runner then records the
call's position in ``err[3]`` and returns.

The emitter knows calls, not graphs: a call is ``(kernel symbol, [(space, index or byte offset)])``
with space ``"input"``, ``"output"``, ``"arena"`` or ``"weight"``, in the kernel's parameter order.
The runner's symbol hashes its IR, the kernels it calls and the target, so its object code is
compiled once and then found in the object cache.
"""
from __future__ import annotations

import ctypes
import hashlib
from dataclasses import dataclass
from typing import Dict, Iterable, Optional, Sequence, Tuple

from llvmlite import ir

from ...target import Target
from . import jit

Call = Tuple[str, Sequence[Tuple[str, int]]]
RUNNER_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                ctypes.c_void_p)
_PROVISIONAL = "lw_run"


@dataclass
class NetworkRunner:
    """A runner's symbol, LLVM IR and object code (the IR, for ``export_library``, links it anew)."""
    symbol: str
    llvm_ir: str
    object_code: bytes


def network_runner(calls: Sequence[Call], kernel_symbols: Iterable[str], target: Target,
                   symbol: Optional[str] = None, object_code: Optional[bytes] = None) -> NetworkRunner:
    """The runner of ``calls``: compiled (or found in the object cache) under the symbol its content
    names, or, given ``symbol`` and ``object_code`` (a saved executable's), that one with its IR.

    The IR is built once under a provisional name and renamed: an LSTM unrolled over 1000 steps, 2004
    calls, spent about a second on each build of it."""
    text = runner_ir(calls, _PROVISIONAL)
    if object_code is None:
        digest = hashlib.sha256((text + "".join(sorted(kernel_symbols)) + target.key()).encode()).hexdigest()[:16]
        symbol = f"lw_run_{digest}"
        object_code = jit.cached_object(symbol, target)
        if object_code is None:
            object_code, _ = jit.compile_ir(_renamed(text, symbol), target, optimized=False)
            jit.store_object(symbol, target, object_code)
    return NetworkRunner(symbol, _renamed(text, symbol), object_code)


def _renamed(text: str, symbol: str) -> str:
    """``runner_ir(calls, _PROVISIONAL)``'s text with the runner (and its module) named ``symbol``."""
    return text.replace(f'"{_PROVISIONAL}"', f'"{symbol}"')


def runner_ir(calls: Sequence[Call], symbol: str) -> str:
    """LLVM IR of the runner ``symbol`` of ``calls``."""
    ptr = ir.PointerType(ir.IntType(8))
    i64 = ir.IntType(64)
    module = ir.Module(name=symbol)
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr] * 5), name=symbol)
    for arg, nm in zip(fn.args, ("inputs", "outputs", "arena", "weights", "err")):
        arg.name = nm
    fn.attributes.add("nounwind")
    b = ir.IRBuilder(fn.append_basic_block("entry"))
    width = max([len(args) for _, args in calls] + [1])
    slots = b.alloca(ptr, size=width, name="buffers")
    sizes = b.alloca(ir.ArrayType(i64, 1), name="sizes")
    kernels: Dict[str, ir.Function] = {}
    spaces = {"input": fn.args[0], "output": fn.args[1], "arena": fn.args[2], "weight": fn.args[3]}
    err = fn.args[4]
    for position, (kernel, args) in enumerate(calls):
        kfn = kernels.get(kernel)
        if kfn is None:
            kfn = ir.Function(module, ir.FunctionType(ir.VoidType(), [ptr, ptr, ptr]), name=kernel)
            kernels[kernel] = kfn
        for j, (space, where) in enumerate(args):
            base = spaces[space]
            if space in ("input", "output"):
                slot = b.gep(base, [ir.Constant(i64, where)], inbounds=True, source_etype=ptr)
                value = b.load(slot, typ=ptr)
            else:
                value = b.gep(base, [ir.Constant(i64, where)], inbounds=True, source_etype=ir.IntType(8))
            dst = b.gep(slots, [ir.Constant(i64, j)], inbounds=True, source_etype=ptr)
            b.store(value, dst)
        b.call(kfn, [b.bitcast(slots, ptr), b.bitcast(sizes, ptr), err])
        failed = b.icmp_unsigned("!=", b.load(b.bitcast(err, i64.as_pointer()), typ=i64), ir.Constant(i64, 0))
        with b.if_then(failed, likely=False):
            where = b.gep(err, [ir.Constant(i64, 3 * 8)], inbounds=True, source_etype=ir.IntType(8))
            b.store(ir.Constant(i64, position), b.bitcast(where, i64.as_pointer()))
            b.ret_void()
    b.ret_void()
    return str(module)
