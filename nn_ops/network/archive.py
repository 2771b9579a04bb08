"""The checksummed zip behind ``.lwx`` files (``Executable.save``, ``DynamicExecutable.save``).

Every member (kernel objects, the runner, weights, the ONNX model, nested executables)
has its sha256 recorded in ``meta.json`` under ``"checksums"``; ``meta.json`` itself has
its sha256 in the member ``meta.sha256``.  ``ArchiveReader`` verifies ``meta.json``
before parsing it and every other member before returning a byte of it, so a damaged
file gives a ``DamagedFileError`` naming the member instead of reaching LLVM or numpy.

Every member is stored uncompressed (``ZIP_STORED``), and a member's declared size is checked
before a byte of it is read: it must be stored, no larger than the file that holds it and within
``lw.memory_limit``.  A compressed member (which could inflate to gigabytes before its checksum is
checked) is a ``DamagedFileError`` naming it.

Checksums guard against damage (a truncated download, a full disk, bit rot), not against
a malicious file: a ``.lwx`` contains native code, and loading one runs it.
"""
from __future__ import annotations

import hashlib
import json
import os
import sys
import zipfile
import zlib
from typing import Dict

from ...errors import ArgumentError, DamagedFileError
from ...backends.output_file import replacing
from .limits import memory_limit_bytes

META = "meta.json"
META_DIGEST = "meta.sha256"


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ArchiveWriter:
    """``with ArchiveWriter(path) as w: w.add(name, data); ...; w.finish(meta)``.  A path is written
    through a temporary file beside it, moved onto it when the block ends without an error
    (``backends/output_file.py``); a binary file object is written in place."""

    def __init__(self, path):
        self._replacing = None
        if isinstance(path, (str, os.PathLike)):
            self._replacing = replacing(path)
            path = self._replacing.__enter__()
        self._zip = zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED)
        self.checksums: Dict[str, str] = {}

    def add(self, name: str, data: bytes) -> None:
        self._zip.writestr(name, data)
        self.checksums[name] = sha256(data)

    def finish(self, meta: dict) -> None:
        text = json.dumps(dict(meta, checksums=self.checksums), indent=1).encode("utf-8")
        self._zip.writestr(META, text)
        self._zip.writestr(META_DIGEST, sha256(text))

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        try:
            self._zip.close()
        except BaseException:
            if self._replacing is not None:
                self._replacing.__exit__(*sys.exc_info())
            raise
        if self._replacing is not None:
            self._replacing.__exit__(*exc)


def _read_raw(z: zipfile.ZipFile, name: str, where: str, archive_bytes: int) -> bytes:
    """Member ``name``'s bytes, its declared size checked first (see the module docstring)."""
    try:
        info = z.getinfo(name)
    except KeyError:
        raise DamagedFileError(f"{where} is damaged: member {name!r} is missing", name) from None
    if info.compress_type != zipfile.ZIP_STORED or info.compress_size != info.file_size:
        raise DamagedFileError(f"{where} is damaged: member {name!r} is compressed ({info.file_size} bytes declared "
                               f"from {info.compress_size}); loopweave stores every member uncompressed", name)
    if info.file_size > archive_bytes or info.file_size > memory_limit_bytes():
        raise DamagedFileError(f"{where} is damaged: member {name!r} declares {info.file_size} bytes, more than the "
                               f"file's {archive_bytes} bytes or the memory limit of {memory_limit_bytes()}", name)
    try:
        return z.read(name)
    except KeyError:
        raise DamagedFileError(f"{where} is damaged: member {name!r} is missing", name) from None
    except (zipfile.BadZipFile, zlib.error, EOFError, OSError, ValueError, NotImplementedError) as exc:
        raise DamagedFileError(f"{where} is damaged: member {name!r} cannot be read ({exc})", name) from None


def _size_of(path) -> int:
    """The size of the file (a path, or a seekable binary file object, left where it was)."""
    if isinstance(path, (str, os.PathLike)):
        return os.path.getsize(path)
    here = path.tell()
    try:
        return path.seek(0, os.SEEK_END)
    finally:
        path.seek(here)


def not_an_executable(where: str, path) -> str:
    """The message for a file that is no ``.lwx`` at all, with the step a user most likely skipped
    (an ONNX model handed to ``load`` or ``loopweave run`` instead of its compiled executable)."""
    name = os.fspath(path) if isinstance(path, (str, os.PathLike)) else "MODEL.onnx"
    lead = "it looks like an ONNX model" if name.endswith(".onnx") else "if it is an ONNX model"
    return (f"{where} is not a loopweave executable (a .lwx file, written by exe.save or 'loopweave compile -o'); "
            f"{lead}: compile it first (loopweave compile {name} -o model.lwx, or lw.compile(lw.from_onnx(...)))")


