"""``build_cuda``: a PrimFunc lowered for target cuda -> a CudaModule.

Generates the CUDA C of every kernel, compiles it to PTX now if a compiler is
present (so errors show at build time and the PTX is cached), and leaves loading
into the driver to the first call: building needs no GPU.  The architecture is the
target's (``"cuda:sm_80"``), else the GPU present, else sm_90.
"""
from __future__ import annotations

import hashlib

from ...errors import BuildError
from ...lowering.ir import PrimFunc
from ..runtime import ParamSpec, _shape_spec
from . import codegen, compiler
from .driver import get_driver, gpu_available
from .module import CudaModule


def cuda_arch(target) -> str:
    """The architecture kernels are compiled for: the target's (``"cuda:sm_80"``), else the GPU
    present, else the default."""
    if target.cpu:
        return target.cpu
    return get_driver().arch if gpu_available() else compiler.DEFAULT_ARCH


TENSOR_CORE_ARCH = 80   # mma.sync on tf32 and cp.async: Ampere (sm_80) and newer


def has_tensor_cores(arch: str) -> bool:
    """Whether ``arch`` (``"sm_90"``) has the tf32 tensor-core and cp.async instructions (sm_80 on)."""
    return arch.startswith("sm_") and arch[3:].isdigit() and int(arch[3:]) >= TENSOR_CORE_ARCH


def check_tensor_core_arch(arch: str, what: str) -> None:
    """Raise BuildError unless ``arch`` (``"sm_90"``) has the tf32 tensor-core and cp.async instructions
    ``what`` needs."""
    if not has_tensor_cores(arch):
        raise BuildError(f"{what} needs tf32 tensor cores and cp.async (sm_{TENSOR_CORE_ARCH} or newer), but "
                         f"the code is compiled for {arch}: use precision='fp32' and no warp stage or "
                         f"asynchronous double buffering on this GPU")


def build_cuda(func: PrimFunc, target, written) -> CudaModule:
    if not codegen.kernels_of(func):
        raise BuildError(f"'{func.name}' has no GPU kernel: lower it with lw.lower(..., target='cuda') (or pass "
                         f"the schedule to lw.build) after binding its loops to GPU axes")
    source, kernels = codegen.generate(func)
    arch = cuda_arch(target)
    if codegen.needs_sm80(source):
        check_tensor_core_arch(arch, f"'{func.name}' (a warp stage or an asynchronous copy)")
    compiled = {}

    def ptx() -> str:
        if "ptx" not in compiled:
            compiled["ptx"], compiled["compiler"] = compiler.compile_ptx(source, arch)
        return compiled["ptx"]

    if compiler.available_compiler() is not None:
        ptx()
    size_names = [v.name for v in func.size_vars]
    if len(set(size_names)) != len(size_names):
        raise BuildError(f"two different size variables share a name in {size_names}; give each lw.var a unique name")
    outputs = {id(b) for b in written}
    params = [ParamSpec(b.name, b.dtype, _shape_spec(b.shape, {}), id(b) in outputs) for b in func.params]
    sources = {"lowered": lambda: str(func), "cuda": source, "ptx": ptx}
    module = CudaModule(func.name, params, size_names, sources, target, func, kernels, ptx)
    module.arch = arch
    # the whole lowered function, not only the device code: two kernels with the same CUDA C can
    # differ in their launch grids and parameter shapes (depthwise convs of 384 and 576 channels
    # at 14x14), and a network keys its modules by this symbol
    module.symbol = f"cu_{func.name}_{hashlib.sha256((str(func) + source + arch).encode()).hexdigest()[:16]}"
    return module
