"""``python -m benchmarks.conv2d`` runs a layer end to end and prints its share of the FMA peak."""
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytest.importorskip("onnxruntime")
ROOT = Path(__file__).resolve().parent.parent


@pytest.mark.parametrize("target, width", [("llvm", None), ("llvm -mcpu=x86-64-v3", "cpu=x86-64-v3, 256-bit")])
def test_a_layer_row_has_times_a_ratio_and_a_share_of_the_peak(target, width):
    """``--target`` builds the layer for another level this machine runs and reads its width's peak."""
    out = subprocess.run([sys.executable, "-m", "benchmarks.conv2d", "--quick", "--threads", "1", "--only",
                          "r18 1x1/2 256->512", "--target", target], cwd=ROOT, capture_output=True, text=True,
                         timeout=600)
    assert out.returncode == 0, out.stderr
    assert "GFLOPS, benchmarks.peak" in out.stdout, out.stdout
    assert width is None or width in out.stdout.splitlines()[0], out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("r18 1x1/2 256->512"))
    assert re.search(r"\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\.\d{2}\s+\d+%$", row), row


@pytest.mark.parametrize("module", ["conv2d", "kernels"])
def test_a_target_this_machine_cannot_run_is_refused(module):
    out = subprocess.run([sys.executable, "-m", f"benchmarks.{module}", "--target", "llvm -mtriple=aarch64-linux-gnu"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "this machine cannot run its code" in out.stderr, out.stderr


def test_cpu_time_rows_read_one_threads_cpu_time_and_refuse_two_threads():
    """``--cpu-time``: times and the peak by the CPU time one thread got (shares a loaded machine does not
    lower); with two threads it is a usage error (another thread's time is not the caller's)."""
    args = [sys.executable, "-m", "benchmarks.conv2d", "--quick", "--cpu-time", "--only", "r18 1x1/2 256->512"]
    out = subprocess.run(args + ["--threads", "1"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    assert "times and peak in CPU time" in out.stdout.splitlines()[0], out.stdout
    row = next(line for line in out.stdout.splitlines() if line.startswith("r18 1x1/2 256->512"))
    assert re.search(r"\d+\.\d{3}\s+\d+\.\d{3}\s+\d+\.\d{2}\s+\d+%$", row), row
    out = subprocess.run(args + ["--threads", "2"], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 2 and "--cpu-time times one thread's CPU time" in out.stderr, out.stderr


def test_lone_1x1_rows_time_both_forms_and_name_the_pick():
    """``--lone-1x1 both``: each stride-1 1x1 layer plain against blocked, and the form the layout choice
    picks for this machine (``lone_1x1_stays_plain``); strided layers, which always go blocked, print no row."""
    from loopweave.nn_ops.network.passes.lone_1x1_stays_plain import lone_1x1_stays_plain
    from loopweave.target import resolve_target
    args = [sys.executable, "-m", "benchmarks.conv2d", "--quick", "--cpu-time", "--lone-1x1", "both", "--only"]
    out = subprocess.run(args + ["1x1 192->64"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0, out.stderr
    rows = [line for line in out.stdout.splitlines() if line.startswith("mv2 1x1")]
    assert len(rows) == 1, out.stdout
    match = re.search(r"plain\s+\d+% blocked\s+\d+% plain/blocked time\s+\d+\.\d{2} picks (plain|blocked)$", rows[0])
    assert match, rows[0]
    plain = lone_1x1_stays_plain(192, 64, (1, 64, 14, 14), (1, 1), resolve_target("llvm"))
    assert match.group(1) == ("plain" if plain else "blocked"), rows[0]
    out = subprocess.run(args + ["r18 1x1/2 256"], cwd=ROOT, capture_output=True, text=True, timeout=600)
    assert out.returncode == 0 and not any(line.startswith("r18") for line in out.stdout.splitlines()), out.stdout
