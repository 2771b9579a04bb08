"""The command line for someone on their first day: help without arguments, --version, the zoo listed,
one wording for a bad model in every subcommand, bench's numbers named, refusals before long work,
optional packages named by their extra."""
import sys

import numpy as np
import pytest

import loopweave as lw
from loopweave import cli

pytest.importorskip("onnx")


def _one_line_error(capsys, command: str) -> str:
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1, err
    prefix = f"loopweave {command}: error: "
    assert err.startswith(prefix), err
    return err[len(prefix):]


def test_bare_command_prints_the_help(capsys):
    assert cli.main([]) == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: loopweave") and all(c in out for c in ("compile", "run", "bench", "tune", "zoo"))


def test_version(capsys):
    with pytest.raises(SystemExit) as stop:
        cli.main(["--version"])
    assert stop.value.code == 0
    assert capsys.readouterr().out.strip() == f"loopweave {lw.__version__}"


def test_every_option_has_help():
    parser = cli.build_parser()
    subparsers = next(a for a in parser._actions if a.dest == "command").choices
    missing = [f"{name} {action.option_strings or action.dest}" for name, sub in subparsers.items()
               for action in sub._actions if not action.help]
    assert not missing


def test_zoo_lists_every_bundled_model(capsys):
    from loopweave.nn_ops.testing.model_zoo import NAMES
    assert cli.main(["zoo"]) == 0
    out = capsys.readouterr().out
    assert all(f"zoo:{name}\n" in out for name in NAMES)


def test_from_onnx_takes_a_zoo_name_as_the_cli_does():
    graph = lw.from_onnx("zoo:small_cnn")
    assert graph.name == "small_cnn" and graph.inputs == ["input"]
    with pytest.raises(lw.ArgumentError, match=r"unknown zoo model 'nope'.*small_cnn.*'loopweave zoo'"):
        lw.from_onnx("zoo:nope")


@pytest.mark.parametrize("case", ["missing", "not_onnx", "unknown_zoo"])
def test_a_bad_model_reads_alike_in_every_subcommand(tmp_path, monkeypatch, capsys, case):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "notonnx.txt").write_text("not a model")
    model = {"missing": "missing.onnx", "not_onnx": "notonnx.txt", "unknown_zoo": "zoo:nope"}[case]
    messages = set()
    for argv in (["compile", model, "-o", "x.lwx", "-q"], ["bench", model, "-q"],
                 ["tune", model, "--log", "t.jsonl", "--trials", "1", "-q"]):
        if argv[0] == "bench":
            pytest.importorskip("onnxruntime")
        if argv[0] == "tune":
            pytest.importorskip("lightgbm")
        assert cli.main(argv) == 2
        messages.add(_one_line_error(capsys, argv[0]))
    assert len(messages) == 1, messages
    expected = {"missing": "'missing.onnx' does not exist", "not_onnx": "'notonnx.txt' is not a valid ONNX model",
                "unknown_zoo": "unknown zoo model 'nope'"}[case]
    assert expected in messages.pop()


def test_run_on_an_onnx_model_says_to_compile_it_first(tmp_path, capsys):
    from loopweave.nn_ops.testing.model_zoo import small_cnn
    import onnx
    path = tmp_path / "model.onnx"
    onnx.save(small_cnn(), path)
    assert cli.main(["run", str(path), "--random"]) == 2
    msg = _one_line_error(capsys, "run")
    assert "is not a loopweave executable" in msg and f"compile it first (loopweave compile {path} -o" in msg
    assert cli.main(["run", str(tmp_path / "gone.lwx")]) == 2
    assert "the executable file" in _one_line_error(capsys, "run")


def test_cuda_save_is_refused_before_compiling(monkeypatch, capsys):
    def must_not_compile(*args, **kwargs):
        raise AssertionError("compiled before refusing")
    monkeypatch.setattr(lw, "compile", must_not_compile)
    monkeypatch.setattr(lw, "from_onnx", must_not_compile)
    for extra in (["-o", "y.lwx"], ["--export", "y.so"]):
        assert cli.main(["compile", "zoo:small_cnn", "--target", "cuda", *extra, "-q"]) == 2
        assert "compiled for cuda cannot be saved (-o) or exported (--export)" in _one_line_error(capsys, "compile")


def test_a_cuda_executable_refuses_save_and_export_by_name(tmp_path):
    from loopweave.nn_ops.network.cuda_executable import CudaExecutable
    exe = CudaExecutable.__new__(CudaExecutable)     # the refusals read nothing of a compiled network
    exe._device = None
    with pytest.raises(lw.ArgumentError, match=r"compiled for cuda cannot be saved to 'm.lwx'.*target='llvm'"):
        exe.save("m.lwx")
    with pytest.raises(lw.ArgumentError, match=r"export_library: 'm.so' would be a CPU library.*target='llvm'"):
        exe.export_library("m.so")


def test_bench_names_each_number():
    from loopweave.backends.timing import Comparison
    text = cli.bench_report("zoo:resnet18", Comparison(ours_s=0.02032, theirs_s=0.01971, ratio=1.15), 15, 2, 3.0)
    assert "loopweave    median 20.32 ms per run" in text and "onnxruntime  median 19.71 ms per run" in text
    assert "1.15x: the median over the pairs of onnxruntime's time / loopweave's" in text
    assert "the ratio of the two medians above is 0.97x" in text and "15 interleaved pairs" in text


def test_missing_lightgbm_is_named_by_its_extra_before_any_work(tmp_path, monkeypatch, capsys):
    from loopweave import autoschedule as auto
    monkeypatch.setitem(sys.modules, "lightgbm", None)      # import lightgbm now raises ImportError
    assert cli.main(["tune", "zoo:small_cnn", "--log", str(tmp_path / "t.jsonl"), "--trials", "1", "-q"]) == 2
    msg = _one_line_error(capsys, "tune")
    assert "'lightgbm', which is not installed" in msg and 'pip install "loopweave[autoschedule]"' in msg
    A = lw.placeholder((8, 8), name="A")
    B = lw.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    log = tmp_path / "k.jsonl"
    with pytest.raises(lw.MissingExtraError, match=r"loopweave\[autoschedule\]"):
        auto.tune([A, B], trials=4, log=str(log), progress=False)
    assert not log.exists() or log.read_text() == ""


def test_missing_matplotlib_is_named_by_its_extra(monkeypatch):
    from loopweave import autoschedule as auto
    A = lw.placeholder((8, 8), name="A")
    B = lw.compute((8, 8), lambda i, j: A[i, j] * 2.0, name="B")
    res = auto.tune([A, B], trials=0, progress=False)
    monkeypatch.setitem(sys.modules, "matplotlib", None)
    monkeypatch.setitem(sys.modules, "matplotlib.pyplot", None)
    with pytest.raises(lw.MissingExtraError, match=r"TuneResult.plot needs .*'matplotlib'.*loopweave\[notebook\]"):
        res.plot()
