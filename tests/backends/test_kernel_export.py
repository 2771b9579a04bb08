"""f.export_library: one kernel from lw.build as a shared library, called from C with symbolic sizes."""
import os
import shutil
import subprocess

import numpy as np
import pytest

import loopweave as lw
from loopweave.errors import ArgumentError
from loopweave.kernels import design_matmul_schedule, matmul_kernel

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc) to link and call the library")

APP_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "mm.h"
int main(int argc, char **argv) {
    int64_t n = atoll(argv[1]); size_t bytes = (size_t)(n * n) * 4;
    float *a = malloc(bytes), *b = malloc(bytes), *c = malloc(bytes);
    FILE *f = fopen("ab.bin", "rb");
    if (fread(a, 1, bytes, f) != bytes || fread(b, 1, bytes, f) != bytes) return 3;
    fclose(f);
    if (k_set_num_threads(2) != 0) return 4;
    if (k_matmul(a, b, c, n) != 0) { fprintf(stderr, "%s\n", k_last_error()); return 5; }
    f = fopen("c.bin", "wb"); fwrite(c, 1, bytes, f); fclose(f);
    printf("%d %s\n", k_matmul(NULL, b, c, n), k_last_error());
    printf("%d %s\n", k_matmul(a, b, c, -1), k_last_error());
    printf("%d %s\n", k_set_num_threads(-2), k_last_error());
    return 0;
}
"""


def test_kernel_library_from_c(tmp_path):
    s, args = design_matmul_schedule()
    f = lw.build(s, args, name="matmul")
    lib = f.export_library(tmp_path / "mm.so", prefix="k_")
    header = (tmp_path / "mm.h").read_text()
    assert "int k_matmul(const float *A, const float *B, float *C, int64_t n);" in header
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    assert sorted(line.split()[-1] for line in out.splitlines()) == ["k_last_error", "k_matmul", "k_set_num_threads"]
    src = tmp_path / "app.c"
    src.write_text(APP_C)
    subprocess.run([CC, "-o", str(tmp_path / "app"), str(src), str(lib), f"-Wl,-rpath,{tmp_path}"], check=True,
                   cwd=tmp_path)
    n = 67
    a, b = np.random.default_rng(0).standard_normal((2, n, n)).astype(np.float32)
    np.concatenate([a.ravel(), b.ravel()]).tofile(tmp_path / "ab.bin")
    proc = subprocess.run([str(tmp_path / "app"), str(n)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0, proc.stderr
    c = np.fromfile(tmp_path / "c.bin", np.float32).reshape(n, n)
    expect = np.empty_like(c)
    f(a, b, expect)
    np.testing.assert_array_equal(c, expect)
    assert proc.stdout.splitlines() == [
        "-1 k_matmul: A is NULL", "-2 k_matmul: size n must be >= 0, got -1",
        "-3 k_set_num_threads: num_threads must be 0 (all cores) or 1 to 1024, got -2"]


def test_kernel_export_refuses_bad_prefix(tmp_path):
    f, _ = matmul_kernel()
    with pytest.raises(ArgumentError, match="prefix must be the start of a C identifier"):
        f.export_library(tmp_path / "mm.so", prefix="a-b")


def test_kernel_export_refuses_a_name_clash(tmp_path):
    s, args = design_matmul_schedule()
    f = lw.build(s, args, name="parallel_for")
    with pytest.raises(ArgumentError, match="lw_parallel_for would be both an exported function and a symbol"):
        f.export_library(tmp_path / "mm.so")
    assert not (tmp_path / "mm.so").exists()


def test_kernel_index_check_is_a_status_from_c(tmp_path):
    n, m = lw.var("n"), lw.var("m")
    A = lw.placeholder((n,), name="A", dtype="float32")
    idx = lw.placeholder((m,), name="idx", dtype="int64")
    B = lw.compute((m,), lambda i: A[idx[i]], name="B")
    f = lw.build(lw.create_schedule(B), [A, idx, B], name="take", checks="bounds")
    lib = f.export_library(tmp_path / "take.so", prefix="t_")
    assert "int t_take(const float *A, const int64_t *idx, float *B, int64_t n, int64_t m);" in \
        (tmp_path / "take.h").read_text()
    (tmp_path / "app.c").write_text(r"""
#include <stdio.h>
#include "take.h"
int main(void) {
    float a[4] = {10, 11, 12, 13}, b[2]; int64_t ok[2] = {3, 0}, bad[2] = {1, 7};
    int status = t_take(a, ok, b, 4, 2);
    printf("%d %g %g\n", status, b[0], b[1]);
    printf("%d %s\n", t_take(a, bad, b, 4, 2), t_last_error());
    return 0;
}
""")
    subprocess.run([CC, "-o", str(tmp_path / "app"), str(tmp_path / "app.c"), str(lib), f"-Wl,-rpath,{tmp_path}"],
                   check=True, cwd=tmp_path)
    proc = subprocess.run([str(tmp_path / "app")], capture_output=True, text=True, timeout=60)
    ok, bad = proc.stdout.splitlines()
    assert ok == "0 13 10"
    assert bad == ("-6 t_take: index 7 is out of range for dimension 0 of 'A' (read as A[idx[i]] in 'take'), "
                   "of size 4 (valid: 0 to 3)")


def _text_relocations(lib) -> bool:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf")
    dyn = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
    return "TEXTREL" in dyn


def test_kernel_library_is_position_independent(tmp_path):
    """The kernel is linked from its LLVM IR compiled position-independent (one object with the pool),
    not from its JIT object: the library has no text relocations."""
    s, args = design_matmul_schedule()
    f = lw.build(s, args, name="matmul")
    assert not _text_relocations(f.export_library(tmp_path / "mm.so"))
