"""The wire format of loopweave's worker processes (tuning measurements, parallel builds): 8-byte big-endian length, then a pickled dict."""
from __future__ import annotations

import os
import pickle
import struct


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
