"""``python -m benchmarks.conv2d`` runs a layer end to end and prints its share of the FMA peak."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parent.parent


def test_a_layer_row_has_times_a_ratio_and_a_share_of_the_peak():
    out = subprocess.run([sys.executable, "-m", "benchmarks.conv2d", "--quick", "--threads", "1", "--only",
                          "r18 1x1/2 256->512"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "GFLOPS, benchmarks.peak" in out.stdout, out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("r18 1x1/2 256->512"))
    assert re.search(r"\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\.\d{2}\s+\d+%$", row), row
