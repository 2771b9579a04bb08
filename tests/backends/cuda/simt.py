"""Run a CUDA module's generated CUDA C on the CPU, to test it without a GPU.

The kernel source is compiled as C++20 with g++ behind ``simt_shim.h``: every GPU thread
is a fiber, one OS thread switches between them at barriers, ``mma.sync`` is emulated
warp by warp and ``cp.async`` queues its copies until the wait that covers them.  The
shim is stricter than a GPU where a GPU is only sometimes unkind: threads released by a
barrier run in a shuffled order, two blocks run at once, shared memory and the host
program's intermediate buffers start as NaN (floats) or a byte pattern (others), so a
missing or misplaced barrier, a read of memory nobody wrote or a block counting on
another gives a wrong result on every run, and a barrier that not all threads reach is
an error instead of a hang.  The host program (intermediate buffers, launch extents from
the sizes) is the CUDA module's own, with host memory instead of device memory.
"""
import ctypes
import hashlib
import re
import subprocess
from pathlib import Path

import numpy as np

SHIM = (Path(__file__).parent / "simt_shim.h").read_text()

# a shared array as the code generator declares it (``__shared__ __align__(16) float A_shared[512];``)
_SHARED = re.compile(r"__shared__\s+(?:__align__\(\d+\)\s+)?([A-Za-z_][\w ]*?)\s+(\w+)\[(\d+)\];")


class EmulationError(AssertionError):
    """The emulated kernel did what no GPU run may (a barrier not all threads reach)."""


def per_block_shared(source: str) -> str:
    """``source`` with each ``__shared__`` array declared as a reference to its block's copy."""
    sites = iter(range(1 << 30))
    return _SHARED.sub(lambda m: f"auto& {m[2]} = lw_shared<{m[1]}, {m[3]}>({next(sites)});", source)


def launcher(name: str, args) -> str:
    """The C entry point running kernel ``name`` over a grid; ``args`` the C texts of its arguments
    from ``void** args``."""
    return (f'extern "C" int lw_launch_{name}(unsigned gx, unsigned gy, unsigned gz, unsigned bx, '
            f"unsigned by, unsigned bz, void** args) {{\n"
            f"  return lw_run_grid({{gx, gy, gz}}, {{bx, by, bz}}, [&] {{ {name}({', '.join(args)}); }});\n}}\n")


def module_launcher(info) -> str:
    """The launcher of a CUDA module's kernel (``KernelInfo``), arguments as the module passes them."""
    from loopweave.backends.cuda.codegen import C_TYPE, MEMORY_TYPE
    launch = info.launch
    args = [f"({MEMORY_TYPE[b.dtype]}*)(*(unsigned long long*)args[{k}])" for k, b in enumerate(launch.params)]
    args += [f"*({C_TYPE[v.dtype]}*)args[{len(launch.params) + k}]" for k, v in enumerate(launch.scalars)]
    if info.checks:
        args.append(f"(unsigned long long*)(*(unsigned long long*)args[{len(args)}])")
    return launcher(launch.name, args)


#: g++'s options for the shim's precompiled header and for every kernel (a header precompiled with other
#: options is not used)
CXX_FLAGS = ["-std=c++20", "-O1", "-fPIC", "-w"]


def precompile_shim(cxx: str, folder: Path) -> None:
    """``folder/simt_shim.h`` and, where g++ makes one, its precompiled header beside it, which a kernel
    source starting with ``#include "simt_shim.h"`` reads instead of parsing the shim and the C++
    headers it includes (40% of the g++ time of tests/backends/cuda).  Without one, g++ reads the text."""
    header = folder / "simt_shim.h"
    if header.exists():
        return
    text = folder / "simt_shim.h.text"
    text.write_text(SHIM)
    partial = folder / "simt_shim.h.gch.partial"
    proc = subprocess.run([cxx, *CXX_FLAGS, "-x", "c++-header", "-o", str(partial), str(text)],
                          capture_output=True, text=True)
    if proc.returncode == 0:
        partial.rename(folder / "simt_shim.h.gch")
    text.rename(header)