class ArchiveReader:
    """An opened ``.lwx``: ``meta`` (verified and parsed) and ``read(member)`` (verified)."""

    def __init__(self, path, where: str = ""):
        self.where = where or repr(str(path))
        if not (isinstance(path, (str, os.PathLike)) or (hasattr(path, "read") and hasattr(path, "seek"))):
            raise ArgumentError(f"load takes a file path (or a binary file object), got {type(path).__name__}")
        if isinstance(path, (str, os.PathLike)) and not os.path.exists(path):
            raise ArgumentError(f"the executable file {self.where} does not exist")
        try:
            self._zip = zipfile.ZipFile(path)
            self._bytes = _size_of(path)
        except zipfile.BadZipFile:
            raise ArgumentError(not_an_executable(self.where, path)) from None
        except (OSError, zlib.error, EOFError, ValueError) as exc:
            raise ArgumentError(f"cannot open {self.where} as a loopweave executable: {exc}") from None
        try:
            self.meta = self._read_meta()
        except BaseException:
            self._zip.close()
            raise

    def _read_meta(self) -> dict:
        names = set(self._zip.namelist())
        if META not in names:
            if META_DIGEST in names:        # a file of this format that lost its meta.json
                raise DamagedFileError(f"{self.where} is damaged: member {META!r} is missing", META)
            raise ArgumentError(f"{self.where} is not a loopweave executable (no meta.json)")
        text = _read_raw(self._zip, META, self.where, self._bytes)
        if META_DIGEST not in names:
            if b'"checksums"' in text:      # this format (its meta lists checksums): the digest was lost
                raise DamagedFileError(f"{self.where} is damaged: member {META_DIGEST!r} is missing", META_DIGEST)
            raise ArgumentError(f"{self.where} was saved by an older loopweave (format without checksums), which "
                                "this version does not load; compile the model and save it again")
        recorded = _read_raw(self._zip, META_DIGEST, self.where, self._bytes).decode("ascii", "replace").strip()
        if len(recorded) != 64 or any(c not in "0123456789abcdef" for c in recorded):
            raise DamagedFileError(f"{self.where} is damaged: member {META_DIGEST!r} is not a sha256 digest",
                                   META_DIGEST)
        if recorded != sha256(text):
            raise DamagedFileError(f"{self.where} is damaged: member {META!r} does not match its checksum in "
                                   f"{META_DIGEST!r} (one of the two is damaged)", META)
        try:
            meta = json.loads(text.decode("utf-8"))
        except (UnicodeDecodeError, ValueError) as exc:
            raise DamagedFileError(f"{self.where} is damaged: meta.json is not valid JSON ({exc})", META) from None
        if not isinstance(meta, dict) or not isinstance(meta.get("checksums"), dict) or \
                not all(isinstance(k, str) and isinstance(v, str) for k, v in meta["checksums"].items()):
            raise DamagedFileError(f"{self.where} is damaged: meta.json has no valid 'checksums' table", META)
        return meta

    def read(self, name: str) -> bytes:
        """The bytes of member ``name``, after checking them against the sha256 recorded at save."""
        if not isinstance(name, str):
            raise DamagedFileError(f"{self.where} is damaged: meta.json names a member by {name!r}", META)
        expected = self.meta["checksums"].get(name)
        if expected is None:
            raise DamagedFileError(f"{self.where} is damaged: member {name!r} has no recorded checksum", name)
        data = _read_raw(self._zip, name, self.where, self._bytes)
        if sha256(data) != expected:
            raise DamagedFileError(f"{self.where} is damaged: member {name!r} does not match its checksum "
                                   f"({len(data)} bytes)", name)
        return data

    def close(self) -> None:
        self._zip.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()


class MetaChecker:
    """Typed access to a parsed meta.json: a missing key or a wrong type is a DamagedFileError."""

    def __init__(self, where: str):
        self.where = where

    def fail(self, what: str):
        raise DamagedFileError(f"{self.where} is damaged: meta.json {what}", META)

    def get(self, table, key: str, kind, context: str = ""):
        if not isinstance(table, dict) or key not in table:
            self.fail(f"lacks {context + key!r}")
        value = table[key]
        if kind is int:
            ok = isinstance(value, int) and not isinstance(value, bool) and value >= 0
        else:
            ok = isinstance(value, kind)
        if not ok:
            self.fail(f"has a bad {context + key!r}: {value!r:.80}")
        return value

    def shape(self, value, context: str):
        if not isinstance(value, list) or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                                                  for d in value):
            self.fail(f"has a bad shape for {context}: {value!r:.80}")
        return value

    def signature(self, rows, context: str):
        """[[name, shape, dtype], ...] as inputs and outputs are saved."""
        if not isinstance(rows, list):
            self.fail(f"has a bad {context!r}")
        for row in rows:
            if not (isinstance(row, list) and len(row) == 3 and isinstance(row[0], str) and isinstance(row[2], str)):
                self.fail(f"has a bad entry in {context!r}: {row!r:.80}")
            self.shape(row[1], f"{context} {row[0]!r}")
        return rows
