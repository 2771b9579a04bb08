"""Link compiled objects into one shared library with the system C compiler.

Generic helpers for ``export_library`` (the network's C API is generated in
``nn_ops/network/export.py``):

* ``find_c_compiler()``: ``$CC`` or ``cc`` / ``gcc`` / ``clang`` on the PATH; none is a
  ``BuildError`` that says what to install.
* ``thread_pool_object(target)``: the native thread pool (``llvm/thread_pool.py``) compiled to
  position-independent object code, so the library carries its own pool.
* ``weights_assembly(blob_path, symbol)``: a small assembler file that places a binary file in
  ``.rodata`` with ``.incbin`` (tens of MB of weights cost the assembler a file copy, where an
  LLVM constant or a C initializer of that size takes the compiler seconds to minutes).
* ``link_shared(...)``: ``cc -shared`` with a version script that exports only the names given;
  every other symbol (kernels, runner, pool) stays local to the library.
"""
from __future__ import annotations

import os
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Iterable, List, Optional, Sequence

from ..errors import ArgumentError, BuildError, InternalError

COMPILER_HINT = ("export_library links with the system C compiler and found none: install one (Debian/Ubuntu: "
                 "'apt-get install gcc', Fedora: 'dnf install gcc', Alpine: 'apk add build-base') or set CC "
                 "to its path")



#: C shared by the generated libraries (network and kernel): ``fail`` records a thread-local message
#: and returns the status, ``PREFIXlast_error`` reads it, ``all_cores`` counts the usable CPUs
C_FAIL_AND_CORES = r"""static int fail(int status, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(last_error, sizeof last_error, fmt, ap);
    va_end(ap);
    return status;
}

EXPORT const char *LWPlast_error(void) { return last_error; }

static int all_cores(void) {
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof set, &set) == 0) n = CPU_COUNT(&set);
    if (n <= 0) n = (int)sysconf(_SC_NPROCESSORS_ONLN);
    if (n <= 0) n = 1;
    return n > MAX_THREADS ? MAX_THREADS : n;
}
"""

def find_c_compiler(cc: Optional[str] = None) -> List[str]:
    """The C compiler command to link with (program path, then any words given with it, as in
    ``CC="ccache gcc"``): ``cc`` if given, else ``$CC``, else cc / gcc / clang on the PATH."""
    given = cc or os.environ.get("CC")
    candidates = [shlex.split(given)] if given else [["cc"], ["gcc"], ["clang"]]
    for words in candidates:
        found = shutil.which(words[0]) if words else None
        if found:
            return [found, *words[1:]]
    if given:
        raise BuildError(f"the C compiler {given!r} was not found; {COMPILER_HINT}")
    raise BuildError(COMPILER_HINT)


POOL_SET_THREADS = "loopweave_export_pool_set_num_threads"
"""The pool's ``lw_set_num_threads`` in an exported library (renamed: a user's ``lw_`` API may want the name)."""
INTERNAL_SYMBOLS = ("lw_parallel_for", POOL_SET_THREADS, "loopweave_export_pool_get_num_threads")


def check_exported_names(exported: Sequence[str], internal: Iterable[str]) -> None:
    """An ``ArgumentError`` if an exported name is also an internal symbol of the library."""
    clash = sorted(set(exported) & (set(internal) | set(INTERNAL_SYMBOLS)))
    if clash:
        raise ArgumentError(f"export_library: {', '.join(clash)} would be both an exported function and a symbol "
                            f"inside the library; choose another prefix (or kernel name)")


def thread_pool_object(target) -> bytes:
    """``lw_parallel_for`` and its pool as position-independent object code for ``target``'s CPU;
    ``lw_set_num_threads`` is ``POOL_SET_THREADS`` here."""
    import re
    from llvmlite import binding as llvm
    from .llvm import thread_pool
    llvm.initialize_native_target()
    llvm.initialize_native_asmprinter()
    text = str(thread_pool.build_module())
    for name, renamed in (("lw_set_num_threads", POOL_SET_THREADS),
                          ("lw_get_num_threads", "loopweave_export_pool_get_num_threads")):
        text = re.sub(rf'@"?{name}"?(?=\W)', f'@"{renamed}"', text)
        if renamed not in text:
            raise InternalError(f"the thread pool's IR has no function {name} to rename")
    module_ref = llvm.parse_assembly(text)
    module_ref.verify()
    machine = llvm.Target.from_triple(llvm.get_process_triple()).create_target_machine(
        cpu=target.cpu, features=target.features, opt=3, reloc="pic", codemodel="default")
    module_ref.data_layout = str(machine.target_data)
    builder = llvm.create_pass_builder(machine, llvm.PipelineTuningOptions(speed_level=2))
    builder.getModulePassManager().run(module_ref, builder)
    return machine.emit_object(module_ref)


def weights_assembly(blob_path: Path, symbol: str, align: int = 64) -> str:
    """GNU assembler text defining ``symbol`` (hidden) as the bytes of ``blob_path`` in ``.rodata``."""
    path = str(blob_path).replace("\\", "\\\\").replace('"', '\\"')
    return (f'\t.section .rodata.{symbol},"a"\n\t.balign {align}\n\t.globl {symbol}\n'
            f'\t.hidden {symbol}\n\t.type {symbol}, @object\n{symbol}:\n\t.incbin "{path}"\n'
            f'\t.byte 0\n\t.size {symbol}, . - {symbol}\n\t.section .note.GNU-stack,"",@progbits\n')


def version_script(exported: Iterable[str]) -> str:
    """A linker version script exporting exactly ``exported``."""
    names = "".join(f"    {name};\n" for name in exported)
    return f"{{\n  global:\n{names}  local:\n    *;\n}};\n"


def link_shared(output: Path, sources: Sequence[Path], objects: Sequence[Path], exported: Sequence[str],
                workdir: Path, cc: Optional[str] = None) -> None:
    """Compile ``sources`` (C / assembler) and link them with ``objects`` into the shared library
    ``output``, exporting only ``exported``; needs nothing at run time but libc, libm and pthread.

    The kernels' objects are JIT code (absolute addresses, not position-independent), so the
    library has text relocations, resolved once when it is loaded (``-z notext``)."""
    compiler = find_c_compiler(cc)
    script = workdir / "exports.map"
    script.write_text(version_script(exported))
    cmd: List[str] = [*compiler, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-o", str(output),
                      *map(str, sources), *map(str, objects), f"-Wl,--version-script={script}",
                      "-Wl,-z,notext", "-Wl,-z,defs", "-Wl,-z,noexecstack", "-lm", "-lpthread"]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, cwd=workdir)
    except OSError as exc:
        raise BuildError(f"could not run the C compiler {compiler[0]!r}: {exc}; {COMPILER_HINT}") from None
    if proc.returncode != 0:
        raise BuildError(f"linking {output.name} with {compiler[0]} failed (exit {proc.returncode}):\n"
                         f"{proc.stderr.strip()[-4000:]}\n  command: {' '.join(cmd)}")
