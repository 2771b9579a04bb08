"""The CPU facts decisions read: by LLVM CPU name from the table, the host's caches from sysfs."""
from loopweave.backends.llvm.cpu_facts import CPU_CORES, core_facts
from loopweave.target import native_target, parse_target


def test_a_cpu_models_rate_per_width_gives_its_fma_instructions_per_cycle():
    """Rocket Lake: one 512-bit FMA pipe, two at 256 bits; the table has no rate at other widths."""
    rocketlake = CPU_CORES["rocketlake"]
    assert (rocketlake.fma_instructions(512), rocketlake.fma_instructions(256)) == (1, 2)
    assert rocketlake.cache("L2") == 512 * 1024 and rocketlake.fma_instructions(1024) is None


def test_the_core_of_a_level_that_runs_here_is_this_machines():
    """x86-64-v3 names no CPU model: where its code runs here, the facts are this machine's core's at
    256 bits; a CPU model named is described by the table; an unknown one has no facts."""
    v3 = parse_target("llvm -mcpu=x86-64-v3")
    facts = core_facts(v3)
    if v3.runs_here() and native_target().cpu in CPU_CORES:
        assert facts.core == native_target().cpu and facts.vector_bits == 256
        assert facts.flops_per_cycle == CPU_CORES[facts.core].flops[256]
    zen3 = core_facts(parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver3"))
    assert (zen3.core, zen3.fma_instructions_per_cycle, zen3.cache("L2")) == ("znver3", 2, 512 * 1024)
    unknown = core_facts(parse_target("llvm -mtriple=aarch64-linux-gnu"))
    assert unknown.core == "" and unknown.fma_instructions_per_cycle is None and unknown.cache("L2") is None
