"""A native loop over a table of kernel calls: one ctypes call runs a whole polymorphic network.

``lw_call_list(n, fns, buffers, sizes, err)`` calls ``fns[k](buffers[k], sizes[k], err)`` for
k < n, in order, and stops after a call that writes the error slot (a failed index check).  Each
kernel has loopweave's kernel ABI (``backends/runtime.py``: its argument pointers, its size
values, the error slot).  The function is the same for every network, so it is compiled once
(or found in the object cache) and its object code travels in a saved executable.  The tables
themselves are the network compiler's (``nn_ops/network/call_list.py``).
"""
from __future__ import annotations

import ctypes

from llvmlite import ir

from ...target import Target
from .. import loaded_objects
from . import jit

SYMBOL = "lw_call_list_v1"
CALL_LIST_ENTRY = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_void_p,
                                   ctypes.c_void_p)


def call_list_ir() -> str:
    """LLVM IR of ``void lw_call_list_v1(i64 n, ptr fns, ptr buffers, ptr sizes, ptr err)``."""
    i8p, i64 = ir.IntType(8).as_pointer(), ir.IntType(64)
    kernel_ty = ir.FunctionType(ir.VoidType(), [i8p, i8p, i8p])
    module = ir.Module(name="lw_call_list")
    fn = ir.Function(module, ir.FunctionType(ir.VoidType(), [i64, i8p.as_pointer(), i8p.as_pointer(),
                                                             i8p.as_pointer(), i64.as_pointer()]), name=SYMBOL)
    n, fns, bufs, sizes, err = fn.args
    entry, head, body, done = (fn.append_basic_block(x) for x in ("entry", "head", "body", "done"))
    b = ir.IRBuilder(entry)
    b.branch(head)
    b.position_at_end(head)
    k = b.phi(i64, name="k")
    k.add_incoming(ir.Constant(i64, 0), entry)
    more = b.icmp_signed("<", k, n)
    ok = b.icmp_signed("==", b.load(err), ir.Constant(i64, 0))
    b.cbranch(b.and_(more, ok), body, done)
    b.position_at_end(body)
    target = b.bitcast(b.load(b.gep(fns, [k])), kernel_ty.as_pointer())
    b.call(target, [b.load(b.gep(bufs, [k])), b.load(b.gep(sizes, [k])), b.bitcast(err, i8p)])
    k.add_incoming(b.add(k, ir.Constant(i64, 1)), body)
    b.branch(head)
    b.position_at_end(done)
    b.ret_void()
    return str(module)


def call_list_object(target: Target) -> bytes:
    """The loop's object code: from this process, the object cache, or compiled now (one small loop)."""
    obj = loaded_objects.loaded_object(SYMBOL)
    if obj is not None:
        return obj
    obj = jit.cached_object(SYMBOL, target)
    if obj is None:
        obj, _ = jit.compile_ir(call_list_ir(), target)
        jit.store_object(SYMBOL, target, obj)
    return obj


def call_list_runner(obj: bytes):
    """The callable loop of its object code (loaded once per process)."""
    return CALL_LIST_ENTRY(loaded_objects.load(SYMBOL, obj))
