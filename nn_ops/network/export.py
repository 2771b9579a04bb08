"""``Executable.export_library``: a compiled network as one shared library with a C API.

``export_library(exe, "model.so", prefix="lw_")`` writes ``model.so`` and ``model.h`` beside it.
The library holds the kernels' object code, the runner (which calls them by symbol; the linker
resolves them), the native thread pool, the memory plan (the arena size; offsets are constants in
the runner) and the weights, read-only in ``.rodata`` (``.incbin``, see ``backends/export.py``).
A generated C file implements the API below; it is compiled and linked with the system C compiler.
At run time the library needs only libc, libm and pthread.

The API (``lw_`` is the prefix; every exported symbol, type and status macro carries it, and nothing
else is exported)::

    int lw_model_create(lw_model **out, int num_threads);      /* 0 ok; num_threads 0 = all cores */
    int lw_model_num_inputs(const lw_model *m);  int lw_model_num_outputs(const lw_model *m);
    const char *lw_model_input_name(const lw_model *m, int i);  /* and output_name, NULL on error */
    const char *lw_model_input_dtype(const lw_model *m, int i); /* "float32", ...; and output_dtype */
    int lw_model_input_shape(const lw_model *m, int i, int64_t *dims, int max_rank); /* rank, or < 0 */
    int lw_model_output_shape(const lw_model *m, int i, int64_t *dims, int max_rank);
    int lw_model_run(lw_model *m, const void *const *inputs, void *const *outputs);
    void lw_model_destroy(lw_model *m);
    const char *lw_model_target(const lw_model *m);           /* the CPU code this handle runs */
    const char *lw_last_error(void);

``create`` checks that this CPU has the instruction sets the code uses (``LW_ERR_CPU`` otherwise,
naming them), and ``export_library(..., levels=[...])`` puts several builds of the network in one
library, ``create`` taking the first this CPU runs (``export_levels.py``).

Every entry point checks what it can see: a null pointer, an index out of range, a bad thread count,
a ``dims`` array too short is a negative status (or NULL) and a thread-local message, never an abort;
so is an index read from the data out of range.  ``model_run`` takes bare pointers and cannot check
a buffer's size: each input and output buffer must hold its tensor whole (its shape's elements times
its dtype's size, as the query functions say); a shorter one is read or written past its end.

``params="side"`` leaves the weights out of the library: they go to ``model.params`` beside it (a
64-byte header: magic, version, size, a fingerprint of the weights; then the packed weights), and
``create`` maps that file read-only from the library's own folder (``dladdr``).  A missing file, one
of another size or with another header is ``ERR_PARAMS``, and so is a damaged one: the weights are
checked against a 64-bit checksum pair recorded in the header (``weights_checksum``).
"""
from __future__ import annotations

import hashlib
import re
import struct
import tempfile
from pathlib import Path
from typing import List, Optional, Sequence

import numpy as np

from ...backends.export import (C_FAIL_AND_CORES, POOL_SET_THREADS, check_exported_names, check_output_kind,
                               cpu_check, cross_compiler, link_shared, linked_object, target_description, thread_pool_object,
                               weights_assembly)
from ...backends.c_text import c_comment, c_identifier, c_include_name, c_string
from ...backends.output_file import replacing, replacing_file, write_bytes, write_text
from ...errors import ArgumentError
from ...backends.llvm.thread_pool import MAX_THREADS

#: the API's functions with their C types, ``LWP`` the prefix: (return type, name, parameters, the
#: parameters as arguments, what a caller that cannot run it returns: ``export_levels``' dispatcher)
API_SIGNATURES = (
    ("int", "model_create", "LWPmodel **out, int num_threads", "(void *)out, num_threads", None),
    ("int", "model_num_inputs", "const LWPmodel *m", "m", "LWPU_ERR_CPU"),
    ("int", "model_num_outputs", "const LWPmodel *m", "m", "LWPU_ERR_CPU"),
    ("const char *", "model_input_name", "const LWPmodel *m, int i", "m, i", "NULL"),
    ("const char *", "model_output_name", "const LWPmodel *m, int i", "m, i", "NULL"),
    ("const char *", "model_input_dtype", "const LWPmodel *m, int i", "m, i", "NULL"),
    ("const char *", "model_output_dtype", "const LWPmodel *m, int i", "m, i", "NULL"),
    ("int", "model_input_shape", "const LWPmodel *m, int i, int64_t *dims, int max_rank", "m, i, dims, max_rank",
     "LWPU_ERR_CPU"),
    ("int", "model_output_shape", "const LWPmodel *m, int i, int64_t *dims, int max_rank", "m, i, dims, max_rank",
     "LWPU_ERR_CPU"),
    ("int", "model_run", "LWPmodel *m, const void *const *inputs, void *const *outputs", "m, inputs, outputs",
     "LWPU_ERR_CPU"),
    ("void", "model_destroy", "LWPmodel *m", "m", ""),
    ("const char *", "model_target", "const LWPmodel *m", "m", "NULL"),
    ("const char *", "last_error", "void", "", None),
)
API_FUNCTIONS = tuple(name for _, name, *_ in API_SIGNATURES)
_PREFIX = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")
_WEIGHTS_SYMBOL = "lw_export_weights"
PARAMS_MAGIC = b"LWPARAMS"
PARAMS_VERSION = 1

