"""The exported library called from C against ``exe.run`` in Python.

``python -m benchmarks.deploy [--models resnet18 ...] [--threads 2] [--pairs 7] [--runs 20]``

Per model: compile, ``export_library`` (its time and the library's size against the weights'),
then a C program (compiled here with ``cc``) that times ``lw_model_create`` + the first
``lw_model_run`` and then the median of ``--runs`` runs; and, alternating with it pair by pair, the
median of ``--runs`` calls of ``exe.run`` in this process with the same thread count.
Ratio = Python time / C time (>= 1: the C call is at least as fast).
"""
from __future__ import annotations

import argparse
import shutil
import subprocess
import tempfile
import time
from pathlib import Path

import numpy as np

BENCH_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include "model.h"
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + t.tv_nsec * 1e-9; }
static int cmp(const void *a, const void *b) { double x = *(const double *)a, y = *(const double *)b; return (x > y) - (x < y); }
int main(int argc, char **argv) {
    int threads = atoi(argv[2]), runs = atoi(argv[3]), k, r, n_in, n_out;
    double t0 = now(), first, *times = malloc(sizeof(double) * runs);
    lw_model *m;
    if (lw_model_create(&m, threads)) { fprintf(stderr, "%s\n", lw_last_error()); return 2; }
    double created = now() - t0;
    n_in = lw_model_num_inputs(m); n_out = lw_model_num_outputs(m);
    const void **ins = calloc(n_in, sizeof *ins); void **outs = calloc(n_out, sizeof *outs);
    FILE *f = fopen(argv[1], "rb");
    for (k = 0; k < n_in; k++) {
        int64_t dims[16]; size_t n = 8; int rank = lw_model_input_shape(m, k, dims, 16);
        for (r = 0; r < rank; r++) n *= (size_t)dims[r];      /* 8 bytes per element: room for any dtype */
        ins[k] = calloc(1, n);
        if (fread((void *)ins[k], 1, n, f) != n) return 3;
    }
    fclose(f);
    for (k = 0; k < n_out; k++) {
        int64_t dims[16]; size_t n = 8; int rank = lw_model_output_shape(m, k, dims, 16);
        for (r = 0; r < rank; r++) n *= (size_t)dims[r];
        outs[k] = malloc(n);
    }
    double t1 = now();
    if (lw_model_run(m, ins, outs)) { fprintf(stderr, "%s\n", lw_last_error()); return 4; }
    first = created + (now() - t1);   /* create + first run; the file reading in between is left out */
    for (k = 0; k < runs; k++) { double s = now(); lw_model_run(m, ins, outs); times[k] = now() - s; }
    qsort(times, runs, sizeof(double), cmp);
    printf("%.6f %.6f\n", first, times[runs / 2]);
    lw_model_destroy(m);
    return 0;
}
"""


def _feed(exe, rng):
    feed = {}
    for name, shape, dtype in exe.inputs:
        if np.dtype(dtype).kind in "iu":
            feed[name] = rng.integers(0, 2, size=shape).astype(dtype)
        else:
            feed[name] = rng.standard_normal(shape).astype(dtype)
    return feed


def bench_model(name: str, threads: int, pairs: int, runs: int, work: Path) -> dict:
    import loopweave as lw
    from loopweave.backends.timing import set_threads
    from loopweave.nn_ops.testing import model_zoo
    exe = lw.compile(lw.from_onnx(getattr(model_zoo, name)()), progress=False)
    t0 = time.perf_counter()
    lib = exe.export_library(work / "model.so")
    export_s = time.perf_counter() - t0
    src = work / "bench.c"
    src.write_text(BENCH_C)
    app = work / "bench"
    subprocess.run([shutil.which("cc") or "cc", "-O2", "-o", str(app), str(src), str(lib), f"-Wl,-rpath,{work}"],
                   check=True, cwd=work)
    feed = _feed(exe, np.random.default_rng(0))
    with open(work / "x.bin", "wb") as f:
        for (in_name, _, _) in exe.inputs:
            raw = np.ascontiguousarray(feed[in_name]).view(np.uint8).ravel()
            f.write(raw.tobytes() + bytes(8 * raw.size // feed[in_name].itemsize - raw.size))
    set_threads(threads)
    exe.run(feed)
    ratios, c_times, py_times, firsts = [], [], [], []
    for _ in range(pairs):
        out = subprocess.run([str(app), str(work / "x.bin"), str(threads), str(runs)], check=True,
                             capture_output=True, text=True).stdout.split()
        first, c_time = float(out[0]), float(out[1])
        samples = []
        for _ in range(runs):
            t = time.perf_counter()
            exe.run(feed)
            samples.append(time.perf_counter() - t)
        py_time = float(np.median(samples))
        ratios.append(py_time / c_time)
        c_times.append(c_time)
        py_times.append(py_time)
        firsts.append(first)
    return {"model": name, "export_s": export_s, "library_mb": lib.stat().st_size / 1e6,
            "weights_mb": exe.weights.nbytes / 1e6, "c_ms": 1e3 * float(np.median(c_times)),
            "python_ms": 1e3 * float(np.median(py_times)), "ratio": float(np.median(ratios)),
            "create_first_ms": 1e3 * float(np.median(firsts))}


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--models", nargs="+", default=["resnet18"])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--pairs", type=int, default=7)
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args(argv)
    print("| model | export | library / weights | C run | exe.run | Python/C | create + first run |")
    print("|---|---|---|---|---|---|---|")
    for name in args.models:
        with tempfile.TemporaryDirectory(prefix="lw-deploy-") as tmp:
            r = bench_model(name, args.threads, args.pairs, args.runs, Path(tmp))
        print(f"| {r['model']} | {r['export_s']:.2f} s | {r['library_mb']:.1f} / {r['weights_mb']:.1f} MB | "
              f"{r['c_ms']:.2f} ms | {r['python_ms']:.2f} ms | **{r['ratio']:.2f}** | {r['create_first_ms']:.1f} ms |",
              flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
