"""``Module.export_library``: one kernel from ``lw.build`` as a shared library with a C function.

``f.export_library("matmul.so", prefix="lw_")`` writes ``matmul.so`` and ``matmul.h``. The header
declares, for a kernel named ``matmul`` with arguments ``A, B, C`` and size variables ``n, m``::

    int lw_matmul(const float *A, const float *B, float *C, int64_t n, int64_t m);
    int lw_set_num_threads(int num_threads);    /* 0 = every core (the default) */
    const char *lw_last_error(void);

Inputs are ``const``, outputs writable; every array is dense, C order, of the shape the header's
comment gives (symbolic sizes are the trailing ``int64_t`` parameters, in the kernel's order).
A null pointer, a negative size, a bad thread count, or an index out of range read from data
(``checks="bounds"`` or a Gather-like kernel) returns a negative status with a thread-local
message. The library holds the kernel's object code and its own thread pool; it needs only
libc, libm and pthread.
"""
from __future__ import annotations

import re
import tempfile
from pathlib import Path
from typing import Dict, List, Optional

from ..errors import ArgumentError
from .c_text import c_comment, c_identifier, c_include_name
from .output_file import replacing, write_bytes, write_text
from .export import (C_FAIL_AND_CORES, POOL_SET_THREADS, check_exported_names, check_output_kind, cross_compiler,
                     link_shared, linked_object, target_description)
from .llvm.thread_pool import MAX_THREADS

_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
C_TYPES: Dict[str, str] = {
    "float32": "float", "float64": "double", "float16": "uint16_t", "bfloat16": "uint16_t",
    "int8": "int8_t", "int16": "int16_t", "int32": "int32_t", "int64": "int64_t",
    "uint8": "uint8_t", "uint16": "uint16_t", "uint32": "uint32_t", "uint64": "uint64_t", "bool": "uint8_t",
}
_C_KEYWORDS = frozenset(
    "auto break case char const continue default do double else enum extern float for goto if inline int "
    "long register restrict return short signed sizeof static struct switch typedef union unsigned void "
    "volatile while bool true false _Bool int64_t errno".split())

_HEADER = r"""/* HEADER_NAME: C API of the loopweave kernel 'KERNEL_NAME' (generated; do not edit).
 *
 * Link with the library (cc app.c ./LIBRARY_NAME); at run time it needs only libc, libm and pthread.
 * Compiled for CPU 'CPU_NAME': run it on the same kind of CPU.  A library is native code: load only
 * libraries you trust.
 *
 * Arrays are dense, C order; float16 / bfloat16 are passed as their 16-bit patterns, bool as bytes.
SHAPES_DOC *
 * Returns 0, or a negative LWPU_ERR_* status; LWPlast_error() then has the message (thread-local).
 */
#ifndef LWPU_GUARD_H_INCLUDED
#define LWPU_GUARD_H_INCLUDED
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define LWPU_OK 0
#define LWPU_ERR_NULL (-1)      /* an array pointer is NULL */
#define LWPU_ERR_SIZE (-2)      /* a size argument is negative */
#define LWPU_ERR_THREADS (-3)   /* num_threads is not in [0, MAX_THREADS_VALUE] */
#define LWPU_ERR_DATA (-6)      /* an index read from data is out of range */

int LWPFUNCTION(SIGNATURE);
int LWPset_num_threads(int num_threads);    /* threads for later calls: 0 = every core (default), 1 .. MAX_THREADS_VALUE */
const char *LWPlast_error(void);           /* "" when this thread had no failure */

#ifdef __cplusplus
}
#endif
#endif
"""

