"""The PATH that loopweave looks up programs on: its absolute folders only.

An empty or relative entry (``PATH=:/usr/bin`` or ``.``) means the current folder, which may be an
unpacked model's: a ``cc`` or ``nvcc`` planted there must never run.
"""
from __future__ import annotations

import os


def absolute_path() -> str:
    """``$PATH`` (else the default) without its empty and relative entries, for ``shutil.which``."""
    entries = os.environ.get("PATH", os.defpath).split(os.pathsep)
    return os.pathsep.join(entry for entry in entries if entry and os.path.isabs(entry))
