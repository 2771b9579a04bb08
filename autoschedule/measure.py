"""Build and time candidates in spawned worker processes.

The native thread pool is not fork-safe, so workers are *spawned*.  By default one
persistent worker (a fresh interpreter started by exec) is reused across candidates (its compile cache and the task's
reference output stay warm); a crash or a hang costs one candidate: the pool is
replaced and the candidate logged with its error.  A process executor works instead
(``concurrent.futures.ProcessPoolExecutor``, a Dask ``Client``): what travels is the
task (pickled expression data, no code) and the trace as JSON, and each executor task
(``isolated_measure_job``) runs its candidate in a child process of its own with the timeout, and
returns plain JSON data: a candidate that hangs is killed and frees the executor's worker, one that
crashes takes only its child down.  A round's candidates go out together, so every worker builds at
once; each check and timing holds its machine's lock (``host_lock``), so timings never overlap on
one machine, and each reply names the CPU model that timed it.  A thread executor is refused (it would run candidates' native
code in the tuner's own process), and a ``ProcessPoolExecutor`` broken by a dead worker is replaced.
A Dask cluster ships pickles between its scheduler, workers and client: run it on a trusted network
or with TLS (``distributed.security.Security``).
"""
from __future__ import annotations

import concurrent.futures as cf
import json
import pickle
import select
import subprocess
import threading
import time
import traceback
from dataclasses import dataclass
from typing import Optional, Tuple

import numpy as np

from ..backends.python_command import python_module_command
from ..errors import ArgumentError
from ..backends.timing import interleaved
from ..backends.wire import recv, send
from .host_lock import measuring_alone

_TASKS: dict = {}       # per worker process: task key -> (args, inputs, reference output)


@dataclass
class MeasureResult:
    seconds: Optional[float]
    error: Optional[str]
    build_seconds: float = 0.0
    versus_seconds: Optional[float] = None   # a side-by-side job: the other schedule's median time
    ratio: Optional[float] = None            # ... and the median over pairs of its time / this one's
    cpu: Optional[str] = None                # the CPU model that ran it (None: it did not run)
    host: Optional[str] = None               # ... and the machine's name

    @classmethod
    def of(cls, r: dict) -> "MeasureResult":
        """From a worker's reply dict."""
        return cls(r.get("seconds"), r["error"], r.get("build_seconds", 0.0), r.get("versus_seconds"), r.get("ratio"),
                   r.get("cpu"), r.get("host"))


def _index_bounds(args) -> dict:
    """For each placeholder whose values are used as checked indices (a gather's ids), the
    smallest extent they index: random ids must stay below it or the kernel refuses them."""
    from ..dsl.expr import CheckedIndex, TensorLoad
    from ..dsl.visitor import post_order_visit
    from .task import compute_stages, const_int
    bounds = {}

    def visit(e):
        if isinstance(e, CheckedIndex):
            extent = const_int(e.extent) or 1
            found = []
            post_order_visit(e.value, lambda n: found.append(n.tensor) if isinstance(n, TensorLoad) else None)
            for t in found:
                bounds[id(t.op)] = min(bounds.get(id(t.op), extent), extent)
    for t in compute_stages([a for a in args if hasattr(a.op, "body")]):
        for body in t.op.body:
            post_order_visit(body, visit)
    return bounds


def _random_inputs(args, seed: int = 1234):
    rng = np.random.default_rng(seed)
    bounds = _index_bounds(args)
    arrays = []
    for t in args:
        shape = tuple(int(getattr(d, "value", d)) for d in t.shape)
        dt = np.dtype(t.dtype)
        if dt.kind == "f":
            arrays.append(rng.standard_normal(shape).astype(dt))
        elif dt.kind == "b":
            arrays.append(rng.random(shape) < 0.5)
        else:
            arrays.append(rng.integers(0, max(1, min(8, bounds.get(id(t.op), 8))), size=shape).astype(dt))
    return arrays


def _output_positions(args):
    from ..dsl.tensor import ComputeOp
    return [i for i, t in enumerate(args) if isinstance(t.op, ComputeOp)]


def _task_state(key: str, task_bytes: bytes):
    state = _TASKS.get(key)
    if state is None:
        args = pickle.loads(task_bytes)
        state = _TASKS[key] = {"args": args, "arrays": None, "reference": None}
    return state


def _reference(state):
    if state["reference"] is None:
        from ..backends.build import build
        from ..dsl.schedule import create_schedule
        args = state["args"]
        outs = [args[i] for i in _output_positions(args)]
        arrays = _random_inputs(args)
        build(create_schedule(outs), args)(*arrays)
        state["reference"] = [arrays[i].copy() for i in _output_positions(args)]
    return state["reference"]


