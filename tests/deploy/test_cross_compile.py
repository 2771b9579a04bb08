"""Cross-compilation: a target string names another CPU; its code follows that CPU's
vector width and features, refuses to run here when this machine cannot run it, and exports as one
object (or a library linked by a cross compiler)."""
import os
import re
import shutil
import struct
import subprocess

import numpy as np
import pytest

import loopweave as lw
from loopweave.errors import ArgumentError, BuildError
from loopweave.nn_ops.testing import model_zoo
from loopweave.target import compiling_for, host_target, parse_target, resolve_target

AARCH64 = "llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1"
EM_AARCH64, EM_X86_64 = 183, 62
CC = shutil.which(os.environ.get("CC", "cc")) or shutil.which("gcc") or shutil.which("clang")
OBJDUMP = shutil.which("objdump")
CROSS_CC = shutil.which("aarch64-linux-gnu-gcc")
QEMU = shutil.which("qemu-aarch64")
on_x86 = pytest.mark.skipif(host_target().arch != "x86_64", reason="checks x86-64 code run on an x86-64 host")


def _has(*features) -> bool:
    return set(features) <= host_target().enabled_features()


# ---------------------------------------------------------------- reading an ELF object without tools
def _elf(data: bytes):
    """(e_machine, [(section name, type, bytes)]) of a little-endian ELF64 file."""
    assert data[:4] == b"\x7fELF" and data[4] == 2 and data[5] == 1, "not a little-endian ELF64 file"
    machine = struct.unpack_from("<H", data, 18)[0]
    shoff, = struct.unpack_from("<Q", data, 40)
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", data, 58)
    headers = [struct.unpack_from("<IIQQQQIIQQ", data, shoff + k * shentsize) for k in range(shnum)]
    strtab = headers[shstrndx]
    names = data[strtab[4]:strtab[4] + strtab[5]]
    sections = []
    for name, kind, _, _, offset, size, *_ in headers:
        sections.append((names[name:names.index(b"\0", name)].decode(), kind, data[offset:offset + size]))
    return machine, sections


def _relocation_types(sections):
    types = set()
    for _, kind, body in sections:
        if kind == 4:      # SHT_RELA: r_offset, r_info, r_addend
            types |= {struct.unpack_from("<QQq", body, k)[1] & 0xFFFFFFFF for k in range(0, len(body), 24)}
    return types


def _dynamic_tags(data: bytes):
    """The d_tag values of a shared library's .dynamic section."""
    _, sections = _elf(data)
    body = next(b for n, _, b in sections if n == ".dynamic")
    return {struct.unpack_from("<qQ", body, k)[0] for k in range(0, len(body), 16)}


def _aarch64_assembly(exe) -> str:
    """The assembly LLVM makes of the network's kernels for its (aarch64) target."""
    from llvmlite import binding as llvm
    from loopweave.backends.llvm.jit import cross_target_machine
    machine = cross_target_machine(exe.target)
    return "".join(machine.emit_assembly(llvm.parse_assembly(text)) for text in exe.kernels_llvm_ir().values())


def _disassembly(objects) -> str:
    out = []
    for k, obj in enumerate(objects):
        path = f"/tmp/loopweave-cross-{os.getpid()}-{k}.o"
        with open(path, "wb") as f:
            f.write(obj)
        try:
            out.append(subprocess.run([OBJDUMP, "-d", "--no-show-raw-insn", path], capture_output=True, text=True,
                                      check=True).stdout)
        finally:
            os.unlink(path)
    return "\n".join(out)


def _ort(model, x):
    import onnxruntime as ort
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, {sess.get_inputs()[0].name: x})[0]


# ---------------------------------------------------------------- target strings
def test_target_strings_name_the_cpu_its_vectors_and_features():
    arm = resolve_target(AARCH64)
    assert (arm.arch, arm.cpu, arm.triple, arm.vector_bits, arm.lanes("float32")) == \
        ("aarch64", "neoverse-n1", "aarch64-linux-gnu", 128, 4)
    assert arm.has_fma and not arm.runs_here() and arm.key() != host_target().key()
    assert resolve_target("  llvm   -mtriple=aarch64-linux-gnu  -mcpu=neoverse-n1 ") == arm
    # "llvm" with no options, or naming this CPU, is the host itself
    assert resolve_target("llvm") is host_target()
    assert resolve_target(f"llvm -mcpu={host_target().cpu}") == host_target()
    # inside compiling_for, "llvm" is the CPU being compiled for (ops that pick layouts ask for it)
    with compiling_for(arm):
        assert resolve_target("llvm") is arm
    assert resolve_target("llvm") is host_target()


