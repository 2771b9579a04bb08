"""Files loopweave writes for the user (``.lwx``, exported ``.so`` / ``.h`` / ``.c`` / ``.params``)
appear whole or not at all, and writing one never follows a link someone else planted.

``replacing(path)`` gives a new, empty temporary file in ``path``'s folder, made by ``mkstemp``
(a name no one can predict, created exclusively: an existing file or symbolic link is never opened),
and moves it onto ``path`` with ``os.replace`` when the block ends without an error; on an error it
is deleted and ``path`` is left as it was.  The file gets the permissions a plain ``open`` would
give it (``0666`` less the umask), not ``mkstemp``'s ``0600``.  ``replacing_file``, ``write_bytes``
and ``write_text`` write through the descriptor ``mkstemp`` opened.
"""
from __future__ import annotations

import contextlib
import os
import tempfile
from pathlib import Path
from typing import BinaryIO, Iterator, Tuple


def _umask() -> int:
    """The process's umask (read from /proc where it can be: setting it to read it races with threads)."""
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _temporary(path: Path) -> Tuple[int, Path]:
    try:
        fd, name = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:     # name the file the user asked for, not the temporary one
        raise type(exc)(exc.errno, exc.strerror, str(path)) from None
    os.fchmod(fd, 0o666 & ~_umask())
    return fd, Path(name)


@contextlib.contextmanager
def replacing(path) -> Iterator[Path]:
    """``with replacing("model.so") as tmp: write tmp`` (see the module docstring)."""
    path = Path(path)
    fd, tmp = _temporary(path)
    try:
        os.close(fd)
        yield tmp
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


@contextlib.contextmanager
def replacing_file(path) -> Iterator[BinaryIO]:
    """``with replacing_file("model.params") as f: f.write(...)``: ``replacing``, written through the
    binary file object of the descriptor ``mkstemp`` opened."""
    path = Path(path)
    fd, tmp = _temporary(path)
    try:
        with os.fdopen(fd, "wb") as f:
            yield f
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def write_bytes(path, data: bytes) -> None:
    """``path.write_bytes(data)``, through ``replacing_file``."""
    with replacing_file(path) as f:
        f.write(data)


def write_text(path, text: str) -> None:
    """``path.write_text(text)`` (UTF-8), through a temporary file and ``os.replace``."""
    write_bytes(path, text.encode("utf-8"))
