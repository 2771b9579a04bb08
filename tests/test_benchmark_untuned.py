"""``python -m benchmarks.untuned`` runs end to end on its test-sized networks (each compiled, checked
against onnxruntime and timed), in a subprocess as users run it."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_untuned_benchmark_compiles_checks_and_times_each_network():
    from loopweave.benchmarks.untuned import MODELS
    out = subprocess.run([sys.executable, "-m", "benchmarks.untuned", "--threads", "1", "--pairs", "1", "--small"],
                         cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = {line.split()[0]: line.split() for line in out.stdout.splitlines()[2:]}
    assert set(rows) == set(MODELS), out.stdout
    assert all(float(row[3]) > 0 for row in rows.values()), out.stdout
