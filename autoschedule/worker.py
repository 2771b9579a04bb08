"""A measuring worker process: ``python -m loopweave.autoschedule.worker``.

Started with exec (a fresh interpreter, never a fork of the tuner: the native thread
pool is not fork-safe), and without re-importing the user's main module (which
multiprocessing's spawn would do, breaking scripts that lack a ``__main__`` guard).
Protocol on stdin/stdout: 8-byte big-endian length, then a pickled dict; a request holds
``measure_one``'s keyword arguments, a reply its result.
"""
from __future__ import annotations

from ..backends.wire import serve
from .measure import measure_job


def main() -> None:
    serve(measure_job)


if __name__ == "__main__":
    main()
