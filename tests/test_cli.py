"""``loopweave compile | run | bench`` on a small model."""
import numpy as np
import pytest

from loopweave import cli

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")


def test_compile_then_run(tmp_path, capsys):
    exe_path = str(tmp_path / "small.lwx")
    assert cli.main(["compile", "zoo:small_cnn", "-o", exe_path, "-q"]) == 0
    x = np.random.default_rng(0).standard_normal((1, 3, 16, 16)).astype(np.float32)
    np.save(tmp_path / "x.npy", x)
    assert cli.main(["run", exe_path, "--input", f"input={tmp_path / 'x.npy'}", "--output-dir", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert "float32[1, 10]" in out
    import onnxruntime as ort
    from loopweave.nn_ops.testing.model_zoo import small_cnn
    want = ort.InferenceSession(small_cnn().SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})[0]
    saved = np.load(next(p for p in tmp_path.iterdir() if p.name.startswith("gemm")))
    np.testing.assert_allclose(saved, want, rtol=1e-4, atol=1e-4 * float(np.abs(want).max()))
    assert cli.main(["run", exe_path, "--input", f"image={tmp_path / 'x.npy'}"]) == 2
    assert "unknown input(s) 'image'" in capsys.readouterr().err


def test_compile_reports_unsupported_ops(tmp_path, capsys):
    from loopweave.nn_ops.testing.model_zoo import OnnxBuilder
    import onnx
    b = OnnxBuilder()
    model = b.model((1, 3, 4, 4), b.node("RandomUniformLike", ["input"]), (1, 3, 4, 4))
    path = tmp_path / "random.onnx"
    onnx.save(model, path)
    assert cli.main(["compile", str(path), "-o", str(tmp_path / "x.lwx"), "-q"]) == 2
    assert "RandomUniformLike (opset 13)" in capsys.readouterr().err


def test_bench_prints_a_ratio(capsys):
    assert cli.main(["bench", "zoo:small_cnn", "--pairs", "2", "--threads", "1", "-q"]) == 0
    assert "speed-up" in capsys.readouterr().out


@pytest.fixture(scope="module")
def small_exe(tmp_path_factory):
    path = str(tmp_path_factory.mktemp("exe") / "small.lwx")
    assert cli.main(["compile", "zoo:small_cnn", "-o", path, "-q"]) == 0
    return path


@pytest.mark.parametrize("case, expected", [
    ("missing", "input 'input': the file"),
    ("not_npy", "input 'input': cannot read"),
    ("pickled", "input 'input': cannot read"),
    ("no_equals", "--input takes name=file.npy"),
])
def test_run_with_a_bad_input_file_fails_in_one_line(small_exe, tmp_path, capsys, case, expected):
    files = {"missing": tmp_path / "missing.npy", "not_npy": tmp_path / "text.npy", "pickled": tmp_path / "obj.npy"}
    (tmp_path / "text.npy").write_text("not an array")
    np.save(tmp_path / "obj.npy", np.array([{"a": 1}], dtype=object), allow_pickle=True)
    spec = str(files["missing"]) if case == "no_equals" else f"input={files[case]}"
    assert cli.main(["run", small_exe, "--input", spec]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and err.startswith("loopweave run: error: ") and expected in err


@pytest.mark.parametrize("argv, expected", [
    (["compile", "missing.onnx", "-o", "x.lwx", "-q"], "missing.onnx"),
    (["compile", "zoo:small_cnn", "-o", "x.lwx", "--input-shape", "input=1xthree", "-q"], "whole numbers"),
    (["compile", "zoo:nope", "-o", "x.lwx"], "unknown zoo model 'nope'"),
    (["run", "missing.lwx"], "missing.lwx"),
    (["compile", "zoo:small_cnn", "-o", "x.lwx", "--level", "llvm -mcpu=x86-64-v3", "-q"], "--level builds more"),
    (["compile", "zoo:small_cnn", "-o", "no/such/folder/x.lwx", "-q"], "no/such/folder/x.lwx"),
])
def test_cli_failures_are_one_line_with_exit_code_2(tmp_path, monkeypatch, capsys, argv, expected):
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and ": error: " in err and expected in err, err


def test_compile_exports_one_library_for_two_cpu_levels(tmp_path, capsys):
    import ctypes
    from loopweave.target import host_target, resolve_target
    if host_target().arch != "x86_64":
        pytest.skip("x86-64 CPU levels need an x86-64 machine")
    lib_path = tmp_path / "small.so"
    assert cli.main(["compile", "zoo:small_cnn", "--target", "llvm -mcpu=x86-64-v4", "--level", "llvm -mcpu=x86-64-v3",
                     "--export", str(lib_path), "-q"]) == 0
    assert str(lib_path) in capsys.readouterr().out
    assert "x86-64-v4, x86-64-v3" in (tmp_path / "small.h").read_text()
    lib = ctypes.CDLL(str(lib_path))
    lib.lw_model_target.restype = ctypes.c_char_p
    m = ctypes.c_void_p()
    assert lib.lw_model_create(ctypes.byref(m), 1) == 0
    best = "x86-64-v4" if resolve_target("llvm -mcpu=x86-64-v4").runs_here() else "x86-64-v3"
    assert lib.lw_model_target(m).decode() == best
    lib.lw_model_destroy(m)