def _differs_from_untuned(state, arrays) -> Optional[str]:
    """Why the outputs in ``arrays`` (a candidate's, on the reference inputs) are not the untuned
    build's, or None when they agree: floats within a relative 1e-3 of the largest reference value
    (NaN where the reference has NaN: a log of a negative input), other types exactly."""
    ref = _reference(state)
    args = state["args"]
    for pos, want in zip(_output_positions(args), ref):
        got = arrays[pos]
        if want.dtype.kind == "f":
            finite = np.abs(want[np.isfinite(want)])
            scale = max(1.0, float(finite.max(initial=0)))
            agree = np.isclose(got, want, rtol=1e-3, atol=1e-3 * scale, equal_nan=True)
        else:
            agree = got == want
        if not np.all(agree):
            where = np.unravel_index(int(np.argmax(~agree)), want.shape)
            return (f"wrong answer: differs from the untuned build ({args[pos].name}{list(map(int, where))} is "
                    f"{got[where]!r}, the untuned build gives {want[where]!r})")
    return None


def _run_checked(state, mod) -> tuple:
    """One run of ``mod`` on the reference inputs, its outputs first filled with NaN (or 0), then
    compared with the untuned build's: (seconds that run took, why it is wrong or None)."""
    args = state["args"]
    arrays = state["arrays"]
    for i in _output_positions(args):
        arrays[i][...] = np.nan if arrays[i].dtype.kind == "f" else 0
    t0 = time.perf_counter()
    mod(*arrays)
    seconds = time.perf_counter() - t0
    return seconds, _differs_from_untuned(state, arrays)


def wrong_answer(args, schedule) -> Optional[Tuple[str, str]]:
    """None when ``schedule`` of ``args`` computes what the untuned build does, else (what failed,
    why): it is built for this machine and run once on random inputs, its outputs compared with the
    untuned build's as every measured candidate's are (``_run_checked``).  For records this version
    of the compiler did not check (``replay.best_schedule``); it runs in the caller's process,
    which is about to build and run that schedule anyway."""
    from ..backends.build import build
    state = {"args": args, "arrays": _random_inputs(args), "reference": None}
    try:
        mod = build(schedule, args)
        _reference(state)
        wrong = _run_checked(state, mod)[1]
    except Exception as exc:    # a schedule that no longer builds or runs is a verdict, not a crash
        return "no longer build", f"{type(exc).__name__}: {exc}"[:300]
    return None if wrong is None else ("compute differently", wrong[:300])


def measure_one(key: str, task_bytes: bytes, trace_json: str, check_below: Optional[float] = None,
                repeat: int = 5, min_seconds: float = 0.03, crash: bool = False, hang: float = 0.0,
                target: Optional[dict] = None, versus: Optional[str] = None, pairs: int = 15,
                check: bool = True) -> dict:
    """Rebuild the schedule from ``trace_json``, build, check, time; a JSON-able dict back.

    Every candidate's outputs are compared with the untuned build's on random inputs before it is
    timed (``check=False`` only for the untuned schedule itself): a schedule the search, a
    side-by-side verification or another task of its family proposes can become a record's best
    only through this function, so a wrong one is dropped here, its error saying where it differs.
    A candidate clearly slower than ``check_below`` (the best time so far) is placed by two runs.
    ``target`` (Target fields as a dict) is what the code is built for, the host when None.
    ``crash`` kills this process and ``hang`` sleeps that long first (the tests use them to
    check that a crash or a hang costs one candidate).  With ``versus`` (another trace, a
    network's default schedule), both are built and timed alternately, ``pairs`` times, in this
    one call: the reply adds ``versus_seconds`` and ``ratio`` (median of versus / this per pair),
    a comparison that the machine's load between two separate measurements cannot skew.
    """
    if crash:
        import os
        os._exit(3)
    if hang:
        time.sleep(hang)
    from ..backends.build import build
    from ..dsl.schedule import create_schedule
    from ..dsl.trace import Trace
    try:
        state = _task_state(key, task_bytes)
        args = state["args"]
        outs = [args[i] for i in _output_positions(args)]
        from ..target import Target
        tgt = Target(**target) if target else "llvm"

        def built(trace: str):
            s = create_schedule(outs)
            Trace.from_json(trace).apply(s)
            return build(s, args, target=tgt)
        t0 = time.perf_counter()
        mod = built(trace_json)
        other = built(versus) if versus is not None else None
        build_s = time.perf_counter() - t0
        if state["arrays"] is None:
            state["arrays"] = _random_inputs(args)
        if check:
            _reference(state)         # built before the lock: building does not disturb a timing
        with measuring_alone():
            reply = _check_and_time(state, mod, other, check, check_below, repeat, min_seconds, pairs)
        return dict(reply, build_seconds=build_s, **_machine())
    except Exception as exc:  # a candidate's failure is a result, not a crash of the tuner
        return {"seconds": None, "error": f"{type(exc).__name__}: {exc}"[:2000],
                "build_seconds": 0.0, "traceback": traceback.format_exc()[-2000:]}