def compile_source(cxx: str, folder: Path, source: str) -> ctypes.CDLL:
    """Kernel source (and its launchers) behind the shim, compiled and loaded; cached by content."""
    source = per_block_shared(source)
    key = hashlib.sha256((SHIM + source).encode()).hexdigest()[:16]
    lib_path = folder / f"k{key}.so"
    if not lib_path.exists():
        precompile_shim(cxx, folder)
        src = folder / f"k{key}.cpp"
        src.write_text('#include "simt_shim.h"\n' + source)
        proc = subprocess.run([cxx, *CXX_FLAGS, "-shared", "-o", str(lib_path), str(src)],
                              capture_output=True, text=True)
        assert proc.returncode == 0, f"the generated CUDA C does not compile as C++:\n{proc.stderr[:4000]}"
    lib = ctypes.CDLL(str(lib_path))
    lib.lw_emulation_error.restype = ctypes.c_char_p
    return lib


def launch(lib, fn, grid, block, args) -> None:
    """Run ``fn`` (an ``lw_launch_*`` of ``lib``) over ``grid`` x ``block`` with the addresses of ``args``."""
    arr = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])
    if fn(*[ctypes.c_uint(int(v)) for v in list(grid) + list(block)], arr):
        raise EmulationError(lib.lw_emulation_error().decode())


class HostMemoryDriver:
    """The driver calls of a CUDA module's host program or of a network, on host memory (fresh buffers
    poisoned: device memory is not zeroed either), launching kernels compiled by ``load_kernels``."""

    def __init__(self, cxx: str, folder: Path):
        self.cxx, self.folder = cxx, folder
        self.memory = {}
        self.lib_of = {}   # id(launch function) -> the library it is in

    def load_kernels(self, module, source=None) -> None:
        """Compile ``module``'s kernels (or ``source``, CUDA C for them) for the CPU: the module's own
        (its error slot, where it has one, made anew in this driver's memory)."""
        infos = list(module._kernels.values())
        lib = compile_source(self.cxx, self.folder, (source or module.get_source("cuda")) + "\n" +
                             "".join(module_launcher(info) for info in infos))
        module._functions = {info.name: getattr(lib, f"lw_launch_{info.name}") for info in infos}
        self.lib_of.update({id(fn): lib for fn in module._functions.values()})
        module._module = lib
        module._err = None

    def alloc(self, nbytes):
        buf = np.full(max(1, nbytes) + 64, 0xFF, np.uint8)
        ptr = (buf.ctypes.data + 63) // 64 * 64
        self.memory[ptr] = buf
        return ptr

    def free(self, ptr):
        del self.memory[ptr]

    def copy_to_device(self, dst, src, nbytes):
        ctypes.memmove(dst, src, nbytes)

    def copy_to_host(self, dst, src, nbytes):
        ctypes.memmove(dst, src, nbytes)

    def copy_device_to_device(self, dst, src, nbytes):
        ctypes.memmove(dst, src, nbytes)

    def make_current(self):
        pass

    def synchronize(self):
        pass

    def launch(self, fn, grid, block, args):
        launch(self.lib_of[id(fn)], fn, grid, block, args)

    def launch_prepared(self, prepared, stream=None):
        if prepared.fn(*prepared.grid, *prepared.block, prepared.params):
            raise EmulationError(self.lib_of[id(prepared.fn)].lw_emulation_error().decode())


def loader(cxx: str, folder: Path):
    """``load(module, source=None)``: a callable running CUDA module ``module``'s kernels on the CPU with
    numpy arrays (``source``: CUDA C to run instead of the module's, such as a mutated copy of it)."""
    def load(module, source=None):
        driver = HostMemoryDriver(cxx, folder)
        driver.load_kernels(module, source)
        functions = module._functions

        def call(*arrays):
            sizes = module._bind(arrays)
            pointers = [a.ctypes.data for a in arrays]
            module._check_alignment(pointers)
            module._functions = functions
            module._run(driver, pointers, sizes)
            module._raise_index_error(driver)
        return call
    return load
