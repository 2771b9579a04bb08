""".ci/check_skips.py: a skip passes CI only for a reason on its short list."""
import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
_spec = importlib.util.spec_from_file_location("check_skips", ROOT / ".ci" / "check_skips.py")
check_skips = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(check_skips)


def test_allowed_reasons_pass_and_others_are_listed(tmp_path):
    lines = [
        "SKIPPED [35] tests/backends/cuda/test_kernels.py:460: no CUDA driver/GPU found (libcuda.so is not installed)",
        "SKIPPED [1] tests/deploy/test_cross_compile.py:354: needs aarch64-linux-gnu-gcc and qemu-aarch64",
        "SKIPPED [1] tests/x.py:3: could not import 'onnxruntime': No module named 'onnxruntime'",
        "SKIPPED [2] tests/y.py:9: flaky on this machine",
        "SKIPPED [1] tests/z.py:1: TODO",
        "4035 passed, 72 skipped in 874.10s",
    ]
    bad = check_skips.disallowed(lines)
    assert bad == [lines[3], lines[4]]
    log = tmp_path / "pytest.log"
    log.write_text("\n".join(lines))
    assert check_skips.main(["check_skips", str(log)]) == 1
    log.write_text("\n".join(lines[:3] + lines[5:]))
    assert check_skips.main(["check_skips", str(log)]) == 0
