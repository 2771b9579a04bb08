"""Optional dependencies, checked where a feature starts rather than deep inside it.

``require_extra(module, feature)`` imports ``module`` and returns it, or raises
``MissingExtraError`` naming the feature, the module and the pip extra of ``pyproject.toml`` that
installs it (``EXTRA_OF``), so a tuning run stops in its first second, not after its first round.
"""
from __future__ import annotations

import importlib

from .errors import MissingExtraError

#: the extra (``[project.optional-dependencies]``) that installs each optional module
EXTRA_OF = {"lightgbm": "autoschedule", "matplotlib": "notebook", "onnx": "onnx", "onnxruntime": "bench",
            "distributed": "dask", "torch": "torch", "onnxscript": "torch"}


def install_hint(module: str) -> str:
    """``pip install "loopweave[EXTRA]"`` (or ``pip install -e ".[EXTRA]"`` from a clone) for ``module``."""
    extra = EXTRA_OF[module]
    return f'pip install "loopweave[{extra}]" (from a clone: pip install -e ".[{extra}]")'


def require_extra(module: str, feature: str):
    """The imported ``module``, or a ``MissingExtraError`` saying that ``feature`` needs it and how to
    install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise MissingExtraError(f"{feature} needs the optional package {module!r}, which is not installed: "
                                f"{install_hint(module)}") from None
