"""One shared library for several x86-64 levels: each level's build of the network inside, the first
one this CPU runs taken when the first handle is created (as onnxruntime's MLAS dispatches by CPUID).

``export_levels([exe_v4, exe_v3], "model.so")`` writes ``model.so`` and ``model.h`` with the C API of
``export.py``.  Each level is the network compiled for one target (its own kernels, runner, thread pool,
memory plan and packed weights: the blocked layout and weight blocks follow the vector width), made
into one relocatable object whose only global symbols are its API functions under a level prefix
(``lw_l0_model_create`` ...: ``cc -r``, then ``objcopy --keep-global-symbols``), so the levels'
kernels, pools and weights never meet.  A small dispatcher exports the plain API: it tests each
level's instruction sets (``__builtin_cpu_supports``, ``backends/export.py``'s ``cpu_check``), most
capable first, and forwards every call to the level chosen; ``lw_model_target`` says which.  A CPU
that runs no level gets ``LW_ERR_CPU`` from create, naming what each level needs.

Each level runs exactly as a library exported for it alone (the same objects; one call through the
dispatcher per API call).  The library holds every level's weights (packed per level).
"""
from __future__ import annotations

import shutil
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

from ...backends.c_text import c_include_name, c_string
from ...backends.export import (check_exported_names, cpu_check, find_c_compiler, link_shared, linked_object,
                                run_tool, target_description)
from ...backends.output_file import replacing, write_text
from ...errors import ArgumentError, BuildError
from ...target import host_target
from .export import API_FUNCTIONS, API_SIGNATURES, header_text, source_text, weights_source

def level_order(executables) -> list:
    """The executables most capable first: a level whose instruction sets include another's comes
    before it (a v4 build before a v3 one), the order given otherwise."""
    order = list(executables)
    for i in range(len(order)):
        for j in range(i + 1, len(order)):
            mine, theirs = order[i].target.enabled_features(), order[j].target.enabled_features()
            if mine < theirs:
                order[i], order[j] = order[j], order[i]
    return order


def check_levels(executables) -> None:
    """An ``ArgumentError`` unless ``executables`` are builds of one network for distinct x86-64 CPU
    levels that this machine can link (every kernel's LLVM IR at hand, as after ``lw.compile``)."""
    if len(executables) < 2:
        raise ArgumentError("export_library: levels= takes the builds of the network for other CPUs (lw.compile(graph, "
                            "target=...)); with none, export the executable alone")
    for exe in executables:
        if getattr(exe.target, "kind", None) != "llvm" or exe.target.arch != "x86_64":
            raise ArgumentError(f"export_library: levels are x86-64 CPU builds (picked by what the CPU has); "
                                f"got one for {exe.target}")
        if exe.kernel_ir is None:
            raise ArgumentError("export_library: a level loaded from a .lwx has no LLVM IR to link; compile the "
                                "network for that target instead (lw.compile(graph, target=...))")
    check_one_network(executables, "export_library")
    if host_target().arch != "x86_64":
        raise ArgumentError("export_library: a library of several x86-64 levels is linked on an x86-64 machine")


def check_one_network(builds, what: str) -> None:
    """An ``ArgumentError`` (from ``what``) unless ``builds`` are one network (the same inputs and outputs)
    built for distinct CPU targets."""
    first = builds[0]
    for build in builds[1:]:
        if (build.inputs, build.outputs) != (first.inputs, first.outputs):
            raise ArgumentError(f"{what}: the levels are not one network: inputs/outputs {first.inputs} -> "
                                f"{first.outputs} against {build.inputs} -> {build.outputs}")
    keys = [build.target.key() for build in builds]
    if len(set(keys)) != len(keys):
        raise ArgumentError(f"{what}: two levels are built for the same CPU ({', '.join(keys)})")


def export_levels(executables: Sequence, path, prefix: str = "lw_", cc: Optional[str] = None) -> Path:
    """Write one library holding every build in ``executables`` (see the module docstring) and its header
    beside it; returns the library's path."""
    check_levels(executables)
    levels = level_order(executables)
    path = Path(path)
    compiler = find_c_compiler(cc)
    objcopy = shutil.which("objcopy")
    if objcopy is None:
        raise BuildError("export_library: a library of several levels needs objcopy (GNU binutils, which the C "
                         "compiler's linker comes with): install binutils")
    exported = [prefix + name for name in API_FUNCTIONS]
    header = path.with_suffix(".h")
    c_include_name(header.name, "export_library")
    names = [target_description(exe.target) for exe in levels]
    cpu_doc = ("one build per CPU level, the first this CPU runs taken at create: " + ", ".join(names))
    weights_doc = ("embedded, read-only, one copy per level (packed for its vector width): "
                   + " + ".join(str(exe.weights.nbytes) for exe in levels) + " bytes")
    header_body = header_text(levels[0], prefix, header.name, path.name, "embed", cpu_doc=cpu_doc,
                              weights_doc=weights_doc)
    with tempfile.TemporaryDirectory(prefix="loopweave-export-") as tmp:
        work = Path(tmp)
        (work / header.name).write_text(header_body)
        objects = []
        for k, exe in enumerate(levels):
            level_prefix = f"{prefix}l{k}_"
            check_exported_names([level_prefix + n for n in API_FUNCTIONS], [*exe.kernels, exe.runner_symbol])
            objects.append(_level_object(exe, level_prefix, work / f"level{k}", compiler, objcopy))
        (work / "dispatch.c").write_text(dispatch_source(levels, prefix, header.name))
        with replacing(path) as partial:
            link_shared(partial, [work / "dispatch.c"], objects, exported, work, cc, pic=True, soname=path.name)
    write_text(header, header_body)
    return path


