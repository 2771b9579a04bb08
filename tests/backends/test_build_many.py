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
        a = np.random.default_rng(351).random((37 + k,)).astype("float32")
        out = np.empty_like(a)
        m(a, out)
        np.testing.assert_allclose(out, a * (3.25 + k) + 1.0, rtol=1e-6)


def test_build_many_reports_a_bad_job_like_build():
    with pytest.raises(lw.BuildError, match="schedule or a lowered function"):
        build_mod.build_many([("not a schedule", [], "x")], "llvm")


def _worker_jobs(count, base):
    return [(*_kernel(base + k, 0.5 + base + k), f"bw{base}_{k}") for k in range(count)]


def _check(modules, jobs):
    for m, (s, args, _) in zip(modules, jobs):
        n = int(args[0].shape[0].value)
        a = np.random.default_rng(531).random((n,)).astype("float32")
        out = np.empty_like(a)
        m(a, out)
        scale = next(iter(args[1].op.body)).a.b.value     # A[i] * scale + 1.0
        np.testing.assert_allclose(out, a * scale + 1.0, rtol=1e-6)


def test_build_many_spreads_cold_kernels_over_worker_processes(monkeypatch, tmp_path):
    from loopweave.backends import build_workers
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LOOPWEAVE_BUILD_WORKERS", "1")
    sent = []
    real = build_workers._Worker.build
    monkeypatch.setattr(build_workers._Worker, "build", lambda self, req: sent.append(req["name"]) or real(self, req))
    jobs = _worker_jobs(8, 101)
    ticks = []
    modules = build_mod.build_many(jobs, "llvm", progress=lambda: ticks.append(1))
    assert len(ticks) == 8
    assert sent and set(sent) < {name for _, _, name in jobs}     # the worker took some, this process the rest
    assert [m.symbol for m in modules] == [build_mod.build(s, a, "llvm", n).symbol for s, a, n in jobs]
    _check(modules, jobs)
    # the worker used the caller's cache folder, set after it started
    assert len(list(tmp_path.glob("*.o"))) >= 8


def test_a_worker_that_dies_costs_nothing_but_time(monkeypatch, tmp_path):
    from loopweave.backends import build_workers
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LOOPWEAVE_BUILD_WORKERS", "1")
    real = build_workers._Worker.build

    def dying(self, request):
        self.proc.kill()
        self.proc.wait()
        return real(self, request)
    monkeypatch.setattr(build_workers._Worker, "build", dying)
    jobs = _worker_jobs(5, 131)
    _check(build_mod.build_many(jobs, "llvm"), jobs)


def test_a_bad_job_among_worker_jobs_raises_the_in_process_error(monkeypatch):
    monkeypatch.setenv("LOOPWEAVE_BUILD_WORKERS", "1")
    jobs = _worker_jobs(5, 151)
    jobs.append(("not a schedule", [], "bad"))      # the last job: a worker's
    with pytest.raises(lw.BuildError, match="schedule or a lowered function"):
        build_mod.build_many(jobs, "llvm")


def test_no_workers_below_the_threshold_or_when_turned_off(monkeypatch):
    from loopweave.backends import build_workers
    monkeypatch.setenv("LOOPWEAVE_BUILD_WORKERS", "0")
    assert build_workers.worker_count(100) == 0
    monkeypatch.setenv("LOOPWEAVE_BUILD_WORKERS", "3")
    assert build_workers.worker_count(build_workers.MIN_JOBS - 1) == 0
    assert build_workers.worker_count(100) == 3


def _gpu_kernel(n, scale):
    A = lw.placeholder((n,), name="A")
    B = lw.compute((n,), lambda i: A[i] * scale + 1.0, name="B")
    s = lw.create_schedule(B)
    o, i = s[B].split(B.op.axis[0], factor=32)
    s[B].bind(o, lw.thread_axis("blockIdx.x"))
    s[B].bind(i, lw.thread_axis("threadIdx.x"))
    return s, [A, B]


def test_gpu_builds_are_spread_over_workers_too(monkeypatch, tmp_path):
    """Building for the GPU needs no GPU: the workers lower (and compile PTX where a CUDA compiler
    exists); the modules are the ones built here."""
    from loopweave.backends import build_workers
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(tmp_path))
    monkeypatch.setenv("LOOPWEAVE_BUILD_WORKERS", "1")
    sent = []
    real = build_workers._Worker.build
    monkeypatch.setattr(build_workers._Worker, "build", lambda self, req: sent.append(req["cuda_arch"]) or real(self, req))
    jobs = [(*_gpu_kernel(200 + k, 1.5 + k), f"gk{k}") for k in range(6)]
    ticks = []
    modules = build_mod.build_many(jobs, "cuda", progress=lambda: ticks.append(1))
    assert len(ticks) == 6 and sent
    assert [m.symbol for m in modules] == [build_mod.build(s, a, "cuda", n).symbol for s, a, n in jobs]
    assert all(m.get_source("cuda") for m in modules)