_HEADER = r"""/* HEADER_NAME: C API of a network compiled by loopweave (generated; do not edit).
 *
 *   model: inputs  INPUTS_DOC
 *          outputs OUTPUTS_DOC
 *   compiled for CPU_NAME
 *   weights: WEIGHTS_DOC
 *
 * Link with the library (cc app.c ./LIBRARY_NAME); at run time it needs only libc, libm and pthread.
 * The library is native code: load only libraries you trust, as you would any other.
 *
 * Status: 0 is success; a negative LWPU_ERR_* code is a failure, and LWPlast_error() then returns
 * its message (thread-local, valid until this thread's next failing call).  No function aborts.
 * Tensors are dense, C order (row-major), of the dtype and shape queried below.  LWPmodel_run takes
 * bare pointers and cannot check a buffer's size: each must hold its whole tensor (the product of its
 * dims times its dtype's size); a shorter buffer is read or written past its end.
 * One handle runs one inference at a time (a second concurrent run on it is LWPU_ERR_BUSY); use one
 * handle per thread to run concurrently.
 */
#ifndef LWPU_MODEL_H_INCLUDED
#define LWPU_MODEL_H_INCLUDED
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define LWPU_OK 0
#define LWPU_ERR_NULL (-1)      /* a pointer argument is NULL */
#define LWPU_ERR_INDEX (-2)     /* an input / output index is out of range */
#define LWPU_ERR_THREADS (-3)   /* num_threads is not in [0, MAX_THREADS_VALUE] */
#define LWPU_ERR_NOMEM (-4)     /* out of memory */
#define LWPU_ERR_RANK (-5)      /* max_rank is smaller than the tensor's rank */
#define LWPU_ERR_DATA (-6)      /* an input value is out of range (e.g. a Gather index); see LWPlast_error() */
#define LWPU_ERR_PARAMS (-7)    /* the weights file (PARAMS_DOC) is missing or not this library's */
#define LWPU_ERR_BUSY (-8)      /* the handle is running on another thread (use one handle per thread) */
#define LWPU_ERR_CPU (-9)       /* this CPU lacks an instruction set the library's code needs */

typedef struct LWPmodel LWPmodel;

/* Create a handle; *out is set to it (NULL on failure).  num_threads: 0 = every core this process
 * may use, else 1 .. MAX_THREADS_VALUE. */
int LWPmodel_create(LWPmodel **out, int num_threads);
int LWPmodel_num_inputs(const LWPmodel *m);    /* count, or < 0 */
int LWPmodel_num_outputs(const LWPmodel *m);
const char *LWPmodel_input_name(const LWPmodel *m, int i);    /* NULL on error */
const char *LWPmodel_output_name(const LWPmodel *m, int i);
const char *LWPmodel_input_dtype(const LWPmodel *m, int i);   /* "float32", "int64", ...; NULL on error */
const char *LWPmodel_output_dtype(const LWPmodel *m, int i);
/* Write the dims into dims[0 .. rank-1] and return the rank, or < 0.  dims may be NULL when
 * max_rank is 0: then only the rank is returned. */
int LWPmodel_input_shape(const LWPmodel *m, int i, int64_t *dims, int max_rank);
int LWPmodel_output_shape(const LWPmodel *m, int i, int64_t *dims, int max_rank);
/* Run the network: inputs[k] / outputs[k] point to caller-owned buffers of input / output k
 * (read / written in place, nothing is copied), each holding the whole tensor (not checked: the
 * library cannot see a buffer's size).  0, or < 0 with a message. */
int LWPmodel_run(LWPmodel *m, const void *const *inputs, void *const *outputs);
void LWPmodel_destroy(LWPmodel *m);                    /* NULL is a no-op */
const char *LWPmodel_target(const LWPmodel *m);        /* the CPU the handle's code is for; NULL on error */
const char *LWPlast_error(void);                       /* "" when this thread had no failure */

#ifdef __cplusplus
}
#endif
#endif
"""

