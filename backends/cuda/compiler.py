"""CUDA C -> PTX: NVRTC through ctypes, else ``nvcc --ptx``; cached on disk.

NVRTC is found in the pip wheel (``pip install loopweave[cuda]`` brings
``nvidia-cuda-nvrtc-cu12``), then in a CUDA toolkit (``$CUDA_HOME``, /usr/local/cuda*),
then by the loader's search path; nvcc on the PATH.  Only absolute folders are searched (an empty
or relative ``sys.path`` / ``PATH`` entry is the current folder, which may be a stranger's).  It compiles a kernel in tens of milliseconds;
nvcc takes about a second, so it is only the fallback.  Neither needs a GPU.
The PTX is keyed by a hash of the source, the architecture and the compiler, in
loopweave's cache folder, so a second build of the same kernel compiles nothing.
"""
from __future__ import annotations

import ctypes
import glob
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from functools import lru_cache
from pathlib import Path
from typing import Optional, Tuple

from ...errors import BuildError
from ..disk_cache import writable_cache_dir
from ..search_path import absolute_path

DEFAULT_ARCH = "sm_90"


def _wheel_dirs():
    """The pip wheels' library folders under ``sys.path``; an empty or relative entry (the current
    folder) is never searched: a ``libnvrtc.so`` lying there is not loaded."""
    for entry in sys.path:
        if not entry or not os.path.isabs(entry):
            continue
        for pattern in ("nvidia/cuda_nvrtc/lib", "nvidia/cu1*/lib", "nvidia/nvrtc/lib"):
            yield from glob.glob(os.path.join(entry, pattern))


def _toolkit_dirs():
    roots = [os.environ.get("CUDA_HOME"), os.environ.get("CUDA_PATH")] + sorted(glob.glob("/usr/local/cuda*"))
    for root in roots:
        if root and os.path.isabs(root):
            for sub in ("lib64", "lib", "targets/x86_64-linux/lib", "targets/sbsa-linux/lib"):
                yield os.path.join(root, sub)


@lru_cache(maxsize=None)
def find_nvrtc() -> Optional[str]:
    """The path of a loadable libnvrtc, or None."""
    for d in list(_wheel_dirs()) + list(_toolkit_dirs()):
        for path in sorted(glob.glob(os.path.join(d, "libnvrtc.so*")), reverse=True):
            if "builtins" in os.path.basename(path):
                continue
            try:
                ctypes.CDLL(path)
                return path
            except OSError:
                continue
    for name in ("libnvrtc.so", "libnvrtc.so.13", "libnvrtc.so.12"):
        try:
            ctypes.CDLL(name)
            return name
        except OSError:
            continue
    return None


@lru_cache(maxsize=None)
def find_nvcc() -> Optional[str]:
    found = shutil.which("nvcc", path=absolute_path())
    if found:
        return found
    for root in [os.environ.get("CUDA_HOME")] + sorted(glob.glob("/usr/local/cuda*")):
        if root and os.access(os.path.join(root, "bin", "nvcc"), os.X_OK):
            return os.path.join(root, "bin", "nvcc")
    return None


def available_compiler() -> Optional[str]:
    """``"nvrtc"``, ``"nvcc"`` or None: what ``compile_ptx`` would use."""
    if find_nvrtc():
        return "nvrtc"
    if find_nvcc():
        return "nvcc"
    return None


