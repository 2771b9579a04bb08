"""``measuring_alone()``: one timing at a time on a machine, whichever process times.

Candidates are built in parallel (on every worker of a Dask cluster, by every tuner on a host),
but two kernels timed at once on one machine share its cores, caches and memory bandwidth and
both times are wrong.  Each measurement holds an exclusive ``flock`` on a file named after the
host in its temporary folder while it checks and times a kernel, so the processes of one machine
take turns and those of different machines do not wait for each other.  A file lock rather than a
cluster-wide one (``distributed.Lock``): it needs no scheduler round trip, it works for any
process executor and for tuners that know nothing of each other, and the kernel releases it when
its holder dies, so a candidate killed at its timeout does not keep the others waiting.
"""
from __future__ import annotations

import contextlib
import fcntl
import os
import socket
import tempfile


def lock_path() -> str:
    """The lock file of this host (its name in it, should the temporary folder be shared)."""
    host = "".join(c if c.isalnum() or c in "-." else "_" for c in socket.gethostname()) or "host"
    return os.path.join(tempfile.gettempdir(), f"loopweave-measure-{host}.lock")


@contextlib.contextmanager
def measuring_alone():
    """Hold this host's measuring lock for the block (waiting for any other holder first)."""
    fd = os.open(lock_path(), os.O_RDONLY | os.O_CREAT, 0o666)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)         # closing the descriptor releases the lock