#: the C of ``check_index`` and the count, name and dtype getters of inputs and outputs, the same in
#: both libraries (a static network's and a compile-once one's: ``export_polymorphic.py``)
C_TENSOR_GETTERS = r"""static int check_index(const char *fn, const LWPmodel *m, int i, int count, const char *what) {
    if (m == NULL) return fail(LWPU_ERR_NULL, "%s: m is NULL", fn);
    if (i < 0 || i >= count)
        return fail(LWPU_ERR_INDEX, "%s: %s index %d is out of range (the model has %d %ss)", fn, what, i, count, what);
    return LWPU_OK;
}

EXPORT int LWPmodel_num_inputs(const LWPmodel *m) {
    if (m == NULL) return fail(LWPU_ERR_NULL, "LWPmodel_num_inputs: m is NULL");
    return NUM_INPUTS;
}

EXPORT int LWPmodel_num_outputs(const LWPmodel *m) {
    if (m == NULL) return fail(LWPU_ERR_NULL, "LWPmodel_num_outputs: m is NULL");
    return NUM_OUTPUTS;
}

EXPORT const char *LWPmodel_input_name(const LWPmodel *m, int i) {
    return check_index("LWPmodel_input_name", m, i, NUM_INPUTS, "input") ? NULL : input_names[i];
}

EXPORT const char *LWPmodel_output_name(const LWPmodel *m, int i) {
    return check_index("LWPmodel_output_name", m, i, NUM_OUTPUTS, "output") ? NULL : output_names[i];
}

EXPORT const char *LWPmodel_input_dtype(const LWPmodel *m, int i) {
    return check_index("LWPmodel_input_dtype", m, i, NUM_INPUTS, "input") ? NULL : input_dtypes[i];
}

EXPORT const char *LWPmodel_output_dtype(const LWPmodel *m, int i) {
    return check_index("LWPmodel_output_dtype", m, i, NUM_OUTPUTS, "output") ? NULL : output_dtypes[i];
}
"""

#: the C that writes a kernel's error message with the graph's value names for its ``in0, in1, ...``
#: (``call_inputs`` tables in scope), the same in both libraries
C_NAME_INPUTS = r"""/* the kernel's message names its inputs in0, in1, ...: write the graph's value names instead */
static void name_inputs(char *dst, size_t cap, const char *what, int64_t call) {
    size_t n = 0;
    while (*what && n + 1 < cap) {
        if (what[0] == '\'' && what[1] == 'i' && what[2] == 'n' && what[3] >= '0' && what[3] <= '9') {
            const char *p = what + 3;
            long k = 0;
            while (*p >= '0' && *p <= '9' && k < 1000000) k = k * 10 + (*p++ - '0');
            if (*p == '\'' && call >= 0 && call < NUM_CALLS && k < call_input_counts[call]) {
                int wrote = snprintf(dst + n, cap - n, "'%s'", call_inputs[call_input_starts[call] + k]);
                n = wrote < 0 || (size_t)wrote >= cap - n ? cap - 1 : n + (size_t)wrote;
                what = p + 1;
                continue;
            }
        }
        dst[n++] = *what++;
    }
    dst[n] = 0;
}

"""

