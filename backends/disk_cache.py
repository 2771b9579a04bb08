"""Where compiled code is cached on disk: ``$LOOPWEAVE_CACHE_DIR``, default ``~/.cache/loopweave``.

One folder for every code generator's cache (LLVM objects, the thread pool's object,
CUDA PTX, network kernels), so clearing it clears them all.  The folder holds code that later
compiles load, so it is created ``0700`` and used only while it is this user's and no one else can
write it; otherwise compiles keep their code in memory (one ``CacheWarning`` per folder).
"""
from __future__ import annotations

import hashlib
import os
import stat
import tempfile
import warnings
from pathlib import Path
from typing import Optional

from ..errors import CacheWarning


def cache_dir() -> Path:
    """The cache folder's path, ``$LOOPWEAVE_CACHE_DIR`` or ``~/.cache/loopweave`` (read from the
    environment at each call, so tests can move it).  Use ``writable_cache_dir`` to use it."""
    return Path(os.environ.get("LOOPWEAVE_CACHE_DIR", Path.home() / ".cache" / "loopweave"))


_MAGIC = b"LWC1"          # checksummed entry: magic, sha256 of the payload (32 bytes), payload
_HEADER = len(_MAGIC) + 32
_warned_unusable = set()


def untrusted_reason(path: Path) -> Optional[str]:
    """Why the folder ``path`` cannot hold code this process will run, or None: it must be a folder
    owned by this user that neither its group nor others can write (whoever can write it could put
    object code there that the next compile loads)."""
    st = path.stat()
    if not stat.S_ISDIR(st.st_mode):
        return "it is not a folder"
    if hasattr(os, "getuid") and st.st_uid != os.getuid():
        return f"it belongs to another user (uid {st.st_uid}, this process runs as {os.getuid()})"
    if st.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return f"its group or other users can write it (mode {stat.S_IMODE(st.st_mode):o}; chmod 700 it)"
    return None


def writable_cache_dir() -> Optional[Path]:
    """``cache_dir()``, created ``0700`` if missing, or None (with one CacheWarning per folder) when
    it cannot be created or written, or cannot be trusted (``untrusted_reason``): callers then build
    in memory."""
    path = cache_dir()
    try:
        path.mkdir(parents=True, exist_ok=True, mode=0o700)
        problem = untrusted_reason(path)
        if problem is None:
            if os.access(path, os.W_OK | os.X_OK):
                return path
            problem = "it is not writable"
    except OSError as exc:
        problem = str(exc)
    if str(path) not in _warned_unusable:
        _warned_unusable.add(str(path))
        warnings.warn(f"loopweave cache directory {str(path)!r} cannot be used ({problem}); compiled code is kept "
                      "in memory only (set LOOPWEAVE_CACHE_DIR to a folder of your own that only you can write)",
                      CacheWarning, stacklevel=3)
    return None


def read_verified(path: Path) -> Optional[bytes]:
    """The payload of the checksummed entry at ``path``, or None if it is missing.

    A damaged entry (truncated, bytes flipped, not written by ``write_checksummed``) is
    deleted and reported with one CacheWarning naming the file, and None is returned so
    the caller rebuilds it; no byte of it reaches the caller."""
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    except OSError as exc:
        warnings.warn(f"cannot read loopweave cache entry {str(path)!r} ({exc}); rebuilding it", CacheWarning,
                      stacklevel=3)
        return None
    payload = data[_HEADER:]
    if len(data) >= _HEADER and data[:len(_MAGIC)] == _MAGIC and \
            hashlib.sha256(payload).digest() == data[len(_MAGIC):_HEADER]:
        return payload
    try:
        path.unlink()
    except OSError:
        pass
    warnings.warn(f"loopweave cache entry {str(path)!r} was damaged (checksum mismatch, {len(data)} bytes); "
                  "deleted it and rebuilding", CacheWarning, stacklevel=3)
    return None


def write_checksummed(path: Path, payload: bytes) -> None:
    """Write ``payload`` with its sha256 to ``path`` atomically (a temporary file, then a rename);
    an unwritable folder is reported once and the entry is skipped."""
    try:
        fd, tmp = tempfile.mkstemp(dir=path.parent, suffix=".tmp")
    except OSError:
        writable_cache_dir()
        return
    try:
        with os.fdopen(fd, "wb") as f:
            f.write(_MAGIC + hashlib.sha256(payload).digest() + payload)
        os.replace(tmp, path)
    except OSError as exc:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        warnings.warn(f"cannot write loopweave cache entry {str(path)!r} ({exc}); keeping it in memory only",
                      CacheWarning, stacklevel=3)
