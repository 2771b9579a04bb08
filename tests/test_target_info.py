"""``lw.target_info`` / ``loopweave info``: what the code generator knows of a CPU target."""
import pytest

import loopweave as lw
from loopweave.cli import main
from loopweave.target import parse_target, resolve_target


def test_the_host_description_is_the_targets_own():
    info = lw.target_info()
    host = resolve_target("llvm")
    assert info.lanes["float32"] == host.lanes("float32") and info.vector_registers == host.vector_registers
    assert info.threads == host.num_threads and info.cpu == host.cpu
    assert info.caches is None or all(size > 0 for _, size in info.caches)


def test_each_x86_level_is_described_by_its_features(x86_level):
    info = lw.target_info(x86_level)
    wide = x86_level.lanes("float32") == 16
    assert info.vector_bits == (512 if wide else 256) and info.lanes["int8"] == (64 if wide else 32)
    assert info.vector_registers == (32 if wide else 16) and "fma" in info.extensions
    assert "avx512vnni" not in info.extensions


def test_another_cpus_caches_are_not_known_and_it_says_it_cannot_run_here():
    info = lw.target_info("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1")
    assert info.caches is None and info.vector_registers == 32 and "neon" in info.extensions
    text = str(info)
    assert "not known" in text and "cannot run code for this target" in text
    assert "<table>" in info._repr_html_() and "neoverse-n1" in info._repr_html_()
    assert "avx512vnni" in lw.target_info(parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver5")).extensions


def test_a_gpu_target_is_refused():
    with pytest.raises(lw.BuildError, match="CPU targets"):
        lw.target_info("cuda")


def test_the_cli_prints_it(capsys):
    assert main(["info", "--target", "llvm -mtriple=aarch64-linux-gnu"]) == 0
    out = capsys.readouterr().out
    assert "vector registers  32" in out and "4 float32" in out
    assert main(["info", "--target", "llvm -mcpu=nosuchcpu"]) == 2
    assert "does not know" in capsys.readouterr().err