_SOURCE = r"""#define _GNU_SOURCE
#include <sched.h>
#include <stdarg.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include "HEADER_FILE"

#define EXPORT __attribute__((visibility("default")))
#define NUM_INPUTS NUM_INPUTS_VALUE
#define NUM_OUTPUTS NUM_OUTPUTS_VALUE
#define MAX_THREADS MAX_THREADS_VALUE
#define ARENA_BYTES ((size_t)ARENA_VALUE)
#define TARGET_NAME TARGET_NAME_VALUE
#define CPU_RUNS_THE_CODE() (CPU_CHECK_VALUE)

TABLES

extern void RUNNER_SYMBOL(void *inputs, void *outputs, void *arena, void *weights, int64_t *err);
extern void POOL_THREADS_SYMBOL(int32_t n);
#define SIDE_PARAMS SIDE_PARAMS_VALUE
#define PARAMS_BYTES ((size_t)PARAMS_BYTES_VALUE)
#if SIDE_PARAMS
#define PARAMS_HEADER_BYTES 64
static const unsigned char params_header[PARAMS_HEADER_BYTES] = {PARAMS_HEADER_VALUE};
#else
extern const unsigned char WEIGHTS_SYMBOL[];
#endif

struct LWPmodel {
    void *arena;
    int num_threads;
    const unsigned char *weights;
    void *map;          /* the mapped .params file (params="side"), else NULL */
    size_t map_bytes;
    int busy;           /* 1 while a run uses the arena */
};

static __thread char last_error[1024];
/* the compiler checks every message's arguments against its format */
static int fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

""" + C_FAIL_AND_CORES + r"""
#if SIDE_PARAMS
/* strerror_r returns the text (GNU, glibc with _GNU_SOURCE) or a status with the text in buf (POSIX:
   musl, the BSDs): _Generic takes whichever this libc declares, calling it once */
static const char *text_of_status(int status, char *buf) { return status == 0 ? buf : "unknown error"; }
static const char *text_of_pointer(const char *text, char *buf) { (void)buf; return text; }
#define error_text(code, buf, cap) \
    _Generic(strerror_r(code, buf, cap), int: text_of_status, default: text_of_pointer)(strerror_r(code, buf, cap), buf)

/* the weights against the checksum in the header (export.py's weights_checksum: two 64-bit sums over
   little-endian 8-byte words, the last one zero-padded) */
static int weights_intact(const unsigned char *data) {
    uint64_t first = 0, second = 0, i, words = (PARAMS_BYTES + 7) / 8, want[2];
    for (i = 0; i < words; i++) {
        uint64_t w = 0;
        size_t k, n = PARAMS_BYTES - i * 8 < 8 ? PARAMS_BYTES - i * 8 : 8;
        if (n == 8)
            memcpy(&w, data + i * 8, 8);
        else
            for (k = 0; k < n; k++)
                w |= (uint64_t)data[i * 8 + k] << (8 * k);
        first += w * (2 * i + 1);
        second += (w ^ i) * UINT64_C(0x9E3779B97F4A7C15);
    }
    memcpy(want, params_header + 40, sizeof want);
    return first == want[0] && second == want[1];
}

/* map NAME.params from the folder of this library (read-only, shared by every handle's page cache) */
static int map_params(LWPmodel *m) {
    Dl_info info;
    char path[4096], why[256];
    const char *slash, *dot;
    size_t stem;
    struct stat st;
    void *base;
    int fd;
    if (!dladdr((void *)&LWPmodel_create, &info) || info.dli_fname == NULL)
        return fail(LWPU_ERR_PARAMS, "LWPmodel_create: cannot tell where this library was loaded from, to find "
                    "its .params file");
    slash = strrchr(info.dli_fname, '/');
    dot = strrchr(info.dli_fname, '.');
    stem = dot != NULL && (slash == NULL || dot > slash) ? (size_t)(dot - info.dli_fname) : strlen(info.dli_fname);
    if (stem + sizeof ".params" > sizeof path)
        return fail(LWPU_ERR_PARAMS, "LWPmodel_create: the library's path is too long");
    memcpy(path, info.dli_fname, stem);
    memcpy(path + stem, ".params", sizeof ".params");
    fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return fail(LWPU_ERR_PARAMS, "LWPmodel_create: cannot open the weights file %s: %s", path,
                    error_text(errno, why, sizeof why));
    if (fstat(fd, &st) != 0 || (uint64_t)st.st_size != PARAMS_HEADER_BYTES + PARAMS_BYTES) {
        close(fd);
        return fail(LWPU_ERR_PARAMS, "LWPmodel_create: %s has %lld bytes, this library expects %zu: it belongs to "
                    "another model or export", path, (long long)st.st_size, PARAMS_HEADER_BYTES + PARAMS_BYTES);
    }
    base = mmap(NULL, (size_t)st.st_size, PROT_READ, MAP_PRIVATE, fd, 0);
    close(fd);
    if (base == MAP_FAILED)
        return fail(LWPU_ERR_PARAMS, "LWPmodel_create: cannot map %s: %s", path, error_text(errno, why, sizeof why));
    if (memcmp(base, params_header, PARAMS_HEADER_BYTES) != 0) {
        munmap(base, (size_t)st.st_size);
        return fail(LWPU_ERR_PARAMS, "LWPmodel_create: %s was not written with this library (its header differs): "
                    "export the model again", path);
    }
    if (!weights_intact((const unsigned char *)base + PARAMS_HEADER_BYTES)) {
        munmap(base, (size_t)st.st_size);
        return fail(LWPU_ERR_PARAMS, "LWPmodel_create: %s is damaged (its weights do not match the checksum "
                    "recorded at export): export the model again", path);
    }
    m->map = base;
    m->map_bytes = (size_t)st.st_size;
    m->weights = (const unsigned char *)base + PARAMS_HEADER_BYTES;
    return LWPU_OK;
}
#endif

EXPORT int LWPmodel_create(LWPmodel **out, int num_threads) {
    LWPmodel *m;
    if (out == NULL) return fail(LWPU_ERR_NULL, "LWPmodel_create: out is NULL");
    *out = NULL;
    if (num_threads < 0 || num_threads > MAX_THREADS)
        return fail(LWPU_ERR_THREADS, "LWPmodel_create: num_threads must be 0 (all cores) or 1 to %d, got %d",
                    MAX_THREADS, num_threads);
    if (!CPU_RUNS_THE_CODE())
        return fail(LWPU_ERR_CPU, "LWPmodel_create: this library's code is for CPU %s and uses CPU_FEATURES_DOC, "
                    "which this CPU lacks: export the model for this CPU's level (e.g. target 'llvm -mcpu=x86-64-v3') "
                    "or with several levels", TARGET_NAME);
    m = (LWPmodel *)calloc(1, sizeof *m);
    if (m == NULL) return fail(LWPU_ERR_NOMEM, "LWPmodel_create: out of memory");
    if (posix_memalign(&m->arena, 64, ARENA_BYTES ? ARENA_BYTES : 64) != 0) {
        free(m);
        return fail(LWPU_ERR_NOMEM, "LWPmodel_create: out of memory (the arena takes %zu bytes)", ARENA_BYTES);
    }
    m->num_threads = num_threads ? num_threads : all_cores();
#if SIDE_PARAMS
    {
        int status = map_params(m);
        if (status != LWPU_OK) {
            free(m->arena);
            free(m);
            return status;
        }
    }
#else
    m->weights = WEIGHTS_SYMBOL;
#endif
    *out = m;
    return LWPU_OK;
}

EXPORT void LWPmodel_destroy(LWPmodel *m) {
    if (m == NULL) return;
    if (m->map != NULL) munmap(m->map, m->map_bytes);
    free(m->arena);
    free(m);
}

EXPORT const char *LWPmodel_target(const LWPmodel *m) {
    if (m == NULL) {
        fail(LWPU_ERR_NULL, "LWPmodel_target: m is NULL");
        return NULL;
    }
    return TARGET_NAME;
}

""" + C_TENSOR_GETTERS + r"""
static int shape_of(const char *fn, const LWPmodel *m, int i, int count, const char *what, const int *ranks,
                    const int *starts, const int64_t *all_dims, int64_t *dims, int max_rank) {
    int status = check_index(fn, m, i, count, what), rank;
    if (status) return status;
    rank = ranks[i];
    if (dims == NULL && max_rank == 0) return rank;
    if (dims == NULL) return fail(LWPU_ERR_NULL, "%s: dims is NULL (pass max_rank 0 to ask for the rank only)", fn);
    if (max_rank < rank)
        return fail(LWPU_ERR_RANK, "%s: %s %d has rank %d, more than max_rank %d", fn, what, i, rank, max_rank);
    if (rank > 0) memcpy(dims, all_dims + starts[i], (size_t)rank * sizeof(int64_t));
    return rank;
}

EXPORT int LWPmodel_input_shape(const LWPmodel *m, int i, int64_t *dims, int max_rank) {
    return shape_of("LWPmodel_input_shape", m, i, NUM_INPUTS, "input", input_ranks, input_starts, input_dims,
                    dims, max_rank);
}

EXPORT int LWPmodel_output_shape(const LWPmodel *m, int i, int64_t *dims, int max_rank) {
    return shape_of("LWPmodel_output_shape", m, i, NUM_OUTPUTS, "output", output_ranks, output_starts,
                    output_dims, dims, max_rank);
}

""" + C_NAME_INPUTS + r"""EXPORT int LWPmodel_run(LWPmodel *m, const void *const *inputs, void *const *outputs) {
    int64_t err[4] = {0, 0, 0, 0};
    int k;
    if (m == NULL) return fail(LWPU_ERR_NULL, "LWPmodel_run: m is NULL");
    if (inputs == NULL && NUM_INPUTS > 0) return fail(LWPU_ERR_NULL, "LWPmodel_run: inputs is NULL");
    if (outputs == NULL && NUM_OUTPUTS > 0) return fail(LWPU_ERR_NULL, "LWPmodel_run: outputs is NULL");
    for (k = 0; k < NUM_INPUTS; k++)
        if (inputs[k] == NULL && input_bytes[k] > 0)
            return fail(LWPU_ERR_NULL, "LWPmodel_run: inputs[%d] (input '%s') is NULL", k, input_names[k]);
    for (k = 0; k < NUM_OUTPUTS; k++)
        if (outputs[k] == NULL && output_bytes[k] > 0)
            return fail(LWPU_ERR_NULL, "LWPmodel_run: outputs[%d] (output '%s') is NULL", k, output_names[k]);
    if (__atomic_exchange_n(&m->busy, 1, __ATOMIC_ACQUIRE))
        return fail(LWPU_ERR_BUSY, "LWPmodel_run: this handle is running on another thread; create one handle per "
                    "thread");
    POOL_THREADS_SYMBOL(m->num_threads);
    RUNNER_SYMBOL((void *)inputs, (void *)outputs, m->arena, (void *)m->weights, err);
    __atomic_store_n(&m->busy, 0, __ATOMIC_RELEASE);
    if (err[0] != 0) {
        /* a kernel's index check failed: err = {message, index, extent, call}; the message's first
           character says whether negative indices count from the end */
        const char *message = (const char *)(intptr_t)err[0];
        const char *node = err[3] >= 0 && err[3] < NUM_CALLS ? call_names[err[3]] : "?";
        char what[512];
        name_inputs(what, sizeof what, message + 1, err[3]);
        if (message[0] == '1')
            return fail(LWPU_ERR_DATA, "LWPmodel_run: %s: index %lld is out of range for %s, of size %lld (valid: "
                        "%lld to %lld, negative ones counting from the end)", node, (long long)err[1], what,
                        (long long)err[2], -(long long)err[2], (long long)err[2] - 1);
        return fail(LWPU_ERR_DATA, "LWPmodel_run: %s: index %lld is out of range for %s, of size %lld (valid: 0 to "
                    "%lld)", node, (long long)err[1], what, (long long)err[2], (long long)err[2] - 1);
    }
    return LWPU_OK;
}
"""


