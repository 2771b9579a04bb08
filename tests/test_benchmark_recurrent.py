"""``python -m benchmarks.recurrent`` runs end to end at small settings: each layer's outputs are
checked against onnxruntime before it is timed, and a row is printed per layer.  Run in a
subprocess, as users run it (the benchmark sets the thread pool's size)."""
import os
import subprocess
import sys

import pytest

pytest.importorskip("onnxruntime")

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def test_recurrent_benchmark_checks_and_times_each_layer():
    out = subprocess.run([sys.executable, "-m", "benchmarks.recurrent", "--threads", "1", "--pairs", "1",
                          "--layers", "LSTM:6:2:16", "GRU:5:1:8:bi:lbr", "RNN:4:3:8"],
                         cwd=ROOT, capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith(("LSTM", "GRU", "RNN"))]
    assert len(rows) == 3 and "bidir lbr" in rows[1], out.stdout
