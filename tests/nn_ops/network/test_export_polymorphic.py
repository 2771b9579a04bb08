"""``export_library`` of a compile-once network (``network/export_polymorphic.py``): a C program runs
the library at the sizes it passes, and gets Python's outputs; bad sizes are error codes naming them."""
import os
import shutil
import subprocess

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.network.export_polymorphic import API_FUNCTIONS  # noqa: E402
from loopweave.nn_ops.network.polymorphic_executable import PolymorphicExecutable  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder, transformer_encoder  # noqa: E402

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc) to link and call the library")

# argv: input file, output file, then one value per size; prints the output's shape, writes it
MAIN_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"

int main(int argc, char **argv) {
    lw_model *m;
    int64_t sizes[8], dims[8];
    long long count = 1, out_count = 1;
    int i, rank, status;
    float *x, *y;
    FILE *f;
    if (lw_model_create(&m, 2)) { fprintf(stderr, "%s\n", lw_last_error()); return 1; }
    if (lw_model_num_sizes(m) != argc - 3) { fprintf(stderr, "wrong number of sizes\n"); return 1; }
    for (i = 0; i < argc - 3; i++) sizes[i] = atoll(argv[3 + i]);
    rank = lw_model_input_shape(m, 0, sizes, dims, 8);
    if (rank < 0) { fprintf(stderr, "%d %s\n", rank, lw_last_error()); return 2; }
    for (i = 0; i < rank; i++) count *= dims[i];
    x = malloc((size_t)count * 4);
    f = fopen(argv[1], "rb");
    if (fread(x, 4, (size_t)count, f) != (size_t)count) return 3;
    fclose(f);
    rank = lw_model_output_shape(m, 0, sizes, dims, 8);
    if (rank < 0) { fprintf(stderr, "%d %s\n", rank, lw_last_error()); return 2; }
    for (i = 0; i < rank; i++) { out_count *= dims[i]; printf("%s%lld", i ? " " : "", (long long)dims[i]); }
    printf("\n");
    y = malloc((size_t)out_count * 4);
    {
        const void *ins[1] = {x};
        void *outs[1] = {y};
        status = lw_model_run(m, sizes, ins, outs);
    }
    if (status) { fprintf(stderr, "%d %s\n", status, lw_last_error()); return 2; }
    f = fopen(argv[2], "wb");
    fwrite(y, 4, (size_t)out_count, f);
    fclose(f);
    lw_model_destroy(m);
    return 0;
}
"""


def _app(folder, lib):
    (folder / "app.c").write_text(MAIN_C)
    subprocess.run([CC, "-O1", "-o", str(folder / "app"), str(folder / "app.c"), str(lib), f"-Wl,-rpath,{folder}"],
                   check=True, cwd=folder, capture_output=True, text=True)
    return folder / "app"


def _run(folder, app, x, sizes):
    x.tofile(folder / "x.bin")
    return subprocess.run([str(app), str(folder / "x.bin"), str(folder / "y.bin"), *map(str, sizes)],
                          capture_output=True, text=True, timeout=60)


@pytest.fixture(scope="module")
def encoder_library(tmp_path_factory):
    tmp_path = tmp_path_factory.mktemp("encoder")
    model = transformer_encoder(batch=None, seq=None, hidden=64, heads=2, layers=1, ffn=128)
    exe = lw.compile(lw.from_onnx(model))
    assert isinstance(exe, PolymorphicExecutable)
    return tmp_path, exe, exe.export_library(tmp_path / "model.so")


def test_a_compile_once_encoder_runs_from_c_at_the_sizes_it_is_given(encoder_library):
    tmp_path, exe, lib = encoder_library
    header = (tmp_path / "model.h").read_text()
    assert "sizes:  batch, seq" in header and "LW_ERR_SIZE" in header
    nm = shutil.which("nm")
    if nm:      # only the API is exported: the kernels, the pool and the weights stay local
        out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
        exported = {line.split()[-1] for line in out.splitlines() if " T " in line}
        assert exported == {"lw_" + name for name in API_FUNCTIONS}
        assert all(f"lw_{name}(" in header for name in API_FUNCTIONS)
    app = _app(tmp_path, lib)
    for batch, seq in ((2, 7), (1, 1), (3, 33)):     # (1, 1): the one-row and one-token variants
        x = np.random.default_rng(seq).standard_normal((batch, seq, 64)).astype(np.float32)
        proc = _run(tmp_path, app, x, (batch, seq))
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.split() == [str(batch), str(seq), "64"]
        got = np.fromfile(tmp_path / "y.bin", np.float32).reshape(batch, seq, 64)
        np.testing.assert_array_equal(got, exe.run({"input": x})[0])
    proc = _run(tmp_path, app, np.zeros(1, np.float32), (2, 0))
    assert proc.returncode == 2
    assert proc.stderr.strip() == "-10 lw_model_input_shape: size 'seq' (sizes[1]) is 0; every size is a whole " \
                                  "number >= 1"


ERRORS_C = r"""
#include <stdio.h>
#include <stdint.h>
#include "model.h"
#define SHOW(what, status) printf("%s %d %s\n", what, (int)(status), lw_last_error())