def _array(ctype: str, name: str, values: Sequence[str]) -> str:
    """A static const array; one filler element keeps C happy when ``values`` is empty."""
    body = ", ".join(values) if values else "0"
    return f"static const {ctype} {name}[] = {{{body}}};"


def _tensor_tables(kind: str, tensors) -> List[str]:
    names = [c_string(n) for n, _, _ in tensors]
    dtypes = [c_string(str(np.dtype(d))) for _, _, d in tensors]
    ranks = [str(len(s)) for _, s, _ in tensors]
    starts, dims, nbytes = [], [], []
    for _, shape, dtype in tensors:
        starts.append(str(len(dims)))
        dims += [f"INT64_C({int(d)})" for d in shape]
        nbytes.append(f"(size_t){int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize}u")
    return [_array("char *const", f"{kind}_names", names if names else ["\"\""]),
            _array("char *const", f"{kind}_dtypes", dtypes if dtypes else ["\"\""]),
            _array("int", f"{kind}_ranks", ranks), _array("int", f"{kind}_starts", starts),
            _array("int64_t", f"{kind}_dims", dims), _array("size_t", f"{kind}_bytes", nbytes)]


def _call_input_tables(calls) -> List[str]:
    """Per kernel call, the graph value names of its inputs in0, in1, ... (for index error messages)."""
    counts, starts, names = [], [], []
    for call in calls:
        starts.append(str(len(names)))
        counts.append(str(len(call.inputs)))
        names += [c_string(v) for v in call.inputs]
    return [_array("int", "call_input_counts", counts), _array("int", "call_input_starts", starts),
            _array("char *const", "call_inputs", names or ['""'])]


