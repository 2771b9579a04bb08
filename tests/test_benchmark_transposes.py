"""``python -m benchmarks.transposes`` runs end to end: every kernel matches numpy's permutation (the
benchmark asserts it before timing) and prints a row per case.  Run in a subprocess, as users run it:
the benchmark sets the thread pool's size, which must not leak into other tests."""
import os
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_transposes_benchmark_checks_and_times_every_case():
    out = subprocess.run([sys.executable, "-m", "benchmarks.transposes", "--threads", "1", "--pairs", "1"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith(("from_blocked", "to_blocked", "transpose"))]
    assert len(rows) == 8, out.stdout
