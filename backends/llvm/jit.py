"""Compile LLVM IR to machine code, with an on-disk object cache, and load it.

One MCJIT engine per process holds every loaded object.  Objects are cached under
``$LOOPWEAVE_CACHE_DIR`` (default ``~/.cache/loopweave``) keyed by the kernel's
symbol (a hash of its lowered IR and target), the CPU name, its feature string,
the llvmlite version and a hash of the code generator's source, so a second build
of the same kernel skips LLVM entirely.
"""
from __future__ import annotations

import ctypes
import ctypes.util
import hashlib
import threading
from pathlib import Path
from typing import Optional, Tuple

import llvmlite
from llvmlite import binding as llvm

from ...errors import BuildError, InternalError
from ...target import Target, host_target
from ..disk_cache import cache_dir, read_verified, writable_cache_dir, write_checksummed
from . import thread_pool

_lock = threading.Lock()
_engine = None
_target_machines = {}
_machines_lock = threading.Lock()


def _initialize():
    global _engine
    if _engine is not None:
        return
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    libm = ctypes.util.find_library("m")
    if libm:
        llvm.load_library_permanently(libm)
    thread_pool.install()
    empty = llvm.parse_assembly("")
    _engine = llvm.create_mcjit_compiler(empty, target_machine_for(None))


def target_machine_for(target: Target | None):
    """The LLVM target machine for ``target`` (None: the host).  A target this machine runs gets JIT
    code (static relocations, the JIT's code model); one it cannot run is cross-compiled, and only
    ever linked into a library elsewhere, so its code is position-independent (``runs_here``)."""
    key = None if target is None else (target.cpu, target.features, target.triple)
    with _machines_lock:
        tm = _target_machines.get(key)
        if tm is None:
            machine = target or host_target()
            cpu, features = machine.cpu, machine.features
            if target is None or target.runs_here():
                tm = llvm.Target.from_default_triple().create_target_machine(
                    cpu=cpu, features=features, opt=3, reloc="static", codemodel="jitdefault")
            else:
                tm = cross_target_machine(target)
            _target_machines[key] = tm
    return tm


def cross_target_machine(target: Target, reloc: str = "pic"):
    """A target machine for ``target``'s triple (the host's when it names none), position-independent
    by default: the code of a library (``export_library``), never loaded into this process."""
    llvm.initialize_all_targets()
    llvm.initialize_all_asmprinters()
    triple = target.triple or llvm.get_process_triple()
    try:
        machine_target = llvm.Target.from_triple(triple)
    except RuntimeError as exc:
        raise BuildError(f"this LLVM (llvmlite {llvmlite.__version__}) cannot generate code for {triple!r}: "
                         f"{exc}") from None
    return machine_target.create_target_machine(cpu=target.cpu, features=target.features, opt=3, reloc=reloc,
                                                codemodel="default")


def optimize(module_ref, target: Target):
    tm = target_machine_for(target)
    module_ref.triple = tm.triple
    module_ref.data_layout = str(tm.target_data)
    pto = llvm.create_pipeline_tuning_options(speed_level=3)
    pto.loop_vectorization = True
    pto.slp_vectorization = True
    pto.loop_unrolling = True
    pb = llvm.create_pass_builder(tm, pto)
    pb.getModulePassManager().run(module_ref, pb)


def source_hash(root: Path, folders, top_level: bool = False) -> str:
    """A hash of the Python files under ``folders`` of ``root`` (and of ``root``'s own, if
    ``top_level``): names and contents, so any edit changes it."""
    files = sorted(p for d in folders for p in (root / d).rglob("*.py"))
    if top_level:
        files += sorted(root.glob("*.py"))
    digest = hashlib.sha256()
    for path in files:
        digest.update(str(path.relative_to(root)).encode())
        digest.update(path.read_bytes())
    return digest.hexdigest()


_codegen_fingerprint = None


def codegen_fingerprint() -> str:
    """A hash of the code generator (every file beside this one), once per process: the
    symbol names the lowered IR, and the same IR compiles to different code after a codegen
    change."""
    global _codegen_fingerprint
    if _codegen_fingerprint is None:
        here = Path(__file__).resolve().parent
        _codegen_fingerprint = source_hash(here.parent, [here.name])
    return _codegen_fingerprint


def _object_path(symbol: str, target: Target) -> Optional[Path]:
    """Where ``symbol``'s object is cached, or None when the cache folder is unusable (built in memory)."""
    folder = writable_cache_dir()
    if folder is None:
        return None
    words = [symbol, target.cpu, target.features, llvmlite.__version__, codegen_fingerprint(), "checksummed"]
    if target.triple or not target.runs_here():     # cross-compiled: another triple, position-independent
        words += [target.triple, "pic"]
    key = hashlib.sha256("\0".join(words).encode())
    return folder / f"{key.hexdigest()[:32]}.o"


def cached_object(symbol: str, target: Target):
    """The cached object code for ``symbol`` (whose name hashes the lowered IR), or None.

    Entries carry their sha256 (``disk_cache.write_checksummed``); a damaged one is deleted
    and reported, never handed to LLVM, and the caller rebuilds it."""
    path = _object_path(symbol, target)
    return None if path is None else read_verified(path)


def store_object(symbol: str, target: Target, obj: bytes) -> None:
    path = _object_path(symbol, target)
    if path is not None:
        write_checksummed(path, obj)


_compile_lock = threading.Lock()


def compile_ir(llvm_ir: str, target: Target, optimized: bool = True) -> Tuple[bytes, str]:
    """(object code, optimised LLVM IR) for an LLVM IR module; ``optimized=False`` skips LLVM's IR
    passes, for code they cannot improve (a network's runner: straight-line calls of kernels compiled
    elsewhere, where the passes cost more than its code generation).

    Safe to call from a background thread (``build_many`` overlaps it with the next kernel's
    lowering): the module lives in its own LLVM context and one compile runs at a time."""
    with _lock:
        _initialize()
    with _compile_lock:
        module_ref = llvm.parse_assembly(llvm_ir, context=llvm.create_context())
        module_ref.verify()
        if optimized:
            optimize(module_ref, target)
        else:
            module_ref.triple = target_machine_for(target).triple
            module_ref.data_layout = str(target_machine_for(target).target_data)
        obj = target_machine_for(target).emit_object(module_ref)
        return obj, str(module_ref)


def assembly(llvm_ir: str, target: Target) -> str:
    with _lock:
        _initialize()
    module_ref = llvm.parse_assembly(llvm_ir)
    optimize(module_ref, target)
    return target_machine_for(target).emit_assembly(module_ref)


def load_object(obj: bytes, symbol: str) -> int:
    """Load object code into the process and return the address of ``symbol``."""
    with _lock:
        _initialize()
        _engine.add_object_file(llvm.ObjectFileRef.from_data(obj))
        _engine.finalize_object()
        address = _engine.get_function_address(symbol)
    if not address:
        raise InternalError(f"symbol {symbol} not found after loading its object code")
    return address
