"""What a machine is: the target that code is generated for.

Imports nothing of the project.  ``Target("llvm")`` describes the host CPU: its LLVM
name *and* its feature string (a VM may hide features the name implies, so both are
needed, and both key the compile cache), its vector width and thread count.
"""
from __future__ import annotations

import os
from dataclasses import dataclass
from functools import lru_cache


@dataclass(frozen=True)
class Target:
    kind: str
    cpu: str = ""
    features: str = ""
    vector_bits: int = 256
    num_threads: int = 1
    # GPU limits (target "cuda"): checked when a kernel is lowered, before any code exists
    max_threads_per_block: int = 1024
    max_shared_memory_per_block: int = 48 * 1024   # static __shared__ limit without opt-in

    @property
    def has_fma(self) -> bool:
        return "+fma" in self.features.split(",")

    def lanes(self, dtype: str) -> int:
        """How many elements of ``dtype`` fill one vector register."""
        import numpy as np
        return max(1, self.vector_bits // (8 * np.dtype(dtype).itemsize))

    def key(self) -> str:
        return f"{self.kind}|{self.cpu}|{self.features}"

    def __str__(self) -> str:
        if self.kind == "llvm":
            return f"llvm (cpu={self.cpu}, {self.vector_bits}-bit vectors, {self.num_threads} threads)"
        if self.kind == "cuda":
            return f"cuda ({self.cpu or 'arch of the GPU present, else sm_90'})"
        return self.kind


@lru_cache(maxsize=None)
def host_target() -> Target:
    from llvmlite import binding as llvm
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    cpu = llvm.get_host_cpu_name()
    features = llvm.get_host_cpu_features().flatten()
    enabled = set(f[1:] for f in features.split(",") if f.startswith("+"))
    # the widest vectors the CPU runs natively; LLVM honours explicit 512-bit vector types
    bits = 512 if "avx512f" in enabled else 256 if ("avx2" in enabled or "avx" in enabled) else 128
    threads = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    return Target("llvm", cpu, features, bits, threads)


def resolve_target(target) -> Target:
    """A Target from a Target, ``"llvm"`` or ``"cuda"``."""
    if isinstance(target, Target):
        return target
    if target in (None, "llvm", "cpu"):
        return host_target()
    if target == "cuda":
        return Target("cuda")   # cpu="" : compile for the GPU present (sm_90 when there is none)
    if isinstance(target, str) and target.startswith("cuda:sm_") and target[8:].isdigit():
        return Target("cuda", cpu=target[5:])
    from .errors import BuildError
    raise BuildError(f"unknown target {target!r}; use 'llvm' (the host CPU), 'cuda' or 'cuda:sm_XX'")
