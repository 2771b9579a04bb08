"""exe.export_library: a shared library + header with a C API, called from a C program compiled here."""
import functools
import os
import shutil
import subprocess

import numpy as np
import pytest

import loopweave as lw
from loopweave.backends.export import find_c_compiler
from loopweave.errors import ArgumentError, BuildError
from loopweave.nn_ops.testing import model_zoo

CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
pytestmark = pytest.mark.skipif(CC is None, reason="no C compiler (cc) to link and call the library")

API = ("model_create", "model_num_inputs", "model_num_outputs", "model_input_name", "model_output_name",
       "model_input_dtype", "model_output_dtype", "model_input_shape", "model_output_shape", "model_run",
       "model_destroy", "model_target", "last_error")

# runs the model on the raw bytes of argv[1], writes argv[2]; prints the signature it queried
MAIN_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "model.h"

static size_t numel(const lw_model *m, int i, int out) {
    int64_t dims[8]; size_t n = 1; int r, k;
    r = out ? lw_model_output_shape(m, i, dims, 8) : lw_model_input_shape(m, i, dims, 8);
    if (r < 0) { fprintf(stderr, "shape: %s\n", lw_last_error()); exit(3); }
    for (k = 0; k < r; k++) n *= (size_t)dims[k];
    return n;
}

struct job { lw_model *m; const void *in; void *out; int status; };
static void *run_job(void *p) {
    struct job *j = p; int k;
    const void *ins[1] = {j->in}; void *outs[1] = {j->out};
    for (k = 0; k < 20 && j->status == 0; k++) j->status = lw_model_run(j->m, ins, outs);
    return NULL;
}

