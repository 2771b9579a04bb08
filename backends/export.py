"""Link compiled objects into one shared library with the system C compiler.

Generic helpers for ``export_library`` (the network's C API is generated in
``nn_ops/network/export.py``):

* ``find_c_compiler()``: ``$CC`` or ``cc`` / ``gcc`` / ``clang`` on the PATH; none is a
  ``BuildError`` that says what to install.
* ``linked_object(target, ir_texts, ...)``: the kernels' and the runner's LLVM IR, the native thread
  pool (``llvm/thread_pool.py``; so the library carries its own pool) and, for another CPU, the
  weights, linked into one position-independent object for ``target`` (its triple), every symbol
  hidden: a library without text relocations, or the ``.o`` of a cross-compile.
* ``thread_pool_object(target)``: the pool alone as position-independent object code (for a loaded
  ``.lwx``, whose kernels are JIT objects only).
* ``cross_compiler(cc, target)``: the C compiler that links for another CPU, checked to build for
  its architecture (``cc -dumpmachine``); a missing one says what to install.
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
from typing import Callable, Iterable, List, Optional, Sequence, Tuple

from ..errors import ArgumentError, BuildError, InternalError
from .search_path import absolute_path

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
    ``CC="ccache gcc"``): ``cc`` if given, else ``$CC``, else cc / gcc / clang on the PATH's absolute
    folders (``search_path``); a path with a folder in it is taken as given."""
    given = cc or os.environ.get("CC")
    candidates = [shlex.split(given)] if given else [["cc"], ["gcc"], ["clang"]]
    for words in candidates:
        found = shutil.which(words[0], path=absolute_path()) if words else None
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


def thread_pool_ir(target) -> str:
    """The native thread pool's LLVM IR for ``target`` (its triple, its futex call), optimised;
    ``lw_set_num_threads`` is ``POOL_SET_THREADS`` here."""
    import re
    from llvmlite import binding as llvm
    from .llvm import thread_pool
    from .llvm.jit import cross_target_machine
    machine = cross_target_machine(target)
    text = str(thread_pool.build_module(target.arch, machine.triple))
    for name, renamed in (("lw_set_num_threads", POOL_SET_THREADS),
                          ("lw_get_num_threads", "loopweave_export_pool_get_num_threads")):
        text = re.sub(rf'@"?{name}"?(?=\W)', f'@"{renamed}"', text)
        if renamed not in text:
            raise InternalError(f"the thread pool's IR has no function {name} to rename")
    module_ref = llvm.parse_assembly(text, context=llvm.create_context())
    module_ref.verify()
    module_ref.data_layout = str(machine.target_data)
    builder = llvm.create_pass_builder(machine, llvm.PipelineTuningOptions(speed_level=2))
    builder.getModulePassManager().run(module_ref, builder)
    return str(module_ref)


def thread_pool_object(target) -> bytes:
    """``lw_parallel_for`` and its pool as position-independent object code for ``target``'s CPU;
    ``lw_set_num_threads`` is ``POOL_SET_THREADS`` here."""
    from llvmlite import binding as llvm
    from .llvm.jit import cross_target_machine
    return cross_target_machine(target).emit_object(llvm.parse_assembly(thread_pool_ir(target)))


def weights_ir(blob, symbol: str) -> str:
    """LLVM IR defining ``symbol`` as the bytes of ``blob`` (and a zero byte after them), read-only,
    64-byte aligned.  For a cross-compile, whose object LLVM writes alone: its assembler cannot take
    the ``.incbin`` of ``weights_assembly`` for a foreign CPU (llvmlite initialises only the host's
    assembly parser).  Every byte is written as ``\\XX``: numpy makes the text in one pass."""
    import numpy as np
    raw = np.append(np.ascontiguousarray(blob).view(np.uint8).ravel(), np.uint8(0))
    digits = np.frombuffer(b"0123456789ABCDEF", np.uint8)
    text = np.empty((raw.size, 3), np.uint8)
    text[:, 0] = ord("\\")
    text[:, 1] = digits[raw >> 4]
    text[:, 2] = digits[raw & 15]
    return (f'@{symbol} = hidden constant [{raw.size} x i8] c"' + text.tobytes().decode("ascii")
            + '", section ".rodata.lw_weights", align 64\n')