@on_x86
def test_x86_levels_are_explicit_feature_strings():
    v2 = parse_target("llvm -mcpu=x86-64-v2")
    enabled = v2.enabled_features()
    assert {"sse4.2", "popcnt", "ssse3"} <= enabled and not enabled & {"avx", "avx2", "fma", "avx512f"}
    assert v2.vector_bits == 128 and v2.lanes("float32") == 4 and not v2.has_fma
    # every other feature LLVM knows is switched off explicitly: the CPU name cannot add AVX-512
    assert "-avx512f" in v2.features.split(",") and "-avx" in v2.features.split(",")
    assert v2.runs_here() == _has(*enabled)
    haswell = parse_target("llvm -mcpu=haswell")
    assert haswell.vector_bits == 256 and haswell.has_fma and "avx512f" not in haswell.enabled_features()
    assert parse_target("llvm -mcpu=x86-64-v4").vector_bits == 512
    no_fma = parse_target("llvm -mcpu=haswell -mattr=-fma")
    assert not no_fma.has_fma and no_fma.features.split(",")[-1] == "-fma"
    # a feature this CPU lacks makes the target one it cannot run
    missing = next(f for f in ("amx-tile", "avx512fp16", "avx10.1", "sse4a") if not _has(f))
    assert not parse_target(f"llvm -mcpu=x86-64-v2 -mattr=+{missing}").runs_here()


@pytest.mark.parametrize("text, message", [
    ("llvm -mcpu", "cannot read '-mcpu'"),
    ("llvm -march=armv8", "cannot read '-march=armv8'.*-mtriple=<triple>"),
    ("llvm -mcpu=a -mcpu=b", "each at most once"),
    ("llvm -mtriple=aarch64-apple-darwin", "compiles for Linux on x86_64 or aarch64"),
    ("llvm -mtriple=riscv64-linux-gnu", "compiles for Linux on x86_64 or aarch64"),
    ("llvm -mtriple=x86_64-linux-gnu -mcpu=pentium9", "does not know which features x86 CPU 'pentium9'.*x86-64-v2"),
    ("llvm -mtriple=aarch64-linux-gnu -mattr=neon", "-mattr takes \\+feature or -feature items"),
    # LLVM would only warn on stderr and tune for nothing in particular
    ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n9", "does not know the aarch64 CPU 'neoverse-n9'.*neoverse-n1"),
    ("llvmm", "unknown target"),
])
def test_bad_target_strings_say_what_is_accepted(text, message):
    with pytest.raises(BuildError, match=message):
        resolve_target(text)


# ---------------------------------------------------------------- aarch64: compiled, never run, exported
@pytest.fixture(scope="module")
def arm_network():
    model = model_zoo.small_cnn()
    return model, lw.compile(lw.from_onnx(model), target=AARCH64, progress=False)


def test_aarch64_network_follows_the_target_and_refuses_to_run(arm_network, tmp_path):
    model, exe = arm_network
    x = np.zeros((1, 3, 16, 16), np.float32)
    with pytest.raises(BuildError, match="compiled for aarch64-linux-gnu .*cannot run; export it"):
        exe.run({"input": x})
    with pytest.raises(BuildError, match="cannot run"):
        exe.profile({"input": x})
    with pytest.raises(ArgumentError, match="export_library"):
        exe.save(tmp_path / "m.lwx")
    # the blocked layout's channel block and the packed conv weights follow NEON's 4 lanes, not the host's
    packed = [w for w in exe.graph.initializers.values() if w.ndim == 6]
    assert packed and all(w.shape[-1] == 4 for w in packed)
    asm = _aarch64_assembly(exe)
    assert re.search(r"\bfmla\s+v\d+\.4s", asm), "no NEON FMA in the aarch64 kernels"
    assert not re.search(r"%[xyz]mm|%r[a-z0-9]+\b|\bvfmadd|\bmovaps\b", asm), "x86 code in the aarch64 kernels"