def _signature_doc(tensors) -> str:
    """The inputs or outputs for the header's comment (names as ``c_comment`` writes them)."""
    return ", ".join(f"{c_comment(n)}: {np.dtype(d)}{list(s)}" for n, s, d in tensors) or "(none)"


def _fill(template: str, prefix: str, values: dict) -> str:
    """``template`` with each placeholder replaced once (inserted text is never scanned again):
    ``LWPU_`` by the upper-case prefix, ``LWP`` by the prefix, the keys of ``values`` by their values."""
    table = dict(values, LWPU_=prefix.upper(), LWP=prefix)
    pattern = re.compile("|".join(re.escape(k) for k in sorted(table, key=len, reverse=True)))
    return pattern.sub(lambda m: table[m.group(0)], template)


_MIX = np.uint64(0x9E3779B97F4A7C15)


def weights_checksum(blob: np.ndarray) -> tuple:
    """Two 64-bit sums over the weights as little-endian 8-byte words ``w[i]`` (zero-padded):
    ``sum(w[i] * (2i + 1))`` and ``sum((w[i] ^ i) * 0x9E3779B97F4A7C15)``, mod 2**64.  Any one
    flipped bit changes the first (an odd multiplier is invertible mod 2**64); the library
    recomputes both at create and refuses a damaged file.  A
    check against damage, not against a forged file (see the security note)."""
    raw = np.ascontiguousarray(blob).view(np.uint8).ravel()
    padded = np.zeros((raw.size + 7) // 8 * 8, np.uint8)
    padded[:raw.size] = raw
    words = padded.view("<u8")
    index = np.arange(words.size, dtype=np.uint64)
    with np.errstate(over="ignore"):
        first = np.sum(words * (index * np.uint64(2) + np.uint64(1)), dtype=np.uint64)
        second = np.sum((words ^ index) * _MIX, dtype=np.uint64)
    return int(first), int(second)


def params_header(exe) -> bytes:
    """The 64-byte header of a ``.params`` file: magic, version, size, a fingerprint of the weights
    (the library compares all of it, so a file of another model or export is refused), and the
    weights' checksum (``weights_checksum``: the library verifies the data against it)."""
    blob = np.ascontiguousarray(exe.weights).view(np.uint8)
    fingerprint = hashlib.sha256(blob.tobytes()).hexdigest()[:16].encode()
    header = PARAMS_MAGIC + struct.pack("<QQ", PARAMS_VERSION, blob.nbytes) + fingerprint
    header += struct.pack("<QQ", *weights_checksum(blob))
    return header + bytes(64 - len(header))


def header_text(exe, prefix: str, header_name: str, library_name: str, params: str = "embed",
                cpu_doc: Optional[str] = None, weights_doc: Optional[str] = None) -> str:
    """The generated header of ``exe``'s library; ``cpu_doc`` says which CPUs it runs on (by default
    ``exe``'s target's CPU), ``weights_doc`` where its weights are (by default as ``params`` says)."""
    params_doc = Path(library_name).with_suffix(".params").name
    if weights_doc is None:
        weights_doc = (f"in {params_doc} ({exe.weights.nbytes} bytes), mapped by create from the library's folder"
                       if params == "side" else f"embedded, read-only ({exe.weights.nbytes} bytes)")
    # every value but the thread count stands inside a comment
    return _fill(_HEADER, prefix, {
        "HEADER_NAME": c_comment(header_name), "LIBRARY_NAME": c_comment(library_name),
        "INPUTS_DOC": _signature_doc(exe.inputs), "OUTPUTS_DOC": _signature_doc(exe.outputs),
        "CPU_NAME": c_comment(cpu_doc or f"CPU '{target_description(exe.target)}' (create checks that this CPU "
                                            f"runs its code)"),
        "WEIGHTS_DOC": c_comment(weights_doc),
        "PARAMS_DOC": c_comment(params_doc) if params == "side" else "params='side' only",
        "MAX_THREADS_VALUE": str(MAX_THREADS)})


def source_text(exe, prefix: str, header_file: str, params: str = "embed") -> str:
    """The C implementation of the API over ``exe``'s runner."""
    call_names = [c_string(f"node '{c.nodes[0]}'" if len(c.nodes) == 1 else f"kernel '{c.name}' (nodes "
                           + ", ".join(c.nodes) + ")") for c in exe.calls]
    tables = (_tensor_tables("input", exe.inputs) + _tensor_tables("output", exe.outputs)
              + [f"#define NUM_CALLS {len(exe.calls)}", _array("char *const", "call_names", call_names or ['""'])]
              + _call_input_tables(exe.calls))
    cpu_condition, features = cpu_check(exe.target)
    return _fill(_SOURCE, prefix, {
        "TARGET_NAME_VALUE": c_string(target_description(exe.target)), "CPU_CHECK_VALUE": cpu_condition,
        "CPU_FEATURES_DOC": ", ".join(features),
        "HEADER_FILE": c_include_name(header_file, "export_library"), "NUM_INPUTS_VALUE": str(len(exe.inputs)),
        "NUM_OUTPUTS_VALUE": str(len(exe.outputs)), "MAX_THREADS_VALUE": str(MAX_THREADS),
        "ARENA_VALUE": str(int(exe.arena_size)), "TABLES": "\n".join(tables),
        "RUNNER_SYMBOL": c_identifier(exe.runner_symbol, "export_library: the runner's symbol"),
        "POOL_THREADS_SYMBOL": POOL_SET_THREADS, "WEIGHTS_SYMBOL": _WEIGHTS_SYMBOL,
        "SIDE_PARAMS_VALUE": "1" if params == "side" else "0", "PARAMS_BYTES_VALUE": str(int(exe.weights.nbytes)),
        "PARAMS_HEADER_VALUE": ", ".join(str(b) for b in params_header(exe)) if params == "side" else "0"})


def export_library(exe, path, prefix: str = "lw_", params: str = "embed", cc: Optional[str] = None) -> Path:
    """Write ``exe`` (a CPU ``Executable``) as the shared library ``path`` and its header beside it
    (``model.so`` -> ``model.h``); returns the library's path.  See the module docstring."""
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ArgumentError(f"export_library: prefix must be the start of a C identifier (letters, digits, "
                            f"'_', not starting with a digit), got {prefix!r}")
    if params not in ("embed", "side"):
        raise ArgumentError(f"export_library: params must be 'embed' (the weights inside the library) or 'side' "
                            f"(a .params file beside it, mapped at create), got {params!r}")
    if getattr(exe.target, "kind", None) != "llvm":
        raise ArgumentError("export_library: only CPU (llvm) executables can be exported")
    path = Path(path)
    if not path.parent.is_dir():
        raise ArgumentError(f"export_library: the folder {str(path.parent)!r} does not exist")
    cross = not exe.runs_here
    as_object = check_output_kind(path, cross, cc)
    compiler = cross_compiler(cc, exe.target) if cross and not as_object else None
    exported = [prefix + name for name in API_FUNCTIONS]
    check_exported_names(exported, [*exe.kernels, exe.runner_symbol, _WEIGHTS_SYMBOL])
    header = path.with_suffix(".h")
    c_include_name(header.name, "export_library")
    # an object is linked with the API's C beside it: the header's "cc app.c ./LIBRARY" names both
    linked_as = f"{path.with_suffix('.c').name} ./{path.name}" if as_object else path.name
    header_body = header_text(exe, prefix, header.name, linked_as, params)
    with tempfile.TemporaryDirectory(prefix="loopweave-export-") as tmp:
        work = Path(tmp)
        (work / header.name).write_text(header_body)
        (work / "api.c").write_text(source_text(exe, prefix, header.name, params))
        sources = [work / "api.c"]
        pic = exe.kernel_ir is not None
        if pic:
            # one position-independent object for the target: kernels, runner, pool; the weights too for a
            # cross-compile (this machine's assembler cannot take .incbin for another CPU: an LLVM constant)
            objects = [work / "model.o"]
            objects[0].write_bytes(linked_object(exe.target, lambda: [*exe.kernels_llvm_ir().values(), exe.runner_ir],
                                                 exe.weights if cross and params == "embed" else None,
                                                 _WEIGHTS_SYMBOL, cache_key=exe.runner_symbol))
            if not cross and params == "embed":
                sources.append(weights_source(exe, work))
        else:   # a loaded .lwx: its JIT objects, linked with text relocations
            objects = _host_objects(exe, work, params, sources)
        if as_object:
            write_bytes(path, objects[0].read_bytes())
            write_text(path.with_suffix(".c"), (work / "api.c").read_text())
        else:
            with replacing(path) as partial:
                link_shared(partial, sources, objects, exported, work, cc, compiler=compiler, pic=pic,
                            soname=path.name)
    if params == "side":
        with replacing_file(path.with_suffix(".params")) as f:
            f.write(params_header(exe))
            np.ascontiguousarray(exe.weights).view(np.uint8).tofile(f)
    write_text(header, header_body)
    return path


def weights_source(exe, work: Path) -> Path:
    """An assembler file placing the weights in ``.rodata`` (``.incbin`` of a copy of them)."""
    np.ascontiguousarray(exe.weights).view(np.uint8).tofile(work / "weights.bin")
    (work / "weights.s").write_text(weights_assembly(work / "weights.bin", _WEIGHTS_SYMBOL))
    return work / "weights.s"


def _host_objects(exe, work: Path, params: str, sources: List[Path]) -> List[Path]:
    """The objects of a library for this machine from a loaded .lwx (object code only): each kernel's
    JIT object, the runner's, the pool compiled position-independent; with embedded weights, their
    ``.incbin`` file joins ``sources``."""
    if params == "embed":
        sources.append(weights_source(exe, work))
    objects = []
    for k, (symbol, obj) in enumerate(sorted(exe.kernels.items())):
        objects.append(work / f"kernel{k}.o")
        objects[-1].write_bytes(obj)
    (work / "runner.o").write_bytes(exe.runner_object)
    (work / "pool.o").write_bytes(thread_pool_object(exe.target))
    return objects + [work / "runner.o", work / "pool.o"]

