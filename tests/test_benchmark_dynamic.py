"""``python -m benchmarks.dynamic`` runs end to end at its smallest settings,
so the benchmark cannot rot between the runs that time it.  Run in a subprocess, as users run it:
the benchmark sets the thread pool's size, which must not leak into other tests."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


@pytest.mark.slow
def test_dynamic_benchmark_runs_at_its_smallest_settings():
    out = subprocess.run([sys.executable, "-m", "benchmarks.dynamic", "--tiny", "--shapes", "1x1", "--pairs", "1",
                          "--pause", "0", "--threads", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    row = next(line for line in lines if line.split()[:3] == ["1", "x", "1"])
    assert len(row.split()) == 9                      # shape, poly, static and ort ms, two ratios, max diff
    assert any(line.startswith("bar 1:") and "every result matched onnxruntime" in line for line in lines)
    assert any(line.startswith("bar 3") and "lw.load" in line for line in lines)


@pytest.mark.slow
def test_dynamic_benchmark_resnet_mode_runs_at_a_small_shape():
    out = subprocess.run([sys.executable, "-m", "benchmarks.dynamic", "--model", "resnet18", "--shapes", "1x32x40",
                          "--pairs", "1", "--pause", "0", "--threads", "1", "--profile"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = out.stdout.splitlines()
    row = next(line for line in lines if line.split()[:5] == ["1", "x", "32", "x", "40"])
    assert len(row.split()) == 11                     # shape, poly, static and ort ms, two ratios, max diff
    assert any(line.startswith("bar 2:") and "every result matched onnxruntime" in line for line in lines)
    assert any(line.startswith("  profile (") for line in lines)
    assert any(line.split()[:2] == ["compile-once", "poly_pool"] for line in lines)
