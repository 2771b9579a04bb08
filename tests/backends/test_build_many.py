"""build_many: kernels lowered in turn while a background thread compiles the previous one."""
import threading

import numpy as np
import pytest

import loopweave as lw
from loopweave.backends import build as build_mod
from loopweave.backends.llvm import jit


def _kernel(n, scale):
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] * scale + 1.0, name="B")
    s = lw.create_schedule(B)
    return s, [A, B]


def test_build_many_matches_build_and_compiles_off_the_calling_thread(monkeypatch, tmp_path):
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(tmp_path))
    threads = []
    real = jit.compile_ir

    def recording(ir, target):
        threads.append(threading.current_thread().name)
        return real(ir, target)
    monkeypatch.setattr(jit, "compile_ir", recording)
    # constants no other test uses: a kernel loaded earlier in this process would skip the compile
    jobs = [(*_kernel(37 + k, 3.25 + k), f"bm{k}") for k in range(3)]
    ticks = []
    modules = build_mod.build_many(jobs, "llvm", progress=lambda: ticks.append(1))
    assert len(modules) == 3 and len(ticks) == 3
    assert threads and all(t.startswith("loopweave-llvm") for t in threads), threads
    for k, (m, (_, args, _)) in enumerate(zip(modules, jobs)):
        a = np.random.rand(37 + k).astype("float32")
        out = np.empty_like(a)
        m(a, out)
        np.testing.assert_allclose(out, a * (3.25 + k) + 1.0, rtol=1e-6)


def test_build_many_reports_a_bad_job_like_build():
    with pytest.raises(lw.BuildError, match="schedule or a lowered function"):
        build_mod.build_many([("not a schedule", [], "x")], "llvm")