def _check_and_time(state, mod, other, check: bool, check_below, repeat: int, min_seconds: float, pairs: int) -> dict:
    """``measure_one``'s part that must run alone on the machine: the check against the untuned
    build, then the timing (beside ``other`` when given)."""
    run = lambda: mod(*state["arrays"])     # noqa: E731
    if check:
        first, wrong = _run_checked(state, mod)      # also the warm-up, and a first estimate
        if wrong:
            return {"seconds": None, "error": wrong}
    else:
        t1 = time.perf_counter()
        run()
        first = time.perf_counter() - t1
    if other is not None:
        cmp = interleaved(run, lambda: other(*state["arrays"]), pairs=pairs, min_seconds=0.01, pause=0.0)
        return {"seconds": cmp.ours_s, "error": None, "versus_seconds": cmp.theirs_s, "ratio": cmp.ratio}
    if check_below is not None and first > 3 * check_below and first > 1e-3:
        # clearly slower than the best: one more run is enough to place it
        t1 = time.perf_counter()
        run()
        return {"seconds": min(first, time.perf_counter() - t1), "error": None}
    return {"seconds": mod.time(*state["arrays"], repeat=repeat, min_seconds=min_seconds), "error": None}


def _machine() -> dict:
    """Where a measurement ran: the CPU model (whose timings apply to targets of that CPU) and host."""
    import socket
    from ..target import native_target
    return {"cpu": native_target().cpu, "host": socket.gethostname()}


def measure_job(job: dict) -> dict:
    """``measure_one(**job)``: one positional argument, as executors that reserve keywords (Dask's
    ``key``) need."""
    return measure_one(**job)


class LocalMeasurer:
    """One persistent worker process (two timings never overlap), started by exec.

    A crash or a timeout kills the worker and costs that one candidate; the next
    candidate starts a fresh worker."""

    def __init__(self, timeout: float = 60.0):
        self.timeout = timeout
        self._proc = None

    def _start(self):
        if self._proc is None or self._proc.poll() is not None:
            self._proc = subprocess.Popen(python_module_command("loopweave.autoschedule.worker"),
                                          stdin=subprocess.PIPE, stdout=subprocess.PIPE)
        return self._proc

    def _kill(self):
        proc, self._proc = self._proc, None
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait()

    def run_one(self, job) -> MeasureResult:
        proc = self._start()
        try:
            send(proc.stdin.fileno(), job)
        except OSError as exc:
            self._kill()
            return MeasureResult(None, f"worker failed: {exc}")
        ready, _, _ = select.select([proc.stdout], [], [], self.timeout)
        if not ready:
            self._kill()
            return MeasureResult(None, f"timeout: no result within {self.timeout:g} s")
        try:
            # the reply starts arriving; a worker that dies mid-reply is a crash
            r = recv(proc.stdout.fileno())
        except (EOFError, OSError, pickle.UnpicklingError):
            code = proc.poll()
            self._kill()
            return MeasureResult(None, f"worker crashed (exit code {code})")
        return MeasureResult.of(r)

    def run(self, jobs):
        """``jobs``: list of kwargs for measure_one; returns a MeasureResult per job, in order."""
        return [self.run_one(job) for job in jobs]

    def close(self):
        proc, self._proc = self._proc, None
        if proc is not None:
            try:
                proc.stdin.close()
                proc.wait(timeout=5)
            except Exception:
                proc.kill()
                proc.wait()


_ISOLATED: dict = {}     # per executor worker process: (thread, timeout) -> its LocalMeasurer
_ISOLATED_LOCK = threading.Lock()


