"""``PolymorphicExecutable.export_library``: a compile-once network as a shared library whose C API
takes the sizes.

The library holds each distinct kernel's object code (the kernels take their extents as size
arguments, as in Python), the native thread pool and the weights (``.rodata``, ``.incbin``).  A
generated C file does what ``PolymorphicExecutable.run`` does: it checks the sizes and the model's
run-time checks, evaluates the symbolic memory plan (``symbolic_plan.py``: each slot's size, laid
out 64-byte aligned in one arena that grows when a larger binding arrives), each call's size
arguments and the variant each call runs (``KernelCall.variants``), exactly, in 64-bit rationals
(``symbolic_c.py``, ``symbolic.evaluate``'s arithmetic), then calls every kernel in order.

The API (``lw_`` is the prefix; ``sizes`` holds one value per symbol, in the order
``lw_model_size_name`` gives, each a whole number >= 1)::

    int lw_model_create(lw_model **out, int num_threads);      /* 0 ok; num_threads 0 = all cores */
    int lw_model_num_sizes(const lw_model *m);  const char *lw_model_size_name(const lw_model *m, int i);
    int lw_model_num_inputs / num_outputs;  input_name / output_name / input_dtype / output_dtype (as static)
    int lw_model_input_shape(const lw_model *m, int i, const int64_t *sizes, int64_t *dims, int max_rank);
    int lw_model_output_shape(const lw_model *m, int i, const int64_t *sizes, int64_t *dims, int max_rank);
    int lw_model_run(lw_model *m, const int64_t *sizes, const void *const *inputs, void *const *outputs);
    void lw_model_destroy(lw_model *m);  const char *lw_model_target(const lw_model *m);
    const char *lw_last_error(void);

A size below 1, sizes that break one of the model's run-time checks (``seq == seq_k``), or sizes too
large to compute are ``LW_ERR_SIZE`` with a message naming the size or the check; nothing runs.

Not covered (an ``ArgumentError`` says so): binding tables (a Resize whose taps are computed per
binding with numpy), ``params="side"``, and several CPU levels in one library.
"""
from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...backends.aligned_memory import ALIGN
from ...backends.c_text import c_comment, c_identifier, c_include_name, c_string
from ...backends.export import (C_FAIL_AND_CORES, POOL_SET_THREADS, check_exported_names, cpu_check, link_shared,
                               target_description, thread_pool_object, weights_assembly)
from ...backends.llvm.thread_pool import MAX_THREADS
from ...backends.output_file import replacing, write_text
from ...errors import ArgumentError, InternalError
from . import symbolic as S
from .export import C_NAME_INPUTS, C_TENSOR_GETTERS, _PREFIX, _array, _fill
from .symbolic_c import C_RATIONALS, c_condition, c_size

API_FUNCTIONS = ("model_create", "model_num_sizes", "model_size_name", "model_num_inputs", "model_num_outputs",
                 "model_input_name", "model_output_name", "model_input_dtype", "model_output_dtype",
                 "model_input_shape", "model_output_shape", "model_run", "model_destroy", "model_target",
                 "last_error")
_WEIGHTS_SYMBOL = "lw_export_weights"

