"""A measuring worker process: ``python -m loopweave.autoschedule.worker``.

Started with exec (a fresh interpreter, never a fork of the tuner: the native thread
pool is not fork-safe), and without re-importing the user's main module (which
multiprocessing's spawn would do, breaking scripts that lack a ``__main__`` guard).
Protocol on stdin/stdout: 8-byte big-endian length, then a pickled dict; a request holds
``measure_one``'s keyword arguments, a reply its result.
"""
from __future__ import annotations

import os
import sys

from .measure import measure_job
from ..backends.wire import recv, send


def main() -> None:
    inp, out = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())   # stray prints must not corrupt the protocol
    while True:
        try:
            job = recv(inp)
        except EOFError:
            return
        send(out, measure_job(job))


if __name__ == "__main__":
    main()
