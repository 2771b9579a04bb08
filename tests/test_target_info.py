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


def test_another_cpus_caches_and_rate_come_from_its_model_or_are_not_known():
    info = lw.target_info("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1")
    assert dict(info.caches) == {"L1d": 64 * 1024, "L2": 1 << 20} and info.flops_per_cycle == 16
    assert info.vector_registers == 32 and "neon" in info.extensions
    assert "cannot run code for this target" in str(info)
    assert "<table>" in info._repr_html_() and "neoverse-n1" in info._repr_html_()
    generic = lw.target_info("llvm -mtriple=aarch64-linux-gnu")
    assert generic.caches is None and generic.flops_per_cycle is None
    assert str(generic).count("not known") == 2 and "benchmarks.peak" in str(generic)


def test_the_fma_rate_follows_the_cpu_model_and_the_codes_vector_width():
    """Zen 4 runs 512-bit FMAs as two halves (no faster than 256-bit code), Zen 5 at full width."""
    zen4 = lw.target_info(parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"))
    zen5 = lw.target_info(parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver5"))
    assert zen4.flops_per_cycle == 32 and zen5.flops_per_cycle == 64
    assert dict(zen4.caches)["L2"] == 1 << 20 and dict(zen5.caches)["L1d"] == 48 * 1024
    avx2 = lw.target_info(parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"))
    assert avx2.flops_per_cycle == 32 and avx2.vector_bits == 256 and "32 fp32 FLOP per cycle" in str(avx2)
    assert "avx512vnni" in lw.target_info(parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver5")).extensions


def test_fma_instructions_per_cycle_and_cache_sizes_are_read_from_the_facts():
    """What decisions read: Zen 4 issues one 512-bit FMA per cycle, Zen 5 two, AVX2 code two 256-bit."""
    zen4 = lw.target_info(parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver4"))
    zen5 = lw.target_info(parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver5"))
    haswell = lw.target_info(parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=haswell"))
    assert (zen4.fma_instructions_per_cycle, zen5.fma_instructions_per_cycle) == (1, 2)
    assert haswell.fma_instructions_per_cycle == 2 and haswell.cache("L2") == 256 * 1024 and haswell.cache("L3") is None
    generic = lw.target_info("llvm -mtriple=aarch64-linux-gnu")
    assert generic.fma_instructions_per_cycle is None and generic.cache("L2") is None


def test_a_gpu_target_is_refused():
    with pytest.raises(lw.BuildError, match="CPU targets"):
        lw.target_info("cuda")


def test_the_cli_prints_it(capsys):
    assert main(["info", "--target", "llvm -mtriple=aarch64-linux-gnu"]) == 0
    out = capsys.readouterr().out
    assert "vector registers  32" in out and "4 float32" in out
    assert main(["info", "--target", "llvm -mcpu=nosuchcpu"]) == 2
    assert "does not know" in capsys.readouterr().err


def test_the_peak_is_measured_where_the_code_runs_here(capsys):
    import re
    other = "llvm -mtriple=aarch64-linux-gnu" if resolve_target("llvm").arch == "x86_64" else "llvm -mtriple=x86_64-linux-gnu"
    assert lw.target_info(other, measure=True).measured == ()     # another CPU's code is not run
    assert main(["info", "--peak"]) == 0
    out = capsys.readouterr().out
    figures = re.findall(r"measured +fp32 FMA peak, \d+-bit \(GFLOPS\): (\d+) \(1 thread\)", out)
    assert figures and int(figures[0]) > 0, out
    if resolve_target("llvm").arch == "x86_64":
        assert re.search(r"int8 products, (vpdpbusd|vpmaddwd) \d+-bit \(GOPS\): [1-9]\d* \(1 thread\)", out), out