_HEADER = r"""/* HEADER_NAME: C API of a network compiled once by loopweave, for every binding of its sizes
 * (generated; do not edit).
 *
 *   sizes:  SIZES_DOC
 *   model:  inputs  INPUTS_DOC
 *           outputs OUTPUTS_DOC
 *   compiled for CPU_NAME
 *
 * Link with the library (cc app.c ./LIBRARY_NAME); at run time it needs only libc, libm and pthread.
 * The library is native code: load only libraries you trust, as you would any other.
 *
 * The sizes: every call that depends on them takes `sizes`, one int64_t per size, in the order
 * above (LWPmodel_size_name), each a whole number >= 1.  Sizes below 1, sizes the model refuses (a
 * run-time check, e.g. two sizes that must be equal) or too large to compute are LWPU_ERR_SIZE, and
 * LWPlast_error() names the size or the check.
 * Status: 0 is success; a negative LWPU_ERR_* code is a failure, and LWPlast_error() then returns
 * its message (thread-local, valid until this thread's next failing call).  No function aborts.
 * Tensors are dense, C order (row-major), of the dtype and of the shape that LWPmodel_input_shape /
 * LWPmodel_output_shape give at the sizes.  LWPmodel_run takes bare pointers and cannot check a
 * buffer's size: each must hold its whole tensor at those sizes.  The handle's arena grows to the
 * largest sizes run so far.  One handle runs one inference at a time (LWPU_ERR_BUSY otherwise).
 */
#ifndef LWPU_MODEL_H_INCLUDED
#define LWPU_MODEL_H_INCLUDED
#include <stdint.h>
#ifdef __cplusplus
extern "C" {
#endif

#define LWPU_OK 0
#define LWPU_ERR_NULL (-1)      /* a pointer argument is NULL */
#define LWPU_ERR_INDEX (-2)     /* an input / output / size index is out of range */
#define LWPU_ERR_THREADS (-3)   /* num_threads is not in [0, MAX_THREADS_VALUE] */
#define LWPU_ERR_NOMEM (-4)     /* out of memory */
#define LWPU_ERR_RANK (-5)      /* max_rank is smaller than the tensor's rank */
#define LWPU_ERR_DATA (-6)      /* an input value is out of range (e.g. a Gather index); see LWPlast_error() */
#define LWPU_ERR_BUSY (-8)      /* the handle is running on another thread (use one handle per thread) */
#define LWPU_ERR_CPU (-9)       /* this CPU lacks an instruction set the library's code needs */
#define LWPU_ERR_SIZE (-10)     /* a size is below 1, refused by the model, or too large; see LWPlast_error() */

typedef struct LWPmodel LWPmodel;

int LWPmodel_create(LWPmodel **out, int num_threads);   /* num_threads: 0 = every core, else 1 .. max */
int LWPmodel_num_sizes(const LWPmodel *m);              /* how many values `sizes` holds, or < 0 */
const char *LWPmodel_size_name(const LWPmodel *m, int i);   /* the symbol of sizes[i]; NULL on error */
int LWPmodel_num_inputs(const LWPmodel *m);
int LWPmodel_num_outputs(const LWPmodel *m);
const char *LWPmodel_input_name(const LWPmodel *m, int i);    /* NULL on error */
const char *LWPmodel_output_name(const LWPmodel *m, int i);
const char *LWPmodel_input_dtype(const LWPmodel *m, int i);   /* "float32", "int64", ...; NULL on error */
const char *LWPmodel_output_dtype(const LWPmodel *m, int i);
/* Write the dims at `sizes` into dims[0 .. rank-1] and return the rank, or < 0.  dims may be NULL
 * when max_rank is 0 (then only the rank is returned, and sizes may be NULL too). */
int LWPmodel_input_shape(const LWPmodel *m, int i, const int64_t *sizes, int64_t *dims, int max_rank);
int LWPmodel_output_shape(const LWPmodel *m, int i, const int64_t *sizes, int64_t *dims, int max_rank);
/* Run the network at `sizes`: inputs[k] / outputs[k] point to caller-owned buffers of input /
 * output k at those sizes.  0, or < 0 with a message. */
int LWPmodel_run(LWPmodel *m, const int64_t *sizes, const void *const *inputs, void *const *outputs);
void LWPmodel_destroy(LWPmodel *m);                    /* NULL is a no-op */
const char *LWPmodel_target(const LWPmodel *m);        /* the CPU the handle's code is for; NULL on error */
const char *LWPlast_error(void);                       /* "" when this thread had no failure */

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
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include "HEADER_FILE"

#define EXPORT __attribute__((visibility("default")))
#define NUM_SIZES NUM_SIZES_VALUE
#define NUM_INPUTS NUM_INPUTS_VALUE
#define NUM_OUTPUTS NUM_OUTPUTS_VALUE
#define NUM_CALLS NUM_CALLS_VALUE
#define NUM_SLOTS NUM_SLOTS_VALUE
#define NUM_POINTERS NUM_POINTERS_VALUE
#define NUM_VALUES NUM_VALUES_VALUE
#define MAX_THREADS MAX_THREADS_VALUE
#define TARGET_NAME TARGET_NAME_VALUE
#define CPU_RUNS_THE_CODE() (CPU_CHECK_VALUE)

extern void POOL_THREADS_SYMBOL(int32_t n);
extern const unsigned char WEIGHTS_SYMBOL[];
@KERNEL_DECLARATIONS@

@TABLES@

struct LWPmodel {
    void *arena;
    size_t arena_bytes;
    int num_threads;
    int busy;                       /* 1 while a run uses the arena */
    void *pointers[NUM_POINTERS];   /* every call's argument pointers, one after another */
    int64_t values[NUM_VALUES];     /* every call's size arguments */
    void (*fns[NUM_CALLS])(void *, void *, void *);
    int64_t slot_offsets[NUM_SLOTS > 0 ? NUM_SLOTS : 1];
};

static __thread char last_error[1024];
static int fail(int status, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

""" + C_FAIL_AND_CORES + C_RATIONALS + r"""
/* the sizes as "batch = 2, seq = 7" for messages */
static void show_sizes(char *dst, size_t cap, const int64_t *s) {
    size_t n = 0;
    int i;
    dst[0] = 0;
    for (i = 0; i < NUM_SIZES && n < cap; i++) {
        int wrote = snprintf(dst + n, cap - n, "%s%s = %lld", i ? ", " : "", size_names[i], (long long)s[i]);
        if (wrote < 0) break;
        n += (size_t)wrote;
    }
}

/* that every size is >= 1 and the model's run-time checks hold */
static int check_sizes(const char *fn, const int64_t *s) {
    char here[512];
    int i;
    if (s == NULL && NUM_SIZES > 0) return fail(LWPU_ERR_NULL, "%s: sizes is NULL", fn);
    for (i = 0; i < NUM_SIZES; i++)
        if (s[i] < 1)
            return fail(LWPU_ERR_SIZE, "%s: size '%s' (sizes[%d]) is %lld; every size is a whole number >= 1",
                        fn, size_names[i], i, (long long)s[i]);
    show_sizes(here, sizeof here, s);
    lwq_overflow = 0;
@CHECKS@
    return LWPU_OK;
}

static int tensor_shape(const char *fn, int which, int i, const int64_t *s, int64_t *dims) {
    char here[512];
    lwq_overflow = 0;
@SHAPES@
    if (lwq_overflow) {
        show_sizes(here, sizeof here, s);
        return fail(LWPU_ERR_SIZE, "%s: the sizes (%s) are too large to compute the tensor's shape", fn, here);
    }
    return LWPU_OK;
}

/* the arena's layout and every call's kernel, size arguments and pointers at the sizes */
static int bind_calls(LWPmodel *m, const int64_t *s, const void *const *inputs) {
    char here[512];
    int64_t total = 0, bytes;
    char *arena;
    const unsigned char *weights = WEIGHTS_SYMBOL;
    lwq_overflow = 0;
@SLOTS@
    if (lwq_overflow || total > INT64_MAX / 2) {
        show_sizes(here, sizeof here, s);
        return fail(LWPU_ERR_SIZE, "LWPmodel_run: the sizes (%s) are too large: the network's values would need "
                    "more memory than can be addressed", here);
    }
    if ((size_t)total > m->arena_bytes) {
        void *grown = NULL;
        if (posix_memalign(&grown, 64, (size_t)total) != 0) {
            show_sizes(here, sizeof here, s);
            return fail(LWPU_ERR_NOMEM, "LWPmodel_run: out of memory (the sizes %s need an arena of %lld bytes)",
                        here, (long long)total);
        }
        free(m->arena);
        m->arena = grown;
        m->arena_bytes = (size_t)total;
    }
    arena = (char *)m->arena;
    (void)arena; (void)weights; (void)inputs;
@CALLS@
    if (lwq_overflow) {
        show_sizes(here, sizeof here, s);
        return fail(LWPU_ERR_SIZE, "LWPmodel_run: the sizes (%s) are too large to compute a kernel's sizes", here);
    }
    return LWPU_OK;
}

static int copy_outputs(LWPmodel *m, const int64_t *s, const void *const *inputs, void *const *outputs) {
    int64_t dims[MAX_RANK_VALUE > 0 ? MAX_RANK_VALUE : 1];
    int k, d;
    for (k = 0; k < NUM_OUTPUTS; k++) {
        int64_t count = 1;
        const void *from;
        int status = tensor_shape("LWPmodel_run", 1, k, s, dims);
        if (status) return status;
        for (d = 0; d < output_ranks[k]; d++) count *= dims[d];
        from = output_sources[k] >= 0 ? (const char *)m->arena + m->slot_offsets[output_sources[k]]
                                      : inputs[-1 - output_sources[k]];
        if (count > 0) memcpy(outputs[k], from, (size_t)count * output_item_bytes[k]);
    }
    return LWPU_OK;
}

EXPORT int LWPmodel_create(LWPmodel **out, int num_threads) {
    LWPmodel *m;
    if (out == NULL) return fail(LWPU_ERR_NULL, "LWPmodel_create: out is NULL");
    *out = NULL;
    if (num_threads < 0 || num_threads > MAX_THREADS)
        return fail(LWPU_ERR_THREADS, "LWPmodel_create: num_threads must be 0 (all cores) or 1 to %d, got %d",
                    MAX_THREADS, num_threads);
    if (!CPU_RUNS_THE_CODE())
        return fail(LWPU_ERR_CPU, "LWPmodel_create: this library's code is for CPU %s and uses CPU_FEATURES_DOC, "
                    "which this CPU lacks: export the model again on this CPU", TARGET_NAME);
    m = (LWPmodel *)calloc(1, sizeof *m);
    if (m == NULL) return fail(LWPU_ERR_NOMEM, "LWPmodel_create: out of memory");
    m->num_threads = num_threads ? num_threads : all_cores();
    *out = m;
    return LWPU_OK;
}

EXPORT void LWPmodel_destroy(LWPmodel *m) {
    if (m == NULL) return;
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
EXPORT int LWPmodel_num_sizes(const LWPmodel *m) {
    if (m == NULL) return fail(LWPU_ERR_NULL, "LWPmodel_num_sizes: m is NULL");
    return NUM_SIZES;
}

EXPORT const char *LWPmodel_size_name(const LWPmodel *m, int i) {
    return check_index("LWPmodel_size_name", m, i, NUM_SIZES, "size") ? NULL : size_names[i];
}

static int shape_at(const char *fn, const LWPmodel *m, int which, int i, const int64_t *sizes, int64_t *dims,
                    int max_rank) {
    int64_t all[MAX_RANK_VALUE > 0 ? MAX_RANK_VALUE : 1];
    int status = check_index(fn, m, i, which ? NUM_OUTPUTS : NUM_INPUTS, which ? "output" : "input"), rank;
    if (status) return status;
    rank = which ? output_ranks[i] : input_ranks[i];
    if (dims == NULL && max_rank == 0) return rank;
    if (dims == NULL) return fail(LWPU_ERR_NULL, "%s: dims is NULL (pass max_rank 0 to ask for the rank only)", fn);
    if (max_rank < rank)
        return fail(LWPU_ERR_RANK, "%s: %s %d has rank %d, more than max_rank %d", fn, which ? "output" : "input", i,
                    rank, max_rank);
    status = check_sizes(fn, sizes);
    if (status) return status;
    status = tensor_shape(fn, which, i, sizes, all);
    if (status) return status;
    if (rank > 0) memcpy(dims, all, (size_t)rank * sizeof(int64_t));
    return rank;
}

EXPORT int LWPmodel_input_shape(const LWPmodel *m, int i, const int64_t *sizes, int64_t *dims, int max_rank) {
    return shape_at("LWPmodel_input_shape", m, 0, i, sizes, dims, max_rank);
}

EXPORT int LWPmodel_output_shape(const LWPmodel *m, int i, const int64_t *sizes, int64_t *dims, int max_rank) {
    return shape_at("LWPmodel_output_shape", m, 1, i, sizes, dims, max_rank);
}

""" + C_NAME_INPUTS + r"""EXPORT int LWPmodel_run(LWPmodel *m, const int64_t *sizes, const void *const *inputs, void *const *outputs) {
    int64_t err[4] = {0, 0, 0, 0};
    int k, status;
    if (m == NULL) return fail(LWPU_ERR_NULL, "LWPmodel_run: m is NULL");
    if (inputs == NULL && NUM_INPUTS > 0) return fail(LWPU_ERR_NULL, "LWPmodel_run: inputs is NULL");
    if (outputs == NULL && NUM_OUTPUTS > 0) return fail(LWPU_ERR_NULL, "LWPmodel_run: outputs is NULL");
    for (k = 0; k < NUM_INPUTS; k++)
        if (inputs[k] == NULL)
            return fail(LWPU_ERR_NULL, "LWPmodel_run: inputs[%d] (input '%s') is NULL", k, input_names[k]);
    for (k = 0; k < NUM_OUTPUTS; k++)
        if (outputs[k] == NULL)
            return fail(LWPU_ERR_NULL, "LWPmodel_run: outputs[%d] (output '%s') is NULL", k, output_names[k]);
    status = check_sizes("LWPmodel_run", sizes);
    if (status) return status;
    if (__atomic_exchange_n(&m->busy, 1, __ATOMIC_ACQUIRE))
        return fail(LWPU_ERR_BUSY, "LWPmodel_run: this handle is running on another thread; create one handle per "
                    "thread");
    status = bind_calls(m, sizes, inputs);
    if (status == LWPU_OK) {
        POOL_THREADS_SYMBOL(m->num_threads);
        for (k = 0; k < NUM_CALLS && err[0] == 0; k++)
            m->fns[k](m->pointers + call_pointer_starts[k], m->values + call_value_starts[k], err);
        if (err[0] == 0)
            status = copy_outputs(m, sizes, inputs, outputs);
    }
    __atomic_store_n(&m->busy, 0, __ATOMIC_RELEASE);
    if (status) return status;
    if (err[0] != 0) {
        /* a kernel's index check failed: err = {message, index, extent}; k - 1 is the call */
        const char *message = (const char *)(intptr_t)err[0];
        char what[512];
        name_inputs(what, sizeof what, message + 1, k - 1);
        if (message[0] == '1')
            return fail(LWPU_ERR_DATA, "LWPmodel_run: %s: index %lld is out of range for %s, of size %lld (valid: "
                        "%lld to %lld, negative ones counting from the end)", call_names[k - 1], (long long)err[1],
                        what, (long long)err[2], -(long long)err[2], (long long)err[2] - 1);
        return fail(LWPU_ERR_DATA, "LWPmodel_run: %s: index %lld is out of range for %s, of size %lld (valid: 0 to "
                    "%lld)", call_names[k - 1], (long long)err[1], what, (long long)err[2], (long long)err[2] - 1);
    }
    return LWPU_OK;
}
"""