def _nvrtc_compile(lib_path: str, source: str, arch: str) -> str:
    lib = ctypes.CDLL(lib_path)
    prog = ctypes.c_void_p()

    def check(status, what):
        if status != 0:
            lib.nvrtcGetErrorString.restype = ctypes.c_char_p
            raise BuildError(f"NVRTC {what} failed: {lib.nvrtcGetErrorString(status).decode()}")
    check(lib.nvrtcCreateProgram(ctypes.byref(prog), source.encode(), b"loopweave.cu", 0, None, None),
          "nvrtcCreateProgram")
    try:
        opts = [f"--gpu-architecture=compute_{arch[3:]}".encode(), b"--std=c++17", b"-default-device"]
        arr = (ctypes.c_char_p * len(opts))(*opts)
        status = lib.nvrtcCompileProgram(prog, len(opts), arr)
        if status != 0:
            size = ctypes.c_size_t()
            lib.nvrtcGetProgramLogSize(prog, ctypes.byref(size))
            log = ctypes.create_string_buffer(size.value)
            lib.nvrtcGetProgramLog(prog, log)
            raise BuildError(f"NVRTC could not compile the generated CUDA C (this is a bug in loopweave's CUDA "
                             f"backend; please report it):\n{log.value.decode(errors='replace')}")
        size = ctypes.c_size_t()
        check(lib.nvrtcGetPTXSize(prog, ctypes.byref(size)), "nvrtcGetPTXSize")
        ptx = ctypes.create_string_buffer(size.value)
        check(lib.nvrtcGetPTX(prog, ptx), "nvrtcGetPTX")
        return ptx.value.decode()
    finally:
        lib.nvrtcDestroyProgram(ctypes.byref(prog))


def _nvcc_compile(nvcc: str, source: str, arch: str) -> str:
    with tempfile.TemporaryDirectory(prefix="loopweave-cuda-") as tmp:
        src, out = os.path.join(tmp, "kernel.cu"), os.path.join(tmp, "kernel.ptx")
        Path(src).write_text(source)
        proc = subprocess.run([nvcc, f"-arch={arch}", "--ptx", "-std=c++17", "-o", out, src],
                              capture_output=True, text=True)
        if proc.returncode != 0:
            raise BuildError(f"nvcc could not compile the generated CUDA C (this is a bug in loopweave's CUDA "
                             f"backend; please report it):\n{proc.stderr}")
        return Path(out).read_text()


def _cache_path(source: str, arch: str, compiler: str) -> Optional[Path]:
    """Where the PTX of ``source`` is cached, or None (no usable cache folder: ``writable_cache_dir``)."""
    key = hashlib.sha256(f"{compiler}|{arch}|{source}".encode()).hexdigest()[:32]
    folder = writable_cache_dir()
    if folder is None:
        return None
    path = folder / "cuda"
    path.mkdir(exist_ok=True, mode=0o700)
    return path / f"{key}.ptx"


def compile_ptx(source: str, arch: str = DEFAULT_ARCH, compiler: Optional[str] = None) -> Tuple[str, str]:
    """(PTX, the compiler used) for CUDA C ``source``; ``compiler`` forces "nvrtc" or "nvcc"."""
    if not (arch.startswith("sm_") and arch[3:].isdigit()):
        raise BuildError(f"unknown CUDA architecture {arch!r}; use the form sm_90")
    compiler = compiler or available_compiler()
    if compiler is None:
        raise BuildError("no CUDA compiler found: install NVRTC (pip install 'loopweave[cuda]') or a CUDA toolkit "
                         "with nvcc (set CUDA_HOME if it is not in /usr/local/cuda)")
    path = _cache_path(source, arch, compiler)
    if path is not None and path.exists():
        return path.read_text(), compiler
    if compiler == "nvrtc":
        lib = find_nvrtc()
        if lib is None:
            raise BuildError("NVRTC was asked for but not found; pip install 'loopweave[cuda]'")
        ptx = _nvrtc_compile(lib, source, arch)
    elif compiler == "nvcc":
        nvcc = find_nvcc()
        if nvcc is None:
            raise BuildError("nvcc was asked for but not found on PATH or in /usr/local/cuda*/bin")
        ptx = _nvcc_compile(nvcc, source, arch)
    else:
        raise BuildError(f"unknown CUDA compiler {compiler!r}; use 'nvrtc' or 'nvcc'")
    if path is None:
        return ptx, compiler
    fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    with os.fdopen(fd, "w") as f:
        f.write(ptx)
    os.replace(tmp, path)
    return ptx, compiler
