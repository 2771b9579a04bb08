"""One library for several x86-64 levels (``network/export_levels.py``): the first level this CPU runs is
taken at create, runs exactly as that level's own build, and a CPU that runs none gets ``LW_ERR_CPU``."""
import ctypes
import subprocess

import numpy as np
import pytest

import loopweave as lw
from loopweave.errors import ArgumentError
from loopweave.nn_ops.network.export_levels import export_levels
from loopweave.nn_ops.testing import model_zoo
from loopweave.target import host_target, resolve_target

pytestmark = pytest.mark.skipif(host_target().arch != "x86_64", reason="x86-64 CPU levels need an x86-64 machine")

ERR_CPU = -9
V3, V4, SPR = "llvm -mcpu=x86-64-v3", "llvm -mcpu=x86-64-v4", "llvm -mcpu=sapphirerapids"


def _unrunnable() -> str:
    """A target whose code this CPU cannot run (v4 on an AVX2 CPU, else Sapphire Rapids' AVX-512 FP16)."""
    for text in (V4, SPR):
        if not resolve_target(text).runs_here():
            return text
    pytest.skip("this CPU runs every level the test knows (it has AVX-512 FP16)")


@pytest.fixture(scope="module")
def graph():
    return lw.from_onnx(model_zoo.small_cnn())


@pytest.fixture(scope="module")
def build(graph):
    made = {}

    def compiled(target):
        if target not in made:
            made[target] = lw.compile(graph, target=target, progress=False)
        return made[target]
    return compiled


def _open(path):
    lib = ctypes.CDLL(str(path))
    lib.lw_model_target.restype = ctypes.c_char_p
    lib.lw_last_error.restype = ctypes.c_char_p
    return lib


def _run(lib, exe, x):
    m = ctypes.c_void_p()
    status = lib.lw_model_create(ctypes.byref(m), 1)
    if status:
        return status, lib.lw_last_error().decode(), None, None
    y = np.empty(exe.outputs[0][1], np.float32)
    ins, outs = (ctypes.c_void_p * 1)(x.ctypes.data), (ctypes.c_void_p * 1)(y.ctypes.data)
    assert lib.lw_model_run(m, ins, outs) == 0, lib.lw_last_error()
    target = lib.lw_model_target(m).decode()
    lib.lw_model_destroy(m)
    return 0, "", target, y


def _input(exe):
    return np.random.default_rng(0).standard_normal(exe.inputs[0][1]).astype(np.float32)


def test_the_most_capable_level_this_cpu_runs_is_taken_and_computes_as_its_own_build(build, tmp_path):
    levels = [build(V3), build(V4)]
    path = export_levels(levels, tmp_path / "model.so")
    expected = V4 if resolve_target(V4).runs_here() else V3
    x = _input(levels[0])
    status, error, target, y = _run(_open(path), levels[0], x)
    assert status == 0, error
    assert target == resolve_target(expected).cpu
    reference = build(expected).run({levels[0].inputs[0][0]: x})[0]
    np.testing.assert_allclose(y, reference, rtol=1e-6, atol=1e-6)
    header = (tmp_path / "model.h").read_text()
    assert "x86-64-v4, x86-64-v3" in header and "LW_ERR_CPU" in header and "one copy per level" in header
    # only the plain API is exported: the levels' functions, kernels, pools and weights stay inside
    symbols = subprocess.run(["nm", "-D", "--defined-only", str(path)], capture_output=True, text=True).stdout.split()
    exported = sorted(s for s in symbols if s.startswith("lw_"))
    assert exported and all(not s.startswith("lw_l0_") and not s.startswith("lw_l1_") for s in exported)
    assert "lw_model_create" in exported and "lw_model_target" in exported


def test_a_level_the_cpu_lacks_is_passed_over(build, tmp_path):
    wide = _unrunnable()
    levels = [build(V3), build(wide)]
    path = export_levels(levels, tmp_path / "model.so")
    status, error, target, _ = _run(_open(path), levels[0], _input(levels[0]))
    assert status == 0, error
    assert target == "x86-64-v3"


def test_a_cpu_that_runs_no_level_gets_err_cpu_naming_what_each_needs(build, tmp_path):
    wide = _unrunnable()
    single = build(wide).export_library(tmp_path / "one.so")
    status, error, _, _ = _run(_open(single), build(wide), _input(build(wide)))
    assert status == ERR_CPU
    assert "lw_model_create" in error and resolve_target(wide).cpu in error and "which this CPU lacks" in error
    other = SPR if wide == V4 else "llvm -mcpu=sapphirerapids -mattr=-avxvnni"
    path = export_levels([build(wide), build(other)], tmp_path / "none.so")
    status, error, _, _ = _run(_open(path), build(wide), _input(build(wide)))
    assert status == ERR_CPU
    assert "runs none of the builds" in error and "avx512f" in error


