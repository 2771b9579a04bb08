"""Where compiled code is cached on disk: ``$LOOPWEAVE_CACHE_DIR``, default ``~/.cache/loopweave``.

One folder for every code generator's cache (LLVM objects, the thread pool's object,
CUDA PTX, network kernels), so clearing it clears them all.
"""
from __future__ import annotations

import os
from pathlib import Path


def cache_dir() -> Path:
    """The cache folder, created if missing (read from the environment at each call, so tests can move it)."""
    path = Path(os.environ.get("LOOPWEAVE_CACHE_DIR", Path.home() / ".cache" / "loopweave"))
    path.mkdir(parents=True, exist_ok=True)
    return path
