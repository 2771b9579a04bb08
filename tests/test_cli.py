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
    import loopweave as lw
    saved = np.load(next(p for p in tmp_path.iterdir() if p.name.startswith("gemm")))
    np.testing.assert_array_equal(saved, lw.load(exe_path).run({"input": x})[0])
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