int main(int argc, char **argv) {
    lw_model *m; int i, k, threads = atoi(argv[3]);
    if (lw_model_create(&m, threads) != 0) { fprintf(stderr, "create: %s\n", lw_last_error()); return 2; }
    for (i = 0; i < lw_model_num_inputs(m); i++) {
        int64_t dims[8]; int r = lw_model_input_shape(m, i, dims, 8);
        printf("input %s %s", lw_model_input_name(m, i), lw_model_input_dtype(m, i));
        for (k = 0; k < r; k++) printf(" %lld", (long long)dims[k]);
        printf("\n");
    }
    for (i = 0; i < lw_model_num_outputs(m); i++) {
        int64_t dims[8]; int r = lw_model_output_shape(m, i, dims, 8);
        printf("output %s %s", lw_model_output_name(m, i), lw_model_output_dtype(m, i));
        for (k = 0; k < r; k++) printf(" %lld", (long long)dims[k]);
        printf("\n");
    }
    size_t nin = numel(m, 0, 0), nout = numel(m, 0, 1);
    float *in = malloc(nin * 4), *out = malloc(nout * 4);
    FILE *f = fopen(argv[1], "rb");
    if (fread(in, 4, nin, f) != nin) return 4;
    fclose(f);
    const void *ins[1] = {in}; void *outs[1] = {out};
    if (lw_model_run(m, ins, outs) != 0) { fprintf(stderr, "run: %s\n", lw_last_error()); return 5; }
    f = fopen(argv[2], "wb"); fwrite(out, 4, nout, f); fclose(f);
    if (argc > 4) {   /* two handles run from two threads at once must give the same answer */
        lw_model *m2; pthread_t t1, t2;
        float *o1 = malloc(nout * 4), *o2 = malloc(nout * 4);
        if (lw_model_create(&m2, threads) != 0) return 6;
        struct job j1 = {m, in, o1, 0}, j2 = {m2, in, o2, 0};
        pthread_create(&t1, NULL, run_job, &j1); pthread_create(&t2, NULL, run_job, &j2);
        pthread_join(t1, NULL); pthread_join(t2, NULL);
        if (j1.status || j2.status || memcmp(o1, out, nout * 4) || memcmp(o2, out, nout * 4)) return 7;
        printf("threads ok\n");
        lw_model_destroy(m2);
    }
    lw_model_destroy(m);
    return 0;
}
"""

# every argument error: prints "name status message" per case
ERRORS_C = r"""
#include <stdio.h>
#include "model.h"
#define SHOW(name, status) printf("%s %d %s\n", name, (int)(status), lw_last_error())
int main(void) {
    lw_model *m = NULL; int64_t dims[8]; float buf[4096]; const void *ins[1] = {buf}; void *outs[1] = {buf};
    const void *null_in[1] = {NULL};
    SHOW("create_null", lw_model_create(NULL, 1));
    SHOW("create_threads_negative", lw_model_create(&m, -1));
    SHOW("create_threads_huge", lw_model_create(&m, 100000));
    SHOW("num_inputs_null", lw_model_num_inputs(NULL));
    SHOW("num_outputs_null", lw_model_num_outputs(NULL));
    if (lw_model_create(&m, 0) != 0) return 2;
    SHOW("input_name_index", lw_model_input_name(m, 1) == NULL ? -100 : 0);
    SHOW("output_name_negative", lw_model_output_name(m, -1) == NULL ? -100 : 0);
    SHOW("input_dtype_null", lw_model_input_dtype(NULL, 0) == NULL ? -100 : 0);
    SHOW("output_dtype_index", lw_model_output_dtype(m, 5) == NULL ? -100 : 0);
    SHOW("input_shape_index", lw_model_input_shape(m, 3, dims, 8));
    SHOW("input_shape_rank", lw_model_input_shape(m, 0, dims, 2));
    SHOW("output_shape_dims_null", lw_model_output_shape(m, 0, NULL, 8));
    SHOW("output_shape_rank_only", lw_model_output_shape(m, 0, NULL, 0));
    SHOW("run_null_model", lw_model_run(NULL, ins, outs));
    SHOW("run_null_inputs", lw_model_run(m, NULL, outs));
    SHOW("run_null_outputs", lw_model_run(m, ins, NULL));
    SHOW("run_null_input", lw_model_run(m, null_in, outs));
    lw_model_destroy(NULL);
    lw_model_destroy(m);
    return 0;
}
"""


def _compile_c(tmp_path, source: str, libs, name: str = "app"):
    src = tmp_path / f"{name}.c"
    src.write_text(source)
    exe_path = tmp_path / name
    subprocess.run([CC, "-O1", "-o", str(exe_path), str(src), *map(str, libs), "-lpthread",
                    f"-Wl,-rpath,{tmp_path}"], check=True, cwd=tmp_path, capture_output=True, text=True)
    return exe_path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("export")
    model = model_zoo.small_cnn()
    exe = lw.compile(lw.from_onnx(model), progress=False)
    lib = exe.export_library(tmp / "model.so")
    return tmp, exe, lib, model


def test_c_program_matches_run(exported):
    tmp, exe, lib, model = exported
    assert lib == tmp / "model.so" and (tmp / "model.h").exists()
    app = _compile_c(tmp, MAIN_C, [lib])
    x = np.random.default_rng(0).standard_normal(exe.inputs[0][1]).astype(np.float32)
    x.tofile(tmp / "x.bin")
    proc = subprocess.run([str(app), str(tmp / "x.bin"), str(tmp / "y.bin"), "2", "threads"],
                          capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    (in_name, in_shape, _), (out_name, out_shape, _) = exe.inputs[0], exe.outputs[0]
    assert proc.stdout.splitlines() == [f"input {in_name} float32 {' '.join(map(str, in_shape))}",
                                        f"output {out_name} float32 {' '.join(map(str, out_shape))}",
                                        "threads ok"]
    y = np.fromfile(tmp / "y.bin", np.float32).reshape(out_shape)
    np.testing.assert_array_equal(y, exe.run({in_name: x})[0])
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    np.testing.assert_allclose(y, sess.run(None, {in_name: x})[0], rtol=1e-4, atol=1e-4)


def test_argument_errors_from_c(exported):
    tmp, exe, lib, _ = exported
    app = _compile_c(tmp, ERRORS_C, [lib], "errors")
    proc = subprocess.run([str(app)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    rows = {line.split(" ", 2)[0]: line.split(" ", 2)[1:] for line in proc.stdout.splitlines()}
    expect = {
        "create_null": (-1, "lw_model_create: out is NULL"),
        "create_threads_negative": (-3, "num_threads must be 0 (all cores) or 1 to 1024, got -1"),
        "create_threads_huge": (-3, "got 100000"),
        "num_inputs_null": (-1, "lw_model_num_inputs: m is NULL"),
        "num_outputs_null": (-1, "lw_model_num_outputs: m is NULL"),
        "input_name_index": (-100, "input index 1 is out of range (the model has 1 inputs)"),
        "output_name_negative": (-100, "output index -1 is out of range"),
        "input_dtype_null": (-100, "lw_model_input_dtype: m is NULL"),
        "output_dtype_index": (-100, "output index 5 is out of range"),
        "input_shape_index": (-2, "input index 3 is out of range"),
        "input_shape_rank": (-5, "input 0 has rank 4, more than max_rank 2"),
        "output_shape_dims_null": (-1, "dims is NULL"),
        "run_null_model": (-1, "lw_model_run: m is NULL"),
        "run_null_inputs": (-1, "lw_model_run: inputs is NULL"),
        "run_null_outputs": (-1, "lw_model_run: outputs is NULL"),
        "run_null_input": (-1, f"inputs[0] (input '{exe.inputs[0][0]}') is NULL"),
    }
    for case, (status, message) in expect.items():
        got_status, got_message = int(rows[case][0]), rows[case][1] if len(rows[case]) > 1 else ""
        assert got_status == status and message in got_message, (case, rows[case])
    assert int(rows["output_shape_rank_only"][0]) == 2


def test_only_prefixed_symbols_and_libc_only(exported):
    tmp, _, lib, _ = exported
    nm = shutil.which("nm")
    if nm is None:
        pytest.skip("no nm")
    out = subprocess.run([nm, "-D", "--defined-only", str(lib)], capture_output=True, text=True, check=True).stdout
    assert sorted(line.split()[-1] for line in out.splitlines()) == sorted("lw_" + name for name in API)
    readelf = shutil.which("readelf")
    if readelf:
        dyn = subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout
        needed = {line.split("[")[1].split("]")[0] for line in dyn.splitlines() if "(NEEDED)" in line}
        assert all(n.split(".so")[0] in ("libc", "libm", "libpthread", "ld-linux-x86-64", "ld-linux-aarch64")
                   for n in needed), needed


def _text_relocations(lib) -> bool:
    readelf = shutil.which("readelf")
    if readelf is None:
        pytest.skip("no readelf")
    return "TEXTREL" in subprocess.run([readelf, "-d", str(lib)], capture_output=True, text=True, check=True).stdout


def test_library_is_position_independent(exported, tmp_path):
    """The kernels are linked from their LLVM IR compiled position-independent (not from their JIT
    objects): no text relocations, so a loader that forbids them (some SELinux policies) takes it."""
    _, exe, lib, _ = exported
    assert not _text_relocations(lib)
    # kernels the kernel cache supplied (object code only) are lowered again to the same symbols
    from loopweave.nn_ops.network import kernel_cache
    again = lw.compile(lw.from_onnx(model_zoo.small_cnn()), progress=False)
    relowered = [sym for sym, get in again.kernel_ir.items() if not isinstance(get, functools.partial)]
    if not relowered:
        pytest.skip(f"the kernel cache supplied no kernel (applies: {kernel_cache.applies()})")
    ir = again.kernels_llvm_ir()
    assert sorted(ir) == sorted(again.kernels) and all(f'@"{sym}"' in ir[sym] or f"@{sym}(" in ir[sym]
                                                       for sym in relowered)
    # a loaded .lwx holds object code only: it still exports, from its JIT objects (text relocations)
    exe.save(tmp_path / "m.lwx")
    loaded = lw.load(tmp_path / "m.lwx")
    assert loaded.kernel_ir is None
    assert _text_relocations(loaded.export_library(tmp_path / "loaded.so"))


def test_two_prefixes_link_into_one_program(tmp_path):
    exes = [lw.compile(lw.from_onnx(model_zoo.small_cnn(classes=c, seed=c)), progress=False) for c in (10, 7)]
    for prefix, exe in zip(("alpha_", "beta_"), exes):
        exe.export_library(tmp_path / f"{prefix}net.so", prefix=prefix)
        out = subprocess.run(["nm", "-D", "--defined-only", str(tmp_path / f"{prefix}net.so")],
                             capture_output=True, text=True).stdout
        assert all(line.split()[-1].startswith(prefix) for line in out.splitlines())
    source = r"""
