"""The wire format of loopweave's worker processes (tuning measurements, parallel builds): 8-byte big-endian length, then a pickled dict."""
from __future__ import annotations

import os
import pickle
import struct
import sys
from typing import Callable


def _read_exact(fd: int, n: int) -> bytes:
    buf = bytearray()
    while len(buf) < n:
        chunk = os.read(fd, n - len(buf))
        if not chunk:
            raise EOFError
        buf += chunk
    return bytes(buf)


def send(fd: int, obj) -> None:
    data = pickle.dumps(obj)
    os.write(fd, struct.pack(">Q", len(data)))
    view = memoryview(data)
    while view:
        n = os.write(fd, view)
        view = view[n:]


def recv(fd: int):
    (n,) = struct.unpack(">Q", _read_exact(fd, 8))
    return pickle.loads(_read_exact(fd, n))


def serve(handle: Callable[[dict], dict]) -> None:
    """A worker process's loop: each request from stdin answered with ``handle(request)`` on
    stdout, until stdin closes.  Stray prints go to stderr (they would corrupt the protocol); a
    reply that fails, or does not pickle, becomes ``{"error": message}``."""
    inp, out = sys.stdin.fileno(), os.dup(sys.stdout.fileno())
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    while True:
        try:
            request = recv(inp)
        except EOFError:
            return
        try:
            send(out, handle(request))
        except Exception as exc:          # noqa: BLE001 - reported to the caller, who decides
            send(out, {"error": f"{type(exc).__name__}: {exc}"})