def isolated_measure_job(job: dict, timeout: float) -> dict:
    """In an executor's worker: ``measure_one(**job)`` run in a child process of this one (a
    ``LocalMeasurer``, kept warm between jobs), killed after ``timeout`` seconds; the reply as plain
    JSON data (``seconds``, ``error``, ...), never an object of the candidate's making.  Each thread
    of the worker (a Dask worker with several) has a child of its own, so they build at once."""
    with _ISOLATED_LOCK:
        slot = (threading.get_ident(), timeout)
        measurer = _ISOLATED.get(slot)
        if measurer is None:
            measurer = _ISOLATED[slot] = LocalMeasurer(timeout)
    r = measurer.run_one(job)
    return json.loads(json.dumps({"seconds": r.seconds, "error": r.error, "build_seconds": r.build_seconds,
                                  "versus_seconds": r.versus_seconds, "ratio": r.ratio, "cpu": r.cpu,
                                  "host": r.host}))


def _startup_grace(timeout: float) -> float:
    """How much longer than a candidate's timeout the tuner waits for an executor task (the child's
    start, the executor's own latency)."""
    return timeout + 60.0


class ExecutorMeasurer:
    """Measure through a user's process Executor (``concurrent.futures.ProcessPoolExecutor``, a Dask
    ``distributed.Client`` or its ``get_executor()``), each candidate in a child process of the
    executor's worker (``isolated_measure_job``).

    A batch's jobs are all submitted at once: every worker builds candidates at the same time, and
    the workers of one machine take turns only to check and time them (``host_lock``).  Each reply
    names the CPU that ran it, which the tuner compares with the target's."""

    def __init__(self, executor, timeout: float = 120.0):
        if isinstance(executor, cf.ThreadPoolExecutor):
            raise ArgumentError("tune(executor=...): a ThreadPoolExecutor would build and run candidate schedules' "
                                "native code inside the tuner's own process; give a process executor "
                                "(concurrent.futures.ProcessPoolExecutor, a Dask client), or "
                                "no executor for the tuner's own isolated worker")
        if callable(getattr(executor, "get_executor", None)):
            # a Dask Client: jobs that are equal (a schedule measured again) must run again, not be
            # answered from the cluster's memory as its default (pure) tasks would be
            executor = executor.get_executor(pure=False)
        if not callable(getattr(executor, "submit", None)):
            raise ArgumentError(f"tune(executor=...) takes a concurrent.futures Executor or a Dask Client, "
                                f"got {type(executor).__name__}")
        self.executor, self.timeout = executor, timeout
        self._owned = None          # a ProcessPoolExecutor made here to replace a broken one

    def _replace_broken_pool(self) -> None:
        """A ProcessPoolExecutor whose worker died refuses every later job: make a new one like it."""
        old = self.executor
        if not (isinstance(old, cf.ProcessPoolExecutor) and getattr(old, "_broken", False)):
            return
        old.shutdown(wait=False, cancel_futures=True)
        self.executor = self._owned = cf.ProcessPoolExecutor(max_workers=getattr(old, "_max_workers", None),
                                                             mp_context=getattr(old, "_mp_context", None))

    def run(self, jobs):
        """All of ``jobs`` submitted at once; a MeasureResult per job, in order."""
        return self.collect(self.submit(jobs))

    def submit(self, jobs) -> list:
        """Start ``jobs`` on the executor and return at once (their futures, or the exception that
        refused one): the tuner proposes its next batch while these run, so the workers never wait
        for it (``collect`` gives the results)."""
        self._replace_broken_pool()
        futures = []
        for job in jobs:
            try:
                futures.append(self.executor.submit(isolated_measure_job, job, self.timeout))
            except Exception as exc:    # a pool broken while submitting: this job fails, the next ones retry
                self._replace_broken_pool()
                futures.append(exc)
        return futures

    def collect(self, futures: list) -> list:
        """A MeasureResult per future of ``submit``, in order.  The wait for each allows for the
        jobs queued before it on the workers (a timeout each, at worst)."""
        results = []
        for fut in futures:
            if isinstance(fut, Exception):
                results.append(MeasureResult(None, f"worker failed: {type(fut).__name__}: {fut}"[:2000]))
            else:
                results.append(_wait(fut, _startup_grace(self.timeout) + self.timeout * len(futures),
                                     self._replace_broken_pool))
        return results

    def close(self):
        if self._owned is not None:
            self._owned.shutdown(wait=False, cancel_futures=True)
            self._owned = None


def _wait(fut, timeout, reset) -> MeasureResult:
    try:
        r = fut.result(timeout=timeout)
        return MeasureResult.of(r)
    except cf.TimeoutError:
        fut.cancel()
        if reset:
            reset()
        return MeasureResult(None, f"timeout: no result within {timeout:g} s")
    except Exception as exc:   # BrokenProcessPool (worker crashed) or a remote failure
        if reset:
            reset()
        return MeasureResult(None, f"worker failed: {type(exc).__name__}: {exc}"[:2000])
