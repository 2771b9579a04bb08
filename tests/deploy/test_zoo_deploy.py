"""The bundled ResNet-18, MobileNetV2 and transformer encoder, exported and run from C, match exe.run
exactly, also with two handles running from two threads at once (slow: each compiles a network)."""
import shutil
import subprocess

import numpy as np
import pytest

import loopweave as lw
from loopweave.nn_ops.testing import model_zoo

CC = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")

# one float32 input, one output: read argv[1], write argv[2]; argv[3] threads; then two handles, two threads
APP_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"
struct job { lw_model *m; const void *in; void *out; int status; };
static void *work(void *p) {
    struct job *j = p; const void *ins[1] = {j->in}; void *outs[1] = {j->out}; int k;
    for (k = 0; k < 3 && j->status == 0; k++) j->status = lw_model_run(j->m, ins, outs);
    return NULL;
}
static size_t numel(const lw_model *m, int out) {
    int64_t d[8]; size_t n = 1; int r = out ? lw_model_output_shape(m, 0, d, 8) : lw_model_input_shape(m, 0, d, 8), k;
    for (k = 0; k < r; k++) n *= (size_t)d[k];
    return n;
}
int main(int argc, char **argv) {
    lw_model *a, *b; pthread_t t1, t2; FILE *f;
    if (argc < 4 || lw_model_create(&a, atoi(argv[3])) || lw_model_create(&b, atoi(argv[3]))) return 2;
    size_t nin = numel(a, 0), nout = numel(a, 1);
    float *x = malloc(nin * 4), *y = malloc(nout * 4), *y1 = malloc(nout * 4), *y2 = malloc(nout * 4);
    f = fopen(argv[1], "rb"); if (fread(x, 4, nin, f) != nin) return 3; fclose(f);
    const void *ins[1] = {x}; void *outs[1] = {y};
    if (lw_model_run(a, ins, outs)) { fprintf(stderr, "%s\n", lw_last_error()); return 4; }
    struct job j1 = {a, x, y1, 0}, j2 = {b, x, y2, 0};
    pthread_create(&t1, NULL, work, &j1); pthread_create(&t2, NULL, work, &j2);
    pthread_join(t1, NULL); pthread_join(t2, NULL);
    if (j1.status || j2.status || memcmp(y1, y, nout * 4) || memcmp(y2, y, nout * 4)) return 5;
    f = fopen(argv[2], "wb"); fwrite(y, 4, nout, f); fclose(f);
    lw_model_destroy(a); lw_model_destroy(b);
    return 0;
}
"""


@pytest.mark.slow
@pytest.mark.skipif(CC is None, reason="no C compiler")
@pytest.mark.parametrize("name", ["resnet18", "mobilenet_v2", "transformer_encoder"])
def test_zoo_model_from_c_matches_run(name, tmp_path):
    exe = lw.compile(lw.from_onnx(getattr(model_zoo, name)()), progress=False)
    lib = exe.export_library(tmp_path / "model.so")
    (tmp_path / "app.c").write_text(APP_C)
    subprocess.run([CC, "-O1", "-o", str(tmp_path / "app"), str(tmp_path / "app.c"), str(lib), "-lpthread",
                    f"-Wl,-rpath,{tmp_path}"], check=True, cwd=tmp_path)
    (in_name, in_shape, _), (_, out_shape, _) = exe.inputs[0], exe.outputs[0]
    x = np.random.default_rng(0).standard_normal(in_shape).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    proc = subprocess.run([str(tmp_path / "app"), str(tmp_path / "x.bin"), str(tmp_path / "y.bin"), "2"],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, (proc.returncode, proc.stderr)
    y = np.fromfile(tmp_path / "y.bin", np.float32).reshape(out_shape)
    np.testing.assert_array_equal(y, exe.run({in_name: x})[0])
