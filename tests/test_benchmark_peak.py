"""``python -m benchmarks.peak``: its kernels are what they claim (independent FMA / dot-product
chains at each width, not folded away), and the command prints every row."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

from loopweave.backends.llvm.peak import fma_ir, int8_ir
from loopweave.backends.llvm.jit import assembly
from loopweave.target import native_target

ROOT = Path(__file__).resolve().parent.parent
x86_only = pytest.mark.skipif(native_target().arch != "x86_64", reason="x86 instructions")


@x86_only
def test_the_fma_kernel_is_a_loop_of_independent_fmas_at_its_width(x86_level):
    bits = x86_level.vector_bits
    register = {256: "ymm", 512: "zmm"}[bits]
    asm = assembly(fma_ir(bits, 12), x86_level)
    fmas = re.findall(rf"vfmadd\w+ps\s+%{register}\d+, %{register}\d+, %{register}(\d+)", asm)
    assert len(set(fmas)) >= 12, asm          # twelve accumulators, each its own register


@x86_only
def test_the_int8_kernels_use_the_dot_product_instruction_the_target_has(x86_level):
    if x86_level.cpu == "x86-64-v3":
        assert "vpmaddwd" in assembly(int8_ir(256, 8, vnni=False), x86_level)
    else:
        from loopweave.target import parse_target
        vnni = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=znver5")
        assert len(re.findall(r"vpdpbusd\s", assembly(int8_ir(512, 8, vnni=True), vnni))) >= 8


def test_the_command_prints_each_rate():
    out = subprocess.run([sys.executable, "-m", "benchmarks.peak", "--threads", "1", "--seconds", "0.02"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = {line[:34].strip(): line[34:].split() for line in out.stdout.splitlines()[2:]}
    assert any(k.startswith("fp32 FMA") for k in rows) and "memory, C = A + B (GB/s)" in rows, out.stdout
    assert all(float(v[0]) > 0 for v in rows.values()), out.stdout
