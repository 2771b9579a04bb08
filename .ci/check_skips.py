"""Fail a test run whose skips are not all for a reason on the short list below.

Usage: ``pytest -rs ... | tee pytest.log; python .ci/check_skips.py pytest.log``.  It reads pytest's
short summary lines (``SKIPPED [n] path:line: reason``, from ``-rs``) and exits 1, listing them, when
a test was skipped for any other reason: a skip that hides a broken test must not pass quietly.

Allowed reasons (each a regular expression over the reason text):

* no GPU, no CUDA driver, no CUDA toolkit (ptxas, a CUDA compiler), or a GPU present where a test
  checks the behaviour without one;
* no cross compiler, qemu or C compiler (for another machine, or at all); a check that needs another kind of host
  CPU than this one (x86 only, two CPUs, FMA, AVX2, AMX, an x86 instruction, a CPU level);
* an optional extra not installed: ``pytest.importorskip`` of a package an extra brings (its
  message "could not import 'NAME'"), or a reason naming ``pip install 'loopweave[EXTRA]'`` or the
  extra it needs;
* an opt-in long run (an environment variable it names).
"""
from __future__ import annotations

import re
import sys

ALLOWED = [
    r"\bGPU\b", r"NVIDIA driver|CUDA driver|libcuda|cuInit", r"\bptxas\b", r"no CUDA compiler",
    r"cross compiler", r"\bqemu\b", r"needs a C compiler", r"needs the \w+ extra",
    r"x86|AVX|\bAMX\b|\bFMA\b|vpdpbusd|two CPUs|host CPU|this CPU|this machine has no",
    r"could not import '(onnx|onnxruntime|lightgbm|distributed|hypothesis|nbformat|nbclient|ipykernel|matplotlib|"
    r"torch|threadpoolctl)'",
    r"pip install ['\"]?loopweave\[\w+\]",
    r"set LOOPWEAVE_\w+",
]
_LINE = re.compile(r"^SKIPPED \[\d+\] (?P<where>[^:]+(?::\d+)?): (?P<reason>.*)$")


def disallowed(lines):
    """The skip lines of a pytest ``-rs`` summary whose reason is not allowed."""
    bad = []
    for line in lines:
        m = _LINE.match(line.strip())
        if m and not any(re.search(pattern, m.group("reason")) for pattern in ALLOWED):
            bad.append(line.strip())
    return bad


def main(argv) -> int:
    if len(argv) != 2:
        print(__doc__.splitlines()[2], file=sys.stderr)
        return 2
    with open(argv[1], encoding="utf-8", errors="replace") as f:
        bad = disallowed(f)
    for line in bad:
        print(f"skipped for a reason not on the list (.ci/check_skips.py): {line}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