def _level_object(exe, level_prefix: str, work: Path, compiler: List[str], objcopy: str) -> Path:
    """One level as a relocatable object whose only globals are its API functions (``level_prefix``...)."""
    work.mkdir()
    header = f"{level_prefix}model.h"
    (work / header).write_text(header_text(exe, level_prefix, header, "level.o", "embed"))
    (work / "api.c").write_text(source_text(exe, level_prefix, header, "embed"))
    (work / "model.o").write_bytes(linked_object(exe.target, lambda: [*exe.kernels_llvm_ir().values(), exe.runner_ir],
                                                 cache_key=exe.runner_symbol))
    weights = weights_source(exe, work)
    _run([*compiler, "-c", "-fPIC", "-O2", "-fvisibility=hidden", "-o", "api.o", "api.c"], work)
    _run([*compiler, "-c", "-o", "weights.o", weights.name], work)
    _run([*compiler, "-r", "-nostdlib", "-o", "level.o", "api.o", "weights.o", "model.o"], work)
    (work / "globals.txt").write_text("".join(level_prefix + n + "\n" for n in API_FUNCTIONS))
    _run([objcopy, "--keep-global-symbols=globals.txt", "level.o"], work)
    return work / "level.o"


def _run(cmd: List[str], cwd: Path) -> None:
    run_tool(cmd, cwd, f"export_library: building a level ({Path(cmd[0]).name})", repr(cmd[0]))


def dispatch_source(levels, prefix: str, header_file: str) -> str:
    """The C of the dispatcher: the plain API, each call forwarded to the level this CPU runs."""
    conditions, needs = [], []
    for exe in levels:
        condition, features = cpu_check(exe.target)
        conditions.append(condition)
        needs.append(f"{target_description(exe.target)}: {' '.join(features) or 'x86-64'}")
    lines = ['#include <stdint.h>', '#include <stdio.h>', f'#include "{header_file}"',
             '#define EXPORT __attribute__((visibility("default")))', ""]
    for k in range(len(levels)):
        for ret, name, params, _, _ in API_SIGNATURES:
            level_params = params.replace("LWPmodel **out", "void *out").replace("LWPmodel", "void")
            lines.append(f"{ret} {prefix}l{k}_{name}({level_params});".replace("* ", "*"))
    lines += ["", "static int chosen = -2;   /* -2: not yet tested; -1: this CPU runs no level */",
              "static __thread char error[1024];", "",
              "static int level(void) {",
              "    int found = -2;",
              "    if ((found = __atomic_load_n(&chosen, __ATOMIC_ACQUIRE)) != -2) return found;",
              "    __builtin_cpu_init();"]
    for k, condition in enumerate(conditions):
        lines.append(f"    {'if' if k == 0 else 'else if'} ({condition}) found = {k};")
    lines += ["    else found = -1;", "    __atomic_store_n(&chosen, found, __ATOMIC_RELEASE);", "    return found;",
              "}", "",
              "static void no_level(const char *fn) {",
              f'    snprintf(error, sizeof error, "%s: this CPU runs none of the builds in this library (%s)", fn, '
              f'{c_string("; ".join(needs))});',
              "}", ""]
    for ret, name, params, args, on_failure in API_SIGNATURES:
        lines.append(f"EXPORT {ret} {prefix}{name}({params}) {{".replace("* ", "*").replace("LWPmodel",
                                                                                              f"{prefix}model"))
        lines.append("    switch (level()) {")
        for k in range(len(levels)):
            call = f"{prefix}l{k}_{name}({args})"
            lines.append(f"    case {k}: {'return ' if ret != 'void' else ''}{call};{' return;' if ret == 'void' else ''}")
        lines.append("    }")
        if name == "last_error":
            lines.append("    return error;")
        elif name == "model_create":
            lines += ["    if (out != NULL) *out = NULL;", f'    no_level("{prefix}model_create");',
                      f"    return {prefix.upper()}ERR_CPU;"]
        elif ret != "void":
            lines += [f'    no_level("{prefix}{name}");',
                      f"    return {on_failure.replace('LWPU_', prefix.upper())};"]
        lines += ["}", ""]
    return "\n".join(lines)