_SOURCE = r"""#define _GNU_SOURCE
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <unistd.h>
#include "HEADER_FILE"

#define EXPORT __attribute__((visibility("default")))
#define MAX_THREADS MAX_THREADS_VALUE

extern void KERNEL_SYMBOL(void **buffers, int64_t *sizes, int64_t *err);
extern void POOL_SET_THREADS(int32_t n);

static __thread char last_error[1024];
static int threads_wanted = 0;   /* 0: every core */

""" + C_FAIL_AND_CORES + r"""
EXPORT int LWPset_num_threads(int num_threads) {
    if (num_threads < 0 || num_threads > MAX_THREADS)
        return fail(LWPU_ERR_THREADS, "LWPset_num_threads: num_threads must be 0 (all cores) or 1 to %d, got %d",
                    MAX_THREADS, num_threads);
    __atomic_store_n(&threads_wanted, num_threads, __ATOMIC_RELAXED);
    return LWPU_OK;
}

EXPORT int LWPFUNCTION(SIGNATURE) {
    void *buffers[NUM_BUFFERS];
    int64_t sizes[NUM_SIZES];
    int64_t err[4] = {0, 0, 0, 0};
    int threads;
CHECKS
    threads = __atomic_load_n(&threads_wanted, __ATOMIC_RELAXED);
    POOL_SET_THREADS(threads ? threads : all_cores());
    KERNEL_SYMBOL(buffers, sizes, err);
    if (err[0] != 0) {
        const char *message = (const char *)(intptr_t)err[0];
        if (message[0] == '1')
            return fail(LWPU_ERR_DATA, "LWPFUNCTION: index %lld is out of range for %s, of size %lld (valid: %lld to "
                        "%lld, negative ones counting from the end)", (long long)err[1], message + 1,
                        (long long)err[2], -(long long)err[2], (long long)err[2] - 1);
        return fail(LWPU_ERR_DATA, "LWPFUNCTION: index %lld is out of range for %s, of size %lld (valid: 0 to %lld)",
                    (long long)err[1], message + 1, (long long)err[2], (long long)err[2] - 1);
    }
    return LWPU_OK;
}
"""


def _identifier(name: str, taken: set) -> str:
    ident = re.sub(r"[^A-Za-z0-9_]", "_", name) or "arg"
    if ident[0].isdigit():
        ident = "_" + ident
    while ident in _C_KEYWORDS or ident in taken:
        ident += "_"
    taken.add(ident)
    return ident


def _fill(template: str, prefix: str, values: dict) -> str:
    table = dict(values, LWPU_=prefix.upper(), LWP=prefix)
    pattern = re.compile("|".join(re.escape(k) for k in sorted(table, key=len, reverse=True)))
    return pattern.sub(lambda m: table[m.group(0)], template)


