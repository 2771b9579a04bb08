"""``python -m benchmarks.quantized`` runs end to end on the test-sized zoo models: each is quantized by
onnxruntime's quantize_dynamic (ConvInteger, MatMulInteger, a dequantized embedding), compiled, compared
and timed.  Run in a subprocess, as users run it."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.parametrize("weights", ["int8", "uint8"])
def test_quantized_benchmark_compiles_compares_and_times_each_model(weights):
    out = subprocess.run([sys.executable, "-m", "benchmarks.quantized", "--threads", "1", "--pairs", "1", "--small",
                          "--weights", weights, "--models", "small_cnn", "squeezenet1_1", "gpt2"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == {"small_cnn", "squeezenet1_1", "gpt2"}, out.stdout
    for name, row in rows.items():
        assert float(row[4]) < 0.1, out.stdout        # the outputs are close (quantization flips aside)
    assert rows["squeezenet1_1"][5] == "agrees", out.stdout


def test_the_static_benchmark_profiles_the_int8_build_beside_the_float_one():
    """(QDQ: the int8 layers are the blocked int8 conv kernels)"""
    out = subprocess.run([sys.executable, "-m", "benchmarks.quantized", "--threads", "1", "--pairs", "1", "--static",
                          "--profile", "--models", "small_cnn"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.splitlines()
    int8 = lines.index(next(line for line in lines if line.strip().startswith("int8:")))
    fp32 = lines.index(next(line for line in lines if line.strip().startswith("fp32:")))
    assert any("qconv2d_blocked" in line for line in lines[int8:fp32]), out.stdout
    assert any("conv2d_blocked" in line for line in lines[fp32:]), out.stdout


def test_the_benchmark_times_by_cpu_time_on_one_thread():
    """``--cpu-time``: the comparisons and the profile by the timing thread's CPU time; refused with more
    threads (their CPU time is not the timing thread's)."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.quantized", "--threads", "1", "--pairs", "1", "--static",
                          "--profile", "--cpu-time", "--models", "small_cnn"], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert "times in CPU time" in out.stdout.splitlines()[0], out.stdout
    assert any("qconv2d_blocked" in line for line in out.stdout.splitlines()), out.stdout
    refused = subprocess.run([sys.executable, "-m", "benchmarks.quantized", "--threads", "2", "--cpu-time"], cwd=ROOT,
                             capture_output=True, text=True, timeout=600)
    assert refused.returncode != 0 and "run it with --threads 1" in refused.stderr