class _Layout:
    """Where each value of ``exe`` lives: an arena slot, the weights blob at an offset, or an input."""

    def __init__(self, exe):
        self.exe = exe
        self.input_index = {n: k for k, (n, _, _) in enumerate(exe.signature.inputs)}
        self.sources = {v.name: v.source for v in exe.views}
        self.weight_offset: Dict[str, int] = {}
        parts, offset = [], 0
        for name, array in exe.constants.items():
            raw = np.ascontiguousarray(array).view(np.uint8).ravel()
            self.weight_offset[name] = offset
            parts.append(raw)
            pad = -raw.size % ALIGN
            if pad:
                parts.append(np.zeros(pad, np.uint8))
            offset += raw.size + pad
        self.weights = np.concatenate(parts) if parts else np.zeros(ALIGN, np.uint8)

    def root(self, name: str) -> str:
        while name in self.sources and name not in self.exe.plan.slot_of:
            name = self.sources[name]
        return name

    def c_pointer(self, name: str) -> str:
        """A C expression of the address of value ``name`` (``arena``, ``weights``, ``inputs`` and ``m``
        in scope)."""
        slot = self.exe.plan.slot_of.get(name)
        if slot is not None:
            return f"arena + m->slot_offsets[{slot}]"
        root = self.root(name)
        if root in self.exe.plan.slot_of:
            return f"arena + m->slot_offsets[{self.exe.plan.slot_of[root]}]"
        if root in self.weight_offset:
            return f"(void *)(weights + {self.weight_offset[root]})"
        if root in self.input_index:
            return f"(void *)inputs[{self.input_index[root]}]"
        raise InternalError(f"export_library: value {name!r} has no storage; please report")

    def output_source(self, name: str) -> int:
        """The output's arena slot, or ``-1 - k`` for input ``k`` (an input given back)."""
        root = self.root(name)
        if root in self.exe.plan.slot_of:
            return self.exe.plan.slot_of[root]
        if root in self.input_index:
            return -1 - self.input_index[root]
        raise InternalError(f"export_library: output {name!r} is neither computed nor an input; please report")