#include <stdio.h>
#include "alpha_net.h"
#include "beta_net.h"
int main(void) {
    static float x[3 * 16 * 16], ya[10], yb[7];
    FILE *f = fopen("x.bin", "rb"); if (fread(x, 4, 768, f) != 768) return 3; fclose(f);
    alpha_model *a; beta_model *b;
    const void *ins[1] = {x}; void *oa[1] = {ya}, *ob[1] = {yb};
    if (alpha_model_create(&a, 1) || beta_model_create(&b, 2)) return 2;
    if (alpha_model_run(a, ins, oa) || beta_model_run(b, ins, ob)) return 4;
    f = fopen("ya.bin", "wb"); fwrite(ya, 4, 10, f); fclose(f);
    f = fopen("yb.bin", "wb"); fwrite(yb, 4, 7, f); fclose(f);
    printf("%d %d\n", alpha_model_num_outputs(a), BETA_ERR_NULL);
    alpha_model_destroy(a); beta_model_destroy(b);
    return 0;
}
"""
    app = _compile_c(tmp_path, source, [tmp_path / "alpha_net.so", tmp_path / "beta_net.so"])
    x = np.random.default_rng(1).standard_normal((1, 3, 16, 16)).astype(np.float32)
    x.tofile(tmp_path / "x.bin")
    proc = subprocess.run([str(app)], capture_output=True, text=True, cwd=tmp_path, timeout=60)
    assert proc.returncode == 0 and proc.stdout.split() == ["1", "-1"], proc.stderr
    for name, exe, n in (("ya.bin", exes[0], 10), ("yb.bin", exes[1], 7)):
        y = np.fromfile(tmp_path / name, np.float32).reshape(1, n)
        np.testing.assert_array_equal(y, exe.run({exe.inputs[0][0]: x})[0])


def test_export_refuses_bad_arguments(exported, tmp_path, monkeypatch):
    _, exe, _, _ = exported
    with pytest.raises(ArgumentError, match="prefix must be the start of a C identifier"):
        exe.export_library(tmp_path / "m.so", prefix="9bad")
    with pytest.raises(ArgumentError, match="params must be 'embed' .* or 'side'"):
        exe.export_library(tmp_path / "m.so", params="beside")
    with pytest.raises(ArgumentError, match="does not exist"):
        exe.export_library(tmp_path / "missing" / "m.so")
    monkeypatch.setenv("CC", "no-such-compiler-xyz")
    with pytest.raises(BuildError, match="was not found.*install one"):
        exe.export_library(tmp_path / "m.so")
    assert not (tmp_path / "m.so").exists()
    monkeypatch.setenv("CC", f"{CC} -O1")        # a compiler given with words after it
    assert find_c_compiler() == [CC, "-O1"]
    assert exe.export_library(tmp_path / "m.so").exists()
    monkeypatch.delenv("CC")
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BuildError, match="found none: install one"):
        find_c_compiler()


def test_cli_compile_export(tmp_path, capsys):
    from loopweave import cli
    lib = tmp_path / "net.so"
    assert cli.main(["compile", "zoo:small_cnn", "--export", str(lib), "--prefix", "net_", "-q"]) == 0
    assert f"wrote {lib}, {tmp_path / 'net.h'}" in capsys.readouterr().out
    assert "int net_model_run(net_model *m" in (tmp_path / "net.h").read_text()
    assert cli.main(["compile", "zoo:small_cnn", "--export", str(tmp_path / "s.so"), "--params", "side", "-q"]) == 0
    assert f"{tmp_path / 's.params'}" in capsys.readouterr().out and (tmp_path / "s.params").exists()
    assert cli.main(["compile", "zoo:small_cnn", "-q"]) == 2
    assert "give -o model.lwx, --export model.so, or both" in capsys.readouterr().err
    assert cli.main(["compile", "zoo:small_cnn", "--export", str(lib), "--prefix", "1x", "-q"]) == 2
    assert "prefix must be the start of a C identifier" in capsys.readouterr().err


def test_index_error_in_data_is_a_status_from_c(tmp_path):
    from onnx import TensorProto, helper, numpy_helper
    table = numpy_helper.from_array(np.arange(12, dtype=np.float32).reshape(4, 3), "table")
    graph = helper.make_graph([helper.make_node("Gather", ["table", "ids"], ["rows"], name="lookup", axis=0)],
                              "g", [helper.make_tensor_value_info("ids", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("rows", TensorProto.FLOAT, [2, 3])], [table])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    exe = lw.compile(lw.from_onnx(model), progress=False)
    exe.export_library(tmp_path / "model.so")
    source = r"""
