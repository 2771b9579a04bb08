"""A GPU schedule built for the CPU with its thread-bound loops run as serial loops.

Sequentially, a GPU schedule computes the same values as on the GPU: a cooperative copy
into shared memory is done whole by every thread instead of in parts, and barriers are
no-ops.  So the values a GPU schedule computes (tiling, guards, caches, bound inference)
can be checked against numpy without a GPU (the tests' ``emulate`` fixture), and a kernel
that differs on the GPU from its emulation points at what only parallel execution or nvcc
shows (``benchmarks/cuda_check_kernels.py``).
"""
from __future__ import annotations

from ...dsl.visitor import Mutator
from ...lowering.ir import For


class _Serial(Mutator):
    def visit_For(self, node):
        body = self.visit(node.body)
        if node.kind != "thread":
            return node if body is node.body else For(node.var, node.min, node.extent, node.kind, body,
                                                      node.annotations)
        return For(node.var, node.min, node.extent, "serial", body, ())


def emulating_build(s, args):
    """A CPU Module computing what schedule ``s`` computes on the GPU (it must lower for cuda too)."""
    from ...lowering.lower import lower
    from ...target import resolve_target
    from ..build import build_llvm
    lower(s, args, target="cuda")   # the schedule must also be a legal GPU schedule
    func = lower(s, args)
    return build_llvm(func.with_body(_Serial().visit(func.body)), resolve_target("llvm"))