def _outputs(exe) -> List[Tuple[str, tuple, str]]:
    """(name, sympy shape, dtype) of each output, as the executable computes it."""
    views = {v.name: v.shape for v in exe.views}
    inputs = {n: (s, d) for n, s, d in exe.signature.inputs}
    out = []
    for name, (_, sig_shape, sig_dtype) in zip(exe.output_names, exe.signature.outputs):
        if name in exe.plan.values:
            shape, dtype = exe.plan.values[name]
        elif name in views:
            shape, dtype = views[name], sig_dtype
        else:
            shape, dtype = inputs[name]
        out.append((name, tuple(shape), str(np.dtype(dtype))))
    return out


def _kernel_sizes(module, call, symbols) -> List[str]:
    return [f"lwq_whole({c_size(call.sizes[n], symbols)})" for n in module.size_names]


def _generated(exe, layout: _Layout, symbols: List[str], outputs, prefix: str) -> dict:
    """The generated C pieces of ``exe``'s source: tables, checks, shapes, slots and calls."""
    inputs = [(n, tuple(s), str(np.dtype(d))) for n, s, d in exe.signature.inputs]
    tables = [_array("char *const", "size_names", [c_string(s) for s in symbols] or ['""'])]
    for kind, tensors in (("input", inputs), ("output", outputs)):
        tables += [_array("char *const", f"{kind}_names", [c_string(n) for n, _, _ in tensors] or ['""']),
                   _array("char *const", f"{kind}_dtypes", [c_string(d) for _, _, d in tensors] or ['""']),
                   _array("int", f"{kind}_ranks", [str(len(s)) for _, s, _ in tensors])]
    tables += [_array("int", "output_sources", [str(layout.output_source(n)) for n, _, _ in outputs]),
               _array("size_t", "output_item_bytes", [str(np.dtype(d).itemsize) for _, _, d in outputs])]
    counts, starts, names, pointer_starts, value_starts = [], [], [], [], []
    pointers = values = 0
    for call in exe.calls:
        starts.append(str(len(names)))
        counts.append(str(len(call.args) - 1))
        names += [c_string(a) for a in call.args[:-1]]
        pointer_starts.append(str(pointers))
        value_starts.append(str(values))
        pointers += len(call.args)
        values += max(len(m.size_names) for m in [call.module] + [v.module for v in call.variants])
    tables += [_array("int", "call_input_counts", counts), _array("int", "call_input_starts", starts),
               _array("char *const", "call_inputs", names or ['""']),
               _array("int", "call_pointer_starts", pointer_starts), _array("int", "call_value_starts", value_starts),
               _array("char *const", "call_names", [c_string(f"node '{c.node}'") for c in exe.calls] or ['""'])]
    checks = []
    for c in exe.signature.checks:
        message = f"node '{c.node}' ({c.op}): {c.message}"
        checks.append(f"    if (!{c_condition(c.condition, symbols)} || lwq_overflow)\n"
                      f"        return fail({prefix.upper()}ERR_SIZE, \"%s: the sizes do not fit the model: %s (here %s)\", fn, "
                      f"{c_string(message)}, here);")
    shapes = []
    for which, tensors in ((0, inputs), (1, outputs)):
        for k, (_, shape, _) in enumerate(tensors):
            dims = "".join(f" dims[{d}] = lwq_whole({c_size(e, symbols)});" for d, e in enumerate(shape))
            shapes.append(f"    if (which == {which} && i == {k}) {{{dims} }}")
    slots = []
    for slot, size in enumerate(exe.plan.slot_sizes):
        slots.append(f"    m->slot_offsets[{slot}] = total;\n    bytes = lwq_whole({c_size(size, symbols)});\n"
                     f"    total = lwq_add_i(total, lwq_mul_i((bytes + {ALIGN - 1}) / {ALIGN}, {ALIGN}));")
    calls = []
    for k, call in enumerate(exe.calls):
        lines = [f"    /* call {k}: {c_comment(call.node)} */"]
        for j, arg in enumerate(call.args):
            lines.append(f"    m->pointers[{pointer_starts[k]} + {j}] = {layout.c_pointer(arg)};")
        branches = [(c_condition(S.dim(v.rows) <= v.at_most, symbols), v.module) for v in call.variants]
        branches.append((None, call.module))
        for b, (condition, module) in enumerate(branches):
            head = "    " if b == 0 else "    else "
            if condition is not None:
                head += f"if ({condition}) "
            body = [f"m->fns[{k}] = {_symbol(module)};"] + [
                f"m->values[{value_starts[k]} + {j}] = {v};" for j, v in enumerate(_kernel_sizes(module, call, symbols))]
            lines.append(head + "{ " + " ".join(body) + " }")
        calls.append("\n".join(lines))
    kernels = sorted({_symbol(c.module) for c in exe.calls} | {_symbol(v.module) for c in exe.calls for v in c.variants})
    return {"@TABLES@": "\n".join(tables), "@CHECKS@": "\n".join(checks), "@SHAPES@": "\n".join(shapes),
            "@SLOTS@": "\n".join(slots), "@CALLS@": "\n".join(calls),
            "@KERNEL_DECLARATIONS@": "\n".join(f"extern void {s}(void *, void *, void *);" for s in kernels),
            "NUM_POINTERS_VALUE": str(max(1, pointers)), "NUM_VALUES_VALUE": str(max(1, values)),
            "NUM_CALLS_VALUE": str(max(1, len(exe.calls))), "NUM_SLOTS_VALUE": str(len(exe.plan.slot_sizes)),
            "MAX_RANK_VALUE": str(max([len(s) for _, s, _ in inputs + outputs] + [1]))}


