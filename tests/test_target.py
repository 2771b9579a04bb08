"""``target.py``: named x86 CPUs carry their vector extensions whatever the host, and
``LOOPWEAVE_HOST_TARGET`` makes "llvm" mean another CPU level this machine runs."""
import json
import os
import subprocess
import sys

import pytest

from loopweave.target import X86_CPUS, native_target, parse_target

x86_only = pytest.mark.skipif(native_target().arch != "x86_64", reason="x86 CPU levels need an x86 host")


@pytest.mark.parametrize("cpu, has, lacks", [
    ("znver3", {"avx2", "fma", "vaes"}, {"avx512f", "avx512vnni"}),
    ("cascadelake", {"avx512f", "avx512vnni"}, {"avx512bf16", "avx512vbmi"}),
    ("znver5", {"avx512vnni", "avx512bf16", "avx512vbmi", "avxvnni"}, {"avx512fp16"}),
    ("alderlake", {"avx2", "avxvnni"}, {"avx512f"}),
    ("x86-64-v3", {"avx2", "fma"}, {"avx512f", "avxvnni", "vaes"}),
])
def test_a_named_cpu_has_its_vector_extensions_whatever_the_host(cpu, has, lacks):
    """The features come from the table, not the host: -mcpu=znver5 on a Zen 3 gets VNNI too."""
    target = parse_target(f"llvm -mtriple=x86_64-linux-gnu -mcpu={cpu}")
    enabled = target.enabled_features()
    assert has <= enabled and not lacks & enabled, sorted(enabled)


def test_every_named_cpu_is_at_least_its_level():
    for cpu, features in X86_CPUS.items():
        level = "x86-64-v4" if "avx512f" in features else "x86-64-v3" if "avx2" in features else "x86-64-v2" \
            if "sse4.2" in features else "x86-64"
        assert X86_CPUS[level] <= features, cpu


def _as_host(value, code):
    """Runs ``code`` in a fresh process with ``LOOPWEAVE_HOST_TARGET=value``; its last printed line."""
    env = dict(os.environ, LOOPWEAVE_HOST_TARGET=value)
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=300)
    return out.returncode, out.stdout.strip().splitlines()[-1:] or [""], out.stderr


@x86_only
def test_the_host_can_be_forced_to_a_lower_level():
    """As an AVX2 host: 8 float lanes, code for the level runs, code for AVX-512 refuses to run,
    and a named CPU still gets its own features."""
    if "avx2" not in native_target().enabled_features():
        pytest.skip("this machine has no AVX2")
    code = """
import json
import numpy as np, loopweave as lw
from loopweave.target import host_target, native_target, parse_target
A = lw.placeholder((64,), name="A"); B = lw.compute((64,), lambda i: A[i] * 2.0, name="B")
s = lw.create_schedule(B); s[B].vectorize(B.op.axis[0])
f = lw.build(s, [A, B]); a = np.arange(64, dtype="float32"); b = np.empty(64, "float32"); f(a, b)
wide = parse_target("llvm -mcpu=x86-64-v4")
print(json.dumps({"cpu": host_target().cpu, "lanes": host_target().lanes("float32"), "ok": bool((b == 2 * a).all()),
                  "native": native_target().cpu, "v4_runs": wide.runs_here(), "asm_zmm": "zmm" in f.get_source("asm"),
                  "znver5_vnni": "avx512vnni" in parse_target("llvm -mcpu=znver5").enabled_features()}))
"""
    rc, (last,), err = _as_host("llvm -mcpu=x86-64-v3", code)
    assert rc == 0, err
    got = json.loads(last)
    assert got == {"cpu": "x86-64-v3", "lanes": 8, "ok": True, "native": native_target().cpu, "v4_runs": False,
                   "asm_zmm": False, "znver5_vnni": True}, got


@x86_only
@pytest.mark.parametrize("value, message", [
    ("cuda", "give an LLVM CPU target"),
    ("llvm -mcpu=x86-64-v9", "LOOPWEAVE_HOST_TARGET: target 'llvm -mcpu=x86-64-v9': loopweave does not know"),
    ("llvm -mtriple=aarch64-linux-gnu", "cannot run code for it"),
])
def test_a_host_target_this_machine_cannot_be_is_refused_naming_the_variable(value, message):
    rc, _, err = _as_host(value, "import loopweave as lw; from loopweave.target import host_target; host_target()")
    assert rc != 0 and "BuildError" in err and message in err, err


@x86_only
def test_a_host_target_with_a_feature_this_cpu_lacks_is_refused():
    missing = next((f for f in ("amx-tile", "avx512fp16", "avx10.1") if f not in native_target().enabled_features()),
                   None)
    if missing is None:
        pytest.skip("this CPU has every feature tried")
    rc, _, err = _as_host(f"llvm -mcpu=x86-64-v2 -mattr=+{missing}",
                          "import loopweave as lw; from loopweave.target import host_target; host_target()")
    assert rc != 0 and f"it lacks {missing}" in err, err


def test_unset_or_empty_means_this_machine():
    rc, (last,), err = _as_host("", "from loopweave.target import host_target, native_target; "
                                    "print(host_target() == native_target())")
    assert rc == 0 and last == "True", err