def test_aarch64_network_exports_one_object(arm_network, tmp_path):
    model, exe = arm_network
    obj = exe.export_library(tmp_path / "model.o")
    machine, sections = _elf(obj.read_bytes())
    assert machine == EM_AARCH64
    # every relocation is an AArch64 one (R_AARCH64_* are 257 and up; x86-64's are below 50)
    types = _relocation_types(sections)
    assert types and min(types) >= 257, sorted(types)
    # no absolute 64-bit addresses in code (R_AARCH64_MOVW_UABS_G*: 263-266): position-independent
    assert not types & {263, 264, 265, 266, 267}
    weights = next(body for name, _, body in sections if name == ".rodata.lw_weights")
    assert weights[:exe.weights.nbytes] == exe.weights.tobytes()
    # the header is the same API as for this machine; the C source of the API is written beside it
    here = lw.compile(lw.from_onnx(model), progress=False)
    header = (tmp_path / "model.h").read_text()
    from loopweave.nn_ops.network.export import header_text, source_text
    # (but for the CPU and the weights' size: dense weights are packed in panels of two of the target's
    # vectors, so a partial last panel is padded to another width)
    def same_api(text):
        return [line for line in text.splitlines() if "compiled for CPU" not in line and "weights:" not in line]
    assert same_api(header) == same_api(header_text(here, "lw_", "model.h", "model.c ./model.o"))
    assert f"weights: embedded, read-only ({exe.weights.nbytes} bytes)" in header
    assert "neoverse-n1 (aarch64-linux-gnu)" in header and "(cc app.c ./model.c ./model.o)" in header
    assert (tmp_path / "model.c").read_text() == source_text(exe, "lw_", "model.h")
    # params="side": the weights go to model.params beside the object, not into it
    side = exe.export_library(tmp_path / "side.o", params="side")
    assert ".rodata.lw_weights" not in [name for name, _, _ in _elf(side.read_bytes())[1]]
    assert (tmp_path / "side.params").read_bytes()[64:] == exe.weights.tobytes()
    assert "#define SIDE_PARAMS 1" in (tmp_path / "side.c").read_text()


def test_cross_export_errors_name_what_to_do(arm_network, tmp_path, monkeypatch):
    _, exe = arm_network
    with pytest.raises(BuildError, match="needs a C compiler for that machine.*gcc-aarch64-linux-gnu.*\\.o"):
        exe.export_library(tmp_path / "model.so")
    with pytest.raises(BuildError, match="'no-such-aarch64-gcc' was not found.*apt-get install gcc-aarch64-linux-gnu"):
        exe.export_library(tmp_path / "model.so", cc="no-such-aarch64-gcc")
    if CC is not None and host_target().arch != "aarch64":
        with pytest.raises(BuildError, match="builds for x86_64, not for aarch64"):
            exe.export_library(tmp_path / "model.so", cc=CC)
    with pytest.raises(ArgumentError, match="cc= links a shared library"):
        exe.export_library(tmp_path / "model.o", cc="aarch64-linux-gnu-gcc")
    assert not list(tmp_path.iterdir())
    here = lw.compile(lw.from_onnx(model_zoo.small_cnn()), progress=False)
    with pytest.raises(ArgumentError, match="names an object file.*cross-compiled.*'model.so'"):
        here.export_library(tmp_path / "model.o")


def test_a_model_of_symbolic_sizes_is_refused_for_another_cpu_before_compiling():
    """Kernels of symbolic sizes are for this machine (the C API has fixed shapes): a cross target is
    refused at lw.compile, naming the inputs and their symbols (it crashed the process before)."""
    net = lw.from_onnx(model_zoo.symbolic_sizes(model_zoo.small_cnn()))
    with pytest.raises(BuildError, match=r"symbolic sizes compiles only for a CPU this machine runs, not for "
                                         r"aarch64-linux-gnu .* input: float32\[N, 3, H, W\]: import it with "
                                         r"numbers for N, H, W"):
        lw.compile(net, target=AARCH64)


def test_aarch64_kernel_builds_refuses_to_run_and_exports(tmp_path):
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] * 2.0 + 1.0, name="B")
    s = lw.create_schedule(B)
    _, xi = s[B].split(B.op.axis[0], 16)
    s[B].vectorize(xi)
    f = lw.build(s, [A, B], target=AARCH64, name="axpb")
    a = np.ones(8, np.float32)
    with pytest.raises(BuildError, match="kernel 'axpb' was compiled for aarch64"):
        f(a, np.empty_like(a))
    with pytest.raises(BuildError, match="cannot run"):
        f.time(a, np.empty_like(a))
    assert re.search(r"\bfmla\s+v\d+\.4s", f.get_source("asm"))
    obj = f.export_library(tmp_path / "k.o", prefix="k_")
    machine, sections = _elf(obj.read_bytes())
    assert machine == EM_AARCH64 and min(_relocation_types(sections)) >= 257
    assert "int k_axpb(const float *A, float *B, int64_t n);" in (tmp_path / "k.h").read_text()
    assert "k_axpb" in (tmp_path / "k.c").read_text()
    assert "(cc app.c ./k.c ./k.o)" in (tmp_path / "k.h").read_text()