def _symbol(module) -> str:
    return c_identifier(module.symbol, "export_library: a kernel's symbol")


def _check_exportable(exe, params: str) -> None:
    if params != "embed":
        raise ArgumentError("export_library: a compile-once network exports with its weights embedded "
                            "(params='embed'); params='side' is for static shapes only so far")
    if exe.tables:
        raise ArgumentError(f"export_library: {exe.name!r} computes tables per binding in Python (a Resize whose "
                            f"taps depend on the sizes: {', '.join(sorted(exe.tables))}), which the C API cannot; "
                            f"fix the input shapes (from_onnx(..., input_shapes=...)) and export the static compile")
    if any(shape is None for _, shape, _ in exe.signature.outputs):
        raise ArgumentError(f"export_library: an output of {exe.name!r} has a shape symbolic inference did not find")
    if exe.plan.offsets:
        raise ArgumentError(f"export_library: {exe.name!r} computes concats (or reads slices) in place, at offsets "
                            f"the C API's plan does not place yet ({', '.join(sorted(exe.plan.offsets))}); compile "
                            f"it with polymorphic=True (the compile-once walk) to export it")
    if exe.target is None or getattr(exe.target, "kind", None) != "llvm":
        raise ArgumentError("export_library: only CPU (llvm) executables can be exported")