def test_levels_must_be_builds_of_one_network_for_distinct_cpus(build, tmp_path):
    with pytest.raises(ArgumentError, match="levels= takes the builds"):
        export_levels([build(V3)], tmp_path / "a.so")
    with pytest.raises(ArgumentError, match="same CPU"):
        export_levels([build(V3), build(V3)], tmp_path / "a.so")
    other = lw.compile(lw.from_onnx(model_zoo.small_cnn(size=8)), target=V4, progress=False)
    with pytest.raises(ArgumentError, match="not one network"):
        export_levels([build(V3), other], tmp_path / "a.so")


def test_an_executable_exports_itself_with_more_levels_by_target(build, tmp_path):
    exe = build(V3)
    path = exe.export_library(tmp_path / "model.so", levels=[V4])
    status, error, target, y = _run(_open(path), exe, _input(exe))
    assert status == 0, error
    assert target == ("x86-64-v4" if resolve_target(V4).runs_here() else "x86-64-v3")
    with pytest.raises(ArgumentError, match="params='embed'"):
        exe.export_library(tmp_path / "side.so", params="side", levels=[V4])
    loaded_path = tmp_path / "model.lwx"
    build("llvm").save(loaded_path)
    with pytest.raises(ArgumentError, match="loaded from a file"):
        lw.load(loaded_path).export_library(tmp_path / "again.so", levels=[V3])


def test_a_lwx_of_two_levels_loads_the_one_this_cpu_runs(build, tmp_path):
    exe = build(V3)
    path = tmp_path / "model.lwx"
    wide = V4 if resolve_target(V4).runs_here() else None
    if wide is None:
        with pytest.raises(ArgumentError, match="must run on this machine"):
            exe.save(path, levels=[V4])
        pytest.skip("this CPU runs no level above x86-64-v3 (the refusal was checked)")
    exe.save(path, levels=[wide])
    loaded = lw.load(path)
    assert loaded.target.cpu == "x86-64-v4"
    x = _input(exe)
    np.testing.assert_array_equal(loaded.run({exe.inputs[0][0]: x})[0], build(V4).run({exe.inputs[0][0]: x})[0])


def test_a_lower_level_lwx_loads_on_a_cpu_that_runs_it(build, tmp_path):
    """An x86-64-v3 file on an AVX-512 machine: its code runs here, so it loads (a wider one would not)."""
    path = tmp_path / "v3.lwx"
    build(V3).save(path)
    loaded = lw.load(path)
    assert loaded.target.cpu == "x86-64-v3"
    x = _input(build(V3))
    np.testing.assert_array_equal(loaded.run({build(V3).inputs[0][0]: x})[0],
                                  build(V3).run({build(V3).inputs[0][0]: x})[0])


def test_a_lwx_whose_levels_this_cpu_cannot_run_says_so(build, tmp_path):
    import io
    from loopweave.nn_ops.network.archive import ArchiveWriter
    buf = io.BytesIO()
    build(V3).save(buf)
    path = tmp_path / "none.lwx"
    with ArchiveWriter(path) as archive:
        archive.add("level0.lwx", buf.getvalue())
        archive.finish({"format": "loopweave-levels", "version": 1, "levels": [
            {"file": "level0.lwx", "target": {"cpu": "future-cpu", "features": "+avx2,+nosuchfeature"}}]})
    with pytest.raises(ArgumentError, match="future-cpu, none of which this machine runs"):
        lw.load(path)


def test_kernels_from_the_kernel_cache_of_another_process_export_for_another_cpu(tmp_path, monkeypatch):
    """Kernels the kernel cache gives back (object code only) are lowered again for the library: for
    another CPU than the host, under that CPU as when they were built (else Winograd's choices made
    from "the CPU" differ, and so do the symbols)."""
    import subprocess
    import sys
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(tmp_path / "cache"))
    build = ("import loopweave as lw; from loopweave.nn_ops.testing import model_zoo; "
             f"lw.compile(lw.from_onnx(model_zoo.resnet18(size=112, classes=10)), target={V3!r}, progress=False)")
    subprocess.run([sys.executable, "-c", build], check=True)
    again = lw.compile(lw.from_onnx(model_zoo.resnet18(size=112, classes=10)), target=V3, progress=False)
    path = again.export_library(tmp_path / "model.so")
    status, error, target, _ = _run(_open(path), again, _input(again))
    assert status == 0 and target == "x86-64-v3", error