# ---------------------------------------------------------------- x86-64 without AVX-512: runs here
@on_x86
@pytest.mark.skipif(OBJDUMP is None, reason="objdump disassembles the kernels")
@pytest.mark.parametrize("cpu, needs, forbidden, wanted", [
    ("x86-64-v2", ("sse4.2", "popcnt"), r"%[yz]mm|\bv(mul|add|fmadd)", r"\b(mul|add)ps\s+.*%xmm"),
    ("haswell", ("avx2", "fma", "bmi2"), r"%zmm", r"\bvfmadd\w*ps\s+.*%ymm"),
])
def test_x86_target_without_avx512_is_vectorized_and_correct(cpu, needs, forbidden, wanted):
    if not _has(*needs) or not parse_target(f"llvm -mcpu={cpu}").runs_here():
        pytest.skip(f"this CPU cannot run {cpu} code")
    model = model_zoo.small_cnn()         # convolutions, pools, a dense layer
    exe = lw.compile(lw.from_onnx(model), target=f"llvm -mcpu={cpu}", progress=False)
    assert exe.target.cpu == cpu and exe.runs_here
    # conv weights are packed in blocks of the target's float32 lanes (4 for SSE, 8 for AVX2), not the host's
    packed = [w for w in exe.graph.initializers.values() if w.ndim == 6]
    assert packed and all(w.shape[-1] == exe.target.lanes("float32") for w in packed)
    asm = _disassembly(list(exe.kernels.values()) + [exe.runner_object])
    assert not re.search(forbidden, asm), re.search(forbidden, asm)
    assert len(re.findall(wanted, asm)) > 10, "the kernels are not vectorized for the target"
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    y = exe.run({"input": x})[0]
    np.testing.assert_allclose(y, _ort(model, x), rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(y, lw.compile(lw.from_onnx(model), progress=False).run({"input": x})[0],
                               rtol=1e-5, atol=1e-6)


# ---------------------------------------------------------------- a cross-compiled library, linked and run
APP_C = r"""
#include <stdio.h>
#include <stdlib.h>
#include "model.h"
int main(int argc, char **argv) {
    lw_model *m; int64_t d[8]; size_t nin = 1, nout = 1; int r, k;
    if (argc < 3 || lw_model_create(&m, 2)) { fprintf(stderr, "create: %s\n", lw_last_error()); return 2; }
    r = lw_model_input_shape(m, 0, d, 8); for (k = 0; k < r; k++) nin *= (size_t)d[k];
    r = lw_model_output_shape(m, 0, d, 8); for (k = 0; k < r; k++) nout *= (size_t)d[k];
    float *x = malloc(nin * 4), *y = malloc(nout * 4);
    FILE *f = fopen(argv[1], "rb"); if (fread(x, 4, nin, f) != nin) return 3; fclose(f);
    const void *ins[1] = {x}; void *outs[1] = {y};
    if (lw_model_run(m, ins, outs)) { fprintf(stderr, "run: %s\n", lw_last_error()); return 4; }
    f = fopen(argv[2], "wb"); fwrite(y, 4, nout, f); fclose(f);
    printf("%d %s\n", lw_model_run(m, NULL, outs), lw_last_error());
    lw_model_destroy(m);
    return 0;
}
"""


def _dynamic(data: bytes):
    """({d_tag: [values]}, [NEEDED library names]) of a shared library."""
    _, sections = _elf(data)
    body = next(b for n, _, b in sections if n == ".dynamic")
    strings = next(b for n, _, b in sections if n == ".dynstr")
    tags = {}
    for k in range(0, len(body), 16):
        tag, value = struct.unpack_from("<qQ", body, k)
        tags.setdefault(tag, []).append(value)
    needed = [strings[v:strings.index(b"\0", v)].decode() for v in tags.get(1, [])]
    return tags, needed


def _check_library(lib, machine):
    data = lib.read_bytes()
    assert _elf(data)[0] == machine
    tags, needed = _dynamic(data)
    assert 22 not in tags, "the library has text relocations (DT_TEXTREL)"
    assert not any(v & 0x4 for v in tags.get(30, [])), "the library has text relocations (DF_TEXTREL)"
    # libc, libm, pthread; the dynamic loader itself for thread-local storage (the API's last_error)
    assert all(n.split(".so")[0] in ("libc", "libm", "libpthread", "ld-linux-x86-64", "ld-linux-aarch64")
               for n in needed), needed


def _run_from_c(tmp_path, cc, lib, x, out_shape, run=()):
    (tmp_path / "app.c").write_text(APP_C)
    subprocess.run([cc, "-O1", "-o", "app", "app.c", str(lib), "-lpthread", f"-Wl,-rpath,{tmp_path}"],
                   check=True, cwd=tmp_path, capture_output=True, text=True)
    x.tofile(tmp_path / "x.bin")
    proc = subprocess.run([*run, "./app", "x.bin", "y.bin"], capture_output=True, text=True, cwd=tmp_path,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("-1 lw_model_run: inputs is NULL"), proc.stdout
    return np.fromfile(tmp_path / "y.bin", np.float32).reshape(out_shape)


@on_x86
@pytest.mark.skipif(CC is None, reason="no C compiler")
def test_cross_compiled_x86_library_is_position_independent_and_right(tmp_path):
    """An x86-64 target with a feature this CPU lacks goes the cross-compile way (one PIC object, linked
    by the C compiler given); AMX tiles are never used by code LLVM generates for float32 loops, so
    the library still runs here, and must give exe.run's answer."""
    if _has("amx-tile") or not _has("sse4.2", "popcnt"):
        pytest.skip("needs a CPU without AMX and with SSE4.2")
    model = model_zoo.small_cnn()
    exe = lw.compile(lw.from_onnx(model), target="llvm -mcpu=x86-64-v2 -mattr=+amx-tile", progress=False)
    assert not exe.runs_here
    lib = exe.export_library(tmp_path / "model.so")      # the system's cc builds for x86-64: no cc= needed
    _check_library(lib, EM_X86_64)
    out = subprocess.run(["nm", "-D", "--defined-only", str(lib)], capture_output=True, text=True).stdout
    assert sorted(line.split()[-1] for line in out.splitlines()) == sorted(
        "lw_" + f for f in ("model_create", "model_num_inputs", "model_num_outputs", "model_input_name",
                            "model_output_name", "model_input_dtype", "model_output_dtype", "model_input_shape",
                            "model_output_shape", "model_run", "model_destroy", "model_target", "last_error"))
    x = np.random.default_rng(2).standard_normal((1, 3, 16, 16)).astype(np.float32)
    y = _run_from_c(tmp_path, CC, lib, x, (1, 10))
    here = lw.compile(lw.from_onnx(model), target="llvm -mcpu=x86-64-v2", progress=False)
    np.testing.assert_allclose(y, here.run({"input": x})[0], rtol=1e-5, atol=1e-6)


@pytest.mark.skipif(CROSS_CC is None or QEMU is None,
                    reason="needs aarch64-linux-gnu-gcc and qemu-aarch64 (apt-get install gcc-aarch64-linux-gnu "
                           "qemu-user)")
def test_aarch64_library_runs_under_qemu(arm_network, tmp_path):
    model, exe = arm_network
    lib = exe.export_library(tmp_path / "model.so", cc=CROSS_CC)
    _check_library(lib, EM_AARCH64)
    x = np.random.default_rng(3).standard_normal((1, 3, 16, 16)).astype(np.float32)
    y = _run_from_c(tmp_path, CROSS_CC, lib, x, (1, 10), run=[QEMU, "-L", "/usr/aarch64-linux-gnu"])
    np.testing.assert_allclose(y, _ort(model, x), rtol=1e-4, atol=1e-5)


def test_cli_compile_cross_target(tmp_path, capsys):
    from loopweave import cli
    target = "llvm -mtriple=aarch64-linux-gnu -mcpu=cortex-a72"
    assert cli.main(["compile", "zoo:small_cnn", "--target", target, "--export", str(tmp_path / "net.o"), "-q"]) == 0
    assert f"wrote {tmp_path / 'net.o'}, {tmp_path / 'net.h'}, {tmp_path / 'net.c'}" in capsys.readouterr().out
    assert _elf((tmp_path / "net.o").read_bytes())[0] == EM_AARCH64
    assert cli.main(["compile", "zoo:small_cnn", "--target", target, "--export", str(tmp_path / "net.so"),
                     "--cc", "no-such-aarch64-gcc", "-q"]) != 0
    assert "'no-such-aarch64-gcc' was not found" in capsys.readouterr().err
    assert not (tmp_path / "net.so").exists()


def test_a_triple_llvm_has_no_backend_for_is_a_build_error():
    from loopweave.backends.llvm.jit import cross_target_machine
    from loopweave.target import Target
    with pytest.raises(BuildError, match="cannot generate code for 'nosucharch-linux-gnu'"):
        cross_target_machine(Target("llvm", "generic", "", 128, 1, triple="nosucharch-linux-gnu"))