#include <stdio.h>
#include "model.h"
int main(void) {
    lw_model *m; int64_t ids[2] = {1, 9}, ok[2] = {3, -1}; float rows[6];
    const void *bad_in[1] = {ids}, *ok_in[1] = {ok}; void *outs[1] = {rows};
    if (lw_model_create(&m, 1)) return 2;
    printf("%d %s\n", lw_model_run(m, bad_in, outs), lw_last_error());
    int status = lw_model_run(m, ok_in, outs);
    printf("%d %g %g\n", status, rows[0], rows[5]);
    lw_model_destroy(m);
    return 0;
}
"""
    app = _compile_c(tmp_path, source, [tmp_path / "model.so"])
    proc = subprocess.run([str(app)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    bad, good = proc.stdout.splitlines()
    assert bad.startswith("-6 lw_model_run: node 'lookup': index 9 is out of range for axis 0 of 'table' "
                          "(an index read from 'ids'), of size 4"), bad
    assert "of size 4 (valid: -4 to 3, negative ones counting from the end)" in bad
    assert good == "0 9 11"


def test_side_params_are_mapped_at_create(tmp_path):
    exe = lw.compile(lw.from_onnx(model_zoo.small_cnn()), progress=False)
    lib = exe.export_library(tmp_path / "model.so", params="side")
    side = tmp_path / "model.params"
    assert side.stat().st_size == 64 + exe.weights.nbytes
    assert lib.stat().st_size < exe.weights.nbytes + 64 * 1024
    assert "weights: in model.params" in (tmp_path / "model.h").read_text()
    app = _compile_c(tmp_path, MAIN_C, [lib])
    x = np.random.default_rng(2).standard_normal(exe.inputs[0][1]).astype(np.float32)
    x.tofile(tmp_path / "x.bin")

    def run_app():
        return subprocess.run([str(app), str(tmp_path / "x.bin"), str(tmp_path / "y.bin"), "1"],
                              capture_output=True, text=True, timeout=60)

    proc = run_app()
    assert proc.returncode == 0, proc.stderr
    y = np.fromfile(tmp_path / "y.bin", np.float32).reshape(exe.outputs[0][1])
    np.testing.assert_array_equal(y, exe.run({exe.inputs[0][0]: x})[0])
    good = side.read_bytes()
    side.unlink()
    proc = run_app()
    assert proc.returncode == 2 and "cannot open the weights file" in proc.stderr
    assert f"{tmp_path}/model.params: No such file or directory" in proc.stderr
    other = lw.compile(lw.from_onnx(model_zoo.small_cnn(classes=7)), progress=False)
    other.export_library(tmp_path / "other.so", params="side")
    (tmp_path / "other.params").replace(side)
    proc = run_app()
    assert proc.returncode == 2 and "it belongs to another model or export" in proc.stderr
    side.write_bytes(good[:64 + 8] + bytes([good[72] ^ 1]) + good[73:])   # one weight bit flipped
    proc = run_app()
    assert proc.returncode == 2 and "is damaged" in proc.stderr
    side.write_bytes(good[:-1] + bytes([good[-1] ^ 128]))                 # the last, zero-padded word
    assert run_app().returncode == 2
    side.write_bytes(good)
    assert run_app().returncode == 0
    side.write_bytes(good[:30] + bytes([good[30] ^ 1]) + good[31:])       # the fingerprint differs
    proc = run_app()
    assert proc.returncode == 2 and "was not written with this library" in proc.stderr


def test_dynamic_executable_says_to_fix_the_shapes(tmp_path):
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Relu", ["x"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", 4])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", 4])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])
    for polymorphic in (False,):            # per shape (compiled once exports: test_export_polymorphic.py)
        with pytest.raises(ArgumentError, match=r"export_library needs fixed input shapes.* inputs are x: "
                                                r"float32\[N, 4\]: import it with numbers for N: "
                                                r"lw.from_onnx\(model, input_shapes=\{'x': \(N, 4\)\}\) "
                                                r"\(CLI: --input-shape x=Nx4\)"):
            lw.compile(lw.from_onnx(model), progress=False, polymorphic=polymorphic).export_library(tmp_path / "m.so")
    exe = lw.compile(lw.from_onnx(model, input_shapes={"x": (2, 4)}), progress=False)
    assert exe.export_library(tmp_path / "m.so").exists()


SHARED_C = r"""
#include <pthread.h>
#include <stdio.h>
#include <string.h>
#include "model.h"
static lw_model *m;
static float x[768], ref[10];
struct job { int ok, busy, other, wrong; char message[256]; };
static void *work(void *p) {
    struct job *j = p; float y[10]; const void *ins[1] = {x}; void *outs[1] = {y}; int k;
    for (k = 0; k < 3000; k++) {
        int status = lw_model_run(m, ins, outs);
        if (status == 0) { j->ok++; j->wrong += memcmp(y, ref, sizeof y) != 0; }
        else if (status == LW_ERR_BUSY) { j->busy++; strncpy(j->message, lw_last_error(), 255); }
        else j->other++;
    }
    return NULL;
}
int main(void) {
    struct job a = {0}, b = {0}; pthread_t t1, t2; const void *ins[1] = {x}; void *outs[1] = {ref}; int k;
    for (k = 0; k < 768; k++) x[k] = (float)(k % 7) - 3.0f;
    if (lw_model_create(&m, 1) || lw_model_run(m, ins, outs)) return 2;
    pthread_create(&t1, NULL, work, &a); pthread_create(&t2, NULL, work, &b);
    pthread_join(t1, NULL); pthread_join(t2, NULL);
    printf("%d %d %d %d\n", a.ok + b.ok, a.busy + b.busy, a.other + b.other, a.wrong + b.wrong);
    printf("%s\n", a.busy ? a.message : b.message);
    return 0;
}
"""


def test_one_handle_shared_by_two_threads_is_busy_not_wrong(exported):
    tmp, _, lib, _ = exported
    app = _compile_c(tmp, SHARED_C, [lib], "shared")
    proc = subprocess.run([str(app)], capture_output=True, text=True, timeout=60)
    assert proc.returncode == 0, proc.stderr
    counts, message = proc.stdout.splitlines()[0].split(), proc.stdout.splitlines()[1:]
    ok, busy, other, wrong = map(int, counts)
    assert ok + busy == 6000 and other == 0 and wrong == 0
    if busy:     # the threads overlapped (nearly always; not guaranteed on a loaded machine)
        assert message == ["lw_model_run: this handle is running on another thread; create one handle per thread"]


def test_weights_checksum_sees_every_single_bit_flip():
    from loopweave.nn_ops.network.export import weights_checksum
    blob = np.random.default_rng(0).integers(0, 256, 37, dtype=np.uint8)     # not a multiple of 8
    base = weights_checksum(blob)
    for byte in range(37):
        for bit in range(8):
            damaged = blob.copy()
            damaged[byte] ^= 1 << bit
            assert weights_checksum(damaged) != base