int main(void) {
    lw_model *m;
    float buffer[4];
    const void *ins[1] = {buffer};
    void *outs[1] = {buffer};
    int64_t huge[2] = {2, INT64_C(1) << 62}, dims[3];
    if (lw_model_create(&m, 1)) return 1;
    SHOW("huge", lw_model_run(m, huge, ins, outs));
    SHOW("null_sizes", lw_model_run(m, NULL, ins, outs));
    SHOW("size_name", lw_model_size_name(m, 2) == NULL ? -2 : 0);
    SHOW("shape_huge", lw_model_output_shape(m, 0, huge, dims, 3));
    SHOW("rank_only", lw_model_output_shape(m, 0, NULL, NULL, 0));
    lw_model_destroy(m);
    return 0;
}
"""


def test_bad_sizes_from_c_are_error_codes_with_messages(encoder_library):
    tmp_path, _, lib = encoder_library
    (tmp_path / "errors.c").write_text(ERRORS_C)
    subprocess.run([CC, "-O1", "-o", str(tmp_path / "errors"), str(tmp_path / "errors.c"), str(lib),
                    f"-Wl,-rpath,{tmp_path}"], check=True, cwd=tmp_path, capture_output=True, text=True)
    proc = subprocess.run([str(tmp_path / "errors")], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    lines = dict(line.split(" ", 1) for line in proc.stdout.splitlines())
    assert lines["huge"].startswith("-10 lw_model_run: the sizes (batch = 2, seq = 4611686018427387904) are too "
                                    "large")
    assert lines["null_sizes"] == "-1 lw_model_run: sizes is NULL"
    assert lines["size_name"].startswith("-2 lw_model_size_name: size index 2 is out of range (the model has 2 sizes)")
    assert lines["shape_huge"].startswith("3 ")      # its dims (2, 2^62, 64) fit in int64; only the bytes do not
    assert lines["rank_only"].startswith("3 ")


def test_sizes_a_run_time_check_refuses_are_an_error_naming_the_check(tmp_path):
    b = OnnxBuilder(0)
    out = b.relu(b.node("AveragePool", ["input"], kernel_shape=[3, 3]))
    model = b.model(("N", 2, "H", "W"), out, ("N", 2, "Ho", "Wo"), name="pool")
    exe = lw.compile(lw.from_onnx(model))
    assert exe.signature.checks
    app = _app(tmp_path, exe.export_library(tmp_path / "model.so"))
    x = np.random.default_rng(0).standard_normal((1, 2, 5, 4)).astype(np.float32)
    proc = _run(tmp_path, app, x, (1, 5, 4))         # sizes in lw_model_size_name's order: H, N, W
    assert proc.returncode == 2 and proc.stderr.startswith("-10 lw_model_input_shape: the sizes do not fit the "
                                                           "model: node"), proc.stderr
    assert "(AveragePool)" in proc.stderr and "it needs H >= 3 (here H = 1, N = 5, W = 4)" in proc.stderr
    proc = _run(tmp_path, app, x, (5, 1, 4))
    assert proc.returncode == 0, proc.stderr
    got = np.fromfile(tmp_path / "y.bin", np.float32).reshape(1, 2, 3, 2)
    np.testing.assert_array_equal(got, exe.run({"input": x})[0])


def test_what_the_c_api_does_not_cover_is_refused_by_name(tmp_path):
    b = OnnxBuilder(0)
    model = b.model(("N", 4), b.relu("input"), ("N", 4))
    exe = lw.compile(lw.from_onnx(model))
    with pytest.raises(lw.ArgumentError, match=r"params='side' is for static shapes only"):
        exe.export_library(tmp_path / "m.so", params="side")
    with pytest.raises(lw.ArgumentError, match=r"levels= .* is for static shapes only"):
        exe.export_library(tmp_path / "m.so", levels=[exe])
    with pytest.raises(lw.ArgumentError, match=r"a shared library \(.so\)"):
        exe.export_library(tmp_path / "m.o")