def linked_object(target, ir_texts: Callable[[], Sequence[str]], weights=None, weights_symbol: str = "",
                  cache_key: str = "") -> bytes:
    """One position-independent object for ``target`` from LLVM IR modules (``ir_texts()``: kernels,
    runner), the thread pool and, if given, the weights: every symbol in it is hidden, so a library made
    from it exports only what its C API file exports.  Without weights, the object cache keeps it
    under ``cache_key`` (a name that hashes the kernels and the target, e.g. the runner's symbol), so a
    second export skips even making the IR."""
    from llvmlite import binding as llvm
    from .llvm import jit
    machine = jit.cross_target_machine(target)
    cache_symbol = f"lw_export_{cache_key}_v1" if cache_key and weights is None else ""
    cached = jit.cached_object(cache_symbol, target) if cache_symbol else None
    if cached is not None:
        return cached
    texts = [thread_pool_ir(target), *ir_texts()]
    if weights is not None:
        texts.append(weights_ir(weights, weights_symbol))
    context = llvm.create_context()
    module_ref = None
    for text in texts:
        part = llvm.parse_assembly(text, context=context)
        part.triple = machine.triple
        part.data_layout = str(machine.target_data)
        if module_ref is None:
            module_ref = part
        else:
            module_ref.link_in(part)
    module_ref.verify()
    for value in [*module_ref.functions, *module_ref.global_variables]:
        if not value.is_declaration and value.linkage.name not in ("internal", "private"):
            value.visibility = "hidden"
    obj = machine.emit_object(module_ref)
    if cache_symbol:
        jit.store_object(cache_symbol, target, obj)
    return obj


def check_output_kind(path: Path, cross: bool, cc) -> bool:
    """Whether ``path`` asks for an object file (``.o``: a cross-compile only, and without ``cc``)."""
    if path.suffix != ".o":
        return False
    if not cross:
        raise ArgumentError(f"export_library: {path.name!r} names an object file, which is written for a "
                            f"cross-compiled network or kernel (target='llvm -mtriple=... -mcpu=...'); for this "
                            f"machine, export a shared library (e.g. {path.with_suffix('.so').name!r})")
    if cc is not None:
        raise ArgumentError(f"export_library: cc= links a shared library, but {path.name!r} names an object file; "
                            f"give a path ending in .so to link with {cc!r}")
    return True


#: x86 features a generated library checks with ``__builtin_cpu_supports`` before it runs: the ones that
#: tell the x86-64 levels and the vector extensions apart (the last three need gcc 10, 11 and 12: a library
#: for a CPU with them is compiled by one at least that new)
CHECKED_X86_FEATURES = ("sse3", "ssse3", "sse4.1", "sse4.2", "popcnt", "avx", "avx2", "fma", "bmi", "bmi2",
                        "avx512f", "avx512cd", "avx512dq", "avx512bw", "avx512vl", "avx512vnni", "avx512vbmi",
                        "avx512vbmi2", "avx512ifma", "avx512bitalg", "avx512vpopcntdq", "gfni", "vpclmulqdq",
                        "avx512bf16", "avxvnni", "avx512fp16")


def cpu_check(target) -> Tuple[str, List[str]]:
    """The C condition that this process's CPU runs ``target``'s code (``__builtin_cpu_supports`` of
    each checked feature it enables), and those features; ``("1", [])`` for a target with nothing to
    check (not x86-64, or no feature beyond the base).  A library tests it at create, so code for a
    wider CPU fails with a message instead of an illegal instruction."""
    if target.arch != "x86_64":
        return "1", []
    features = [f for f in CHECKED_X86_FEATURES if f in target.enabled_features()]
    if not features:
        return "1", []
    return " && ".join(f'__builtin_cpu_supports("{f}")' for f in features), features


def target_description(target) -> str:
    """The CPU named in a generated header: ``znver4``, or ``neoverse-n1 (aarch64-linux-gnu)``."""
    return f"{target.cpu} ({target.triple})" if target.triple else target.cpu


