"""Cold CPU builds of many kernels spread over the machine's cores (the workers run ``build_worker``).

Lowering is Python (one core under the GIL), so a network's cold compile used one core. Here
worker processes lower and compile kernels taken from the back of the job list while the calling
process works from the front; a worker sends back the lowered function and its object code, and
the caller loads it. Workers are started with exec (a fresh interpreter: never a fork, the native
thread pool is not fork-safe, and never multiprocessing's spawn, which re-imports the user's main
module), once per process, and kept for later compiles; the first compile overlaps their start
with its own work. Protocol on stdin/stdout: ``backends.wire`` frames, one job and one reply each.

Anything that goes wrong in a worker (a schedule the lowering refuses, something that does not
pickle, a worker that died) makes the caller build that job itself, so errors are the ones an
in-process build raises. ``LOOPWEAVE_BUILD_WORKERS=0`` turns the workers off; another number sets
how many there are (default: one fewer than the cores, the caller being the last).
"""
from __future__ import annotations

import atexit
import collections
import os
import subprocess
import threading
from typing import Callable, List, Optional, Sequence

from .python_command import python_module_command
from .wire import recv, send

# fewer cold kernels than this are built in the calling process: a worker's start costs ~1 s
MIN_JOBS = 4


def _wanted() -> int:
    """``LOOPWEAVE_BUILD_WORKERS``, else one fewer than the cores."""
    setting = os.environ.get("LOOPWEAVE_BUILD_WORKERS", "").strip()
    try:
        return max(0, int(setting)) if setting else max(0, (os.cpu_count() or 1) - 1)
    except ValueError:
        return 0


def worker_count(n_jobs: int) -> int:
    """How many worker processes ``n_jobs`` cold builds get (0: build them all here)."""
    return 0 if n_jobs < MIN_JOBS else min(_wanted(), n_jobs - 1)


class _Worker:
    """One worker process and the pipe to it; used by one thread at a time."""

    def __init__(self):
        self.proc = subprocess.Popen(python_module_command(__package__ + ".build_worker"),
                                     stdin=subprocess.PIPE, stdout=subprocess.PIPE)

    def alive(self) -> bool:
        return self.proc.poll() is None

    def build(self, request: dict):
        send(self.proc.stdin.fileno(), request)
        reply = recv(self.proc.stdout.fileno())
        if "error" in reply:
            raise RuntimeError(reply["error"])
        return reply["built"]

    def close(self) -> None:
        if self.alive():
            self.proc.kill()
            self.proc.wait()


_idle_lock = threading.Lock()
_idle: List[_Worker] = []


def _prune_idle() -> None:
    """Drop idle workers that died (the caller holds ``_idle_lock``)."""
    _idle[:] = [w for w in _idle if w.alive()]


def _take_workers(n: int) -> List[_Worker]:
    with _idle_lock:
        _prune_idle()
        taken, _idle[:] = _idle[:n], _idle[n:]
    return taken + [_Worker() for _ in range(n - len(taken))]


def prestart() -> None:
    """Start the workers a compile will want (if they are not running yet) without waiting for
    them: a network compile calls this at its first kernel that no cache holds, so their start
    (~0.8 s of imports) overlaps the scheduling of the rest instead of the kernel builds."""
    with _idle_lock:
        _prune_idle()
        _idle.extend(_Worker() for _ in range(_wanted() - len(_idle)))


def _give_back(workers: List[_Worker]) -> None:
    with _idle_lock:
        _idle.extend(w for w in workers if w.alive())


@atexit.register
def _close_all() -> None:
    with _idle_lock:
        for w in _idle:
            w.close()
        _idle.clear()


def build_spread(jobs: Sequence, target, checks, build_here: Callable[[int], object],
                 from_worker: Callable[[object, str, bytes], object],
                 progress: Optional[Callable[[], None]] = None, workers: int = 1,
                 extra: Optional[dict] = None) -> List[object]:
    """One result per job, in order: ``build_here(i)`` for the jobs this process takes (from the
    front; all of them when ``workers`` is 0), ``from_worker(func, symbol, obj)`` for those a
    worker built (from the back; for the GPU the symbol and object are None).  ``extra``: more
    fields for every request."""
    queue = collections.deque(range(len(jobs)))
    lock = threading.Lock()
    built = {}              # index -> (func, symbol, obj), filled by the worker threads
    failed = []             # indices a worker could not build: built here at the end
    env = {k: v for k, v in os.environ.items() if k.startswith("LOOPWEAVE_")}   # may differ from the workers' start

    def drive(worker: _Worker) -> None:
        while True:
            with lock:
                if not queue:
                    return
                index = queue.pop()
            s, args, name = jobs[index]
            try:
                result = worker.build(dict(extra or {}, schedule=s, args=args, name=name, target=target,
                                           checks=checks, env=env))
            except Exception:             # noqa: BLE001 - the caller builds it and raises its own error
                with lock:
                    failed.append(index)
                if not worker.alive():
                    return
                continue
            with lock:
                built[index] = result

    pool = _take_workers(workers)
    threads = [threading.Thread(target=drive, args=(w,), daemon=True, name="loopweave-build-worker") for w in pool]
    for t in threads:
        t.start()
    results: List[object] = [None] * len(jobs)
    reported = 0

    def report() -> None:
        nonlocal reported
        if progress is not None:
            with lock:
                finished = len(built) + len(failed)
            while reported < finished:
                progress()
                reported += 1

    try:
        while True:
            with lock:
                if not queue:
                    break
                index = queue.popleft()
            results[index] = build_here(index)
            if progress is not None:
                progress()
            report()
    finally:        # on an error here too: the workers finish their current job before they are given back
        with lock:
            queue.clear()
        for t in threads:
            t.join()
        _give_back(pool)
    report()
    for index, (func, symbol, obj) in built.items():
        results[index] = from_worker(func, symbol, obj)
    for index in sorted(failed):
        results[index] = build_here(index)
    return results