def kernel_c_parts(module, prefix: str, header_name: str, library_name: str):
    """``(header text, C source text)`` of ``module``'s library."""
    taken: set = set()
    params = []
    for p in module.params:
        if p.dtype not in C_TYPES:
            raise ArgumentError(f"export_library: argument {p.name!r} has dtype {p.dtype}, which has no C type here")
        params.append((p, _identifier(p.name, taken)))
    sizes = [(name, _identifier(name, taken)) for name in module.size_names]
    args = [f"{'' if p.is_output else 'const '}{C_TYPES[p.dtype]} *{ident}" for p, ident in params]
    args += [f"int64_t {ident}" for _, ident in sizes]
    signature = ", ".join(args) or "void"
    doc = "".join(f" *   {ident}: {p.dtype}[{c_comment(', '.join(map(str, p.shape)))}]"
                  f"{' (output)' if p.is_output else ''}\n" for p, ident in params)
    if sizes:
        doc += (f" *   sizes: {', '.join(ident for _, ident in sizes)} (int64_t, >= 0; the arrays must have the shapes "
            f"above for them: only NULL and negative sizes are checked)\n")
    function = _identifier(module.name, set())
    checks = []
    for k, (p, ident) in enumerate(params):
        checks.append(f"    if ({ident} == NULL) return fail(LWPU_ERR_NULL, \"LWPFUNCTION: {ident} is NULL\");\n"
                      f"    buffers[{k}] = (void *){ident};")
    for k, (_, ident) in enumerate(sizes):
        checks.append(f"    if ({ident} < 0) return fail(LWPU_ERR_SIZE, \"LWPFUNCTION: size {ident} must be >= 0, "
                      f"got %lld\", (long long){ident});\n    sizes[{k}] = {ident};")
    if not params:
        checks.append("    buffers[0] = NULL;")
    if not sizes:
        checks.append("    sizes[0] = 0;")
    values = {"HEADER_NAME": c_comment(header_name), "LIBRARY_NAME": c_comment(library_name),
              "KERNEL_NAME": c_comment(module.name), "CPU_NAME": c_comment(target_description(module.target)),
              "SHAPES_DOC": doc, "SIGNATURE": signature, "FUNCTION": function,
              "MAX_THREADS_VALUE": str(MAX_THREADS), "GUARD": re.sub(r"\W", "_", header_name, flags=re.ASCII).upper(),
              "HEADER_FILE": c_include_name(header_name, "export_library"),
              "KERNEL_SYMBOL": c_identifier(module.symbol, "export_library: the kernel's symbol"),
              "NUM_BUFFERS": str(max(1, len(params))), "NUM_SIZES": str(max(1, len(sizes))),
              "POOL_SET_THREADS": POOL_SET_THREADS}
    values["CHECKS"] = _fill("\n".join(checks), prefix, values)
    exported = [prefix + function, prefix + "set_num_threads", prefix + "last_error"]
    if len(set(exported)) != 3:
        raise ArgumentError(f"export_library: the kernel's name {module.name!r} clashes with the library's "
                            f"own functions; build it under another name")
    check_exported_names(exported, [module.symbol])
    return _fill(_HEADER, prefix, values), _fill(_SOURCE, prefix, values), exported


def export_kernel_library(module, path, prefix: str = "lw_", cc: Optional[str] = None) -> Path:
    """Write ``module`` (a CPU kernel from ``lw.build``) as the shared library ``path`` and its
    header beside it (``k.so`` -> ``k.h``); returns the library's path.

    A kernel built for another CPU (``target="llvm -mtriple=... -mcpu=..."``) is written as one
    position-independent object ``k.o`` for that CPU (the kernel and the pool) with ``k.h`` and the
    C source ``k.c`` of its API, or linked into ``k.so`` by a C compiler for that CPU (``cc=``)."""
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ArgumentError(f"export_library: prefix must be the start of a C identifier (letters, digits, "
                            f"'_', not starting with a digit), got {prefix!r}")
    obj = getattr(module, "object_code", None)
    if getattr(module.target, "kind", None) != "llvm" or obj is None:
        raise ArgumentError("export_library: only CPU (llvm) kernels built by lw.build can be exported")
    path = Path(path)
    if not path.parent.is_dir():
        raise ArgumentError(f"export_library: the folder {str(path.parent)!r} does not exist")
    cross = not module.target.runs_here()
    as_object = check_output_kind(path, cross, cc)
    compiler = cross_compiler(cc, module.target) if cross and not as_object else None
    header = path.with_suffix(".h")
    linked_as = f"{path.with_suffix('.c').name} ./{path.name}" if as_object else path.name
    header_body, source, exported = kernel_c_parts(module, prefix, header.name, linked_as)
    with tempfile.TemporaryDirectory(prefix="loopweave-export-") as tmp:
        work = Path(tmp)
        (work / header.name).write_text(header_body)
        (work / "api.c").write_text(source)
        # the kernel's optimised IR and the pool, as one position-independent object (no text relocations)
        objects = [work / "kernel.o"]
        objects[0].write_bytes(linked_object(module.target, lambda: [module.get_source("ll-opt")],
                                             cache_key=module.symbol))
        if as_object:
            write_bytes(path, objects[0].read_bytes())
            write_text(path.with_suffix(".c"), source)
        else:
            with replacing(path) as partial:
                link_shared(partial, [work / "api.c"], objects, exported, work, cc, compiler=compiler, pic=True,
                            soname=path.name)
    write_text(header, header_body)
    return path