def export_polymorphic_library(exe, path, prefix: str = "lw_", params: str = "embed", cc: Optional[str] = None,
                               levels=()) -> Path:
    """Write ``exe`` (a ``PolymorphicExecutable``) as the shared library ``path`` and its header beside
    it (``model.so`` -> ``model.h``); returns the library's path.  See the module docstring."""
    if not isinstance(prefix, str) or not _PREFIX.match(prefix):
        raise ArgumentError(f"export_library: prefix must be the start of a C identifier (letters, digits, "
                            f"'_', not starting with a digit), got {prefix!r}")
    if levels:
        raise ArgumentError("export_library: levels= (several CPU levels in one library) is for static shapes only "
                            "so far; a compile-once network exports for the CPU it was compiled on")
    _check_exportable(exe, params)
    path = Path(path)
    if not path.parent.is_dir():
        raise ArgumentError(f"export_library: the folder {str(path.parent)!r} does not exist")
    if path.suffix != ".so":
        raise ArgumentError(f"export_library: a compile-once network exports as a shared library (.so), not "
                            f"{path.name!r}")
    layout = _Layout(exe)
    symbols = list(exe.signature.symbols)
    outputs = _outputs(exe)
    inputs = [(n, tuple(s), str(np.dtype(d))) for n, s, d in exe.signature.inputs]
    exported = [prefix + name for name in API_FUNCTIONS]
    modules = {_symbol(c.module): c.module for c in exe.calls}
    modules.update({_symbol(v.module): v.module for c in exe.calls for v in c.variants})
    check_exported_names(exported, [*modules, _WEIGHTS_SYMBOL])
    header = path.with_suffix(".h")
    c_include_name(header.name, "export_library")

    def doc(tensors):
        return ", ".join(f"{c_comment(n)}: {d}[{', '.join(c_comment(S.show(x)) for x in s)}]"
                         for n, s, d in tensors) or "(none)"
    header_body = _fill(_HEADER, prefix, {
        "HEADER_NAME": c_comment(header.name), "LIBRARY_NAME": c_comment(path.name),
        "SIZES_DOC": ", ".join(c_comment(s) for s in symbols) or "(none)",
        "INPUTS_DOC": doc(inputs), "OUTPUTS_DOC": doc(outputs),
        "CPU_NAME": c_comment(f"CPU '{target_description(exe.target)}' (create checks that this CPU runs its code)"),
        "MAX_THREADS_VALUE": str(MAX_THREADS)})
    cpu_condition, features = cpu_check(exe.target)
    source = _fill(_SOURCE, prefix, {
        "HEADER_FILE": c_include_name(header.name, "export_library"), "NUM_SIZES_VALUE": str(len(symbols)),
        "NUM_INPUTS_VALUE": str(len(inputs)), "NUM_OUTPUTS_VALUE": str(len(outputs)),
        "MAX_THREADS_VALUE": str(MAX_THREADS), "TARGET_NAME_VALUE": c_string(target_description(exe.target)),
        "CPU_CHECK_VALUE": cpu_condition, "CPU_FEATURES_DOC": ", ".join(features),
        "POOL_THREADS_SYMBOL": POOL_SET_THREADS, "WEIGHTS_SYMBOL": _WEIGHTS_SYMBOL,
        **_generated(exe, layout, symbols, outputs, prefix)})
    with tempfile.TemporaryDirectory(prefix="loopweave-export-") as tmp:
        work = Path(tmp)
        (work / header.name).write_text(header_body)
        (work / "api.c").write_text(source)
        layout.weights.tofile(work / "weights.bin")
        (work / "weights.s").write_text(weights_assembly(work / "weights.bin", _WEIGHTS_SYMBOL))
        objects = []
        for k, (symbol, module) in enumerate(sorted(modules.items())):
            objects.append(work / f"kernel{k}.o")
            objects[-1].write_bytes(module.object_code)
        objects.append(work / "pool.o")
        objects[-1].write_bytes(thread_pool_object(exe.target))
        with replacing(path) as partial:
            link_shared(partial, [work / "api.c", work / "weights.s"], objects, exported, work, cc,
                        soname=path.name)
    write_text(header, header_body)
    return path