def compiler_machine(compiler: Sequence[str]) -> str:
    """The architecture a C compiler builds for (``cc -dumpmachine``: ``aarch64-linux-gnu`` ->
    ``aarch64``), or "" when it does not say."""
    try:
        proc = subprocess.run([*compiler, "-dumpmachine"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired):
        return ""
    words = proc.stdout.strip().split("-") if proc.returncode == 0 else []
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(words[0], words[0]) if words and words[0] else ""


def cross_compiler(cc: Optional[str], target) -> List[str]:
    """The C compiler that links a cross-compiled library: ``cc`` (by default the system's, ``$CC`` or
    cc, when the target has this machine's architecture), checked to build for ``target``'s."""
    from ..target import host_target
    arch = target.arch
    hint = (f"install a cross compiler for {arch} (Debian/Ubuntu: 'apt-get install gcc-{arch.replace('_', '-')}-"
            f"linux-gnu', which gives {arch}-linux-gnu-gcc) and pass it with cc= (CLI: --cc)")
    if cc is None and arch == host_target().arch:
        compiler = find_c_compiler()
        built_for = compiler_machine(compiler)
        if built_for and built_for != arch:
            raise BuildError(f"the C compiler {compiler[0]!r} builds for {built_for}, not for {arch}; {hint}")
        return compiler
    if cc is None:
        raise BuildError(f"this network or kernel was compiled for {target.triple or arch} (cpu {target.cpu}): "
                         f"a shared library for it needs a C compiler for that machine; {hint}, or export an "
                         f"object file (a path ending in .o) and link it there")
    words = shlex.split(cc)
    found = shutil.which(words[0]) if words else None
    if not found:
        raise BuildError(f"the C compiler {cc!r} was not found; {hint}")
    compiler = [found, *words[1:]]
    built_for = compiler_machine(compiler)
    if built_for and built_for != arch:
        raise BuildError(f"the C compiler {cc!r} builds for {built_for}, not for {arch} (the target's machine); "
                         f"{hint}")
    return compiler


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
                workdir: Path, cc: Optional[str] = None, compiler: Optional[Sequence[str]] = None,
                pic: bool = False, soname: Optional[str] = None) -> None:
    """Compile ``sources`` (C / assembler) and link them with ``objects`` into the shared library
    ``output``, exporting only ``exported``; needs nothing at run time but libc, libm and pthread.

    The compiler runs in ``workdir``, so ``output`` (and every path given) is made absolute first: a
    relative one names a file under the caller's working directory.  The library's SONAME is
    ``soname``, by default ``output``'s file name (callers that link to a temporary file and move it
    into place pass the final name): a program linked against it records ``NEEDED NAME``, found
    through its rpath (``-Wl,-rpath,'$ORIGIN'``) or ``LD_LIBRARY_PATH``, not the path it was linked with.

    The kernels' objects are JIT code (absolute addresses, not position-independent), so the
    library has text relocations, resolved once when it is loaded (``-z notext``); with ``pic``
    (every object position-independent: a cross-compile) a text relocation is a link error
    (``-z text``).  ``compiler`` (words of a command) overrides ``cc`` / ``$CC``."""
    compiler = list(compiler) if compiler else find_c_compiler(cc)
    output = Path(output).absolute()
    workdir = Path(workdir).absolute()
    soname = soname or output.name
    script = workdir / "exports.map"
    script.write_text(version_script(exported))
    cmd: List[str] = [*compiler, "-shared", "-fPIC", "-O2", "-fvisibility=hidden", "-o", str(output),
                      *(str(Path(p).absolute()) for p in sources), *(str(Path(p).absolute()) for p in objects),
                      f"-Wl,--version-script={script}", "-Xlinker", "-soname", "-Xlinker", soname,
                      "-Wl,-z,text" if pic else "-Wl,-z,notext", "-Wl,-z,defs", "-Wl,-z,noexecstack", "-lm",
                      "-lpthread"]
    run_tool(cmd, workdir, f"linking {output.name} with {compiler[0]}", f"the C compiler {compiler[0]!r}",
             COMPILER_HINT)


def run_tool(cmd: Sequence[str], cwd: Path, doing: str, tool: str, hint: str = "") -> None:
    """Run a build tool in ``cwd``; a ``BuildError`` saying what failed (``doing``), with its messages
    and the command, when it cannot start or exits with an error."""
    try:
        proc = subprocess.run(list(cmd), capture_output=True, text=True, cwd=cwd)
    except OSError as exc:
        raise BuildError(f"could not run {tool}: {exc}" + (f"; {hint}" if hint else "")) from None
    if proc.returncode != 0:
        raise BuildError(f"{doing} failed (exit {proc.returncode}):\n{proc.stderr.strip()[-4000:]}\n"
                         f"  command: {' '.join(cmd)}")
