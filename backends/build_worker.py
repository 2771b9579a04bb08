"""A build worker process: ``python -m loopweave.backends.build_worker`` (see ``build_workers``).

Each request holds a kernel's schedule, arguments, name, target, checks and the caller's
``LOOPWEAVE_*`` settings (and ``cuda_arch`` for the GPU); the reply is ``{"built": (lowered function, symbol, object code)}`` or
``{"error": message}`` (the caller then builds that kernel itself and raises its own error).
"""
from __future__ import annotations

import os

from ..lowering.lower import lower
from . import build as build_mod
from .cuda import codegen, compiler
from .llvm import jit
from .wire import serve


def _build(request: dict):
    """In a worker: ``(lowered function, symbol, object code)`` of one CPU kernel (from the disk
    cache when it is there; a fresh compile is stored in it); for the GPU ``(lowered function,
    None, None)``, its PTX compiled into the disk cache for ``cuda_arch``."""
    env = request["env"]
    for key in [k for k in os.environ if k.startswith("LOOPWEAVE_") and k not in env]:
        del os.environ[key]
    os.environ.update(env)
    target = request["target"]
    if target.kind == "cuda":
        func = lower(request["schedule"], request["args"], name=request["name"], target=target,
                     checks=request["checks"])
        if compiler.available_compiler() is not None:      # into the PTX disk cache
            compiler.compile_ptx(codegen.generate(func)[0], request["cuda_arch"])
        return func, None, None
    func = build_mod._lowered_for_cpu(request["schedule"], request["args"], target, request["name"],
                                      request["checks"])
    job = build_mod._LlvmJob(func, target)
    job.start(lambda ir: build_mod._Done(jit.compile_ir(ir, target)))
    return func, job.symbol, job.object_code()


def main() -> None:
    serve(lambda request: {"built": _build(request)})


if __name__ == "__main__":
    main()
