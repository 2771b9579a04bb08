"""A torch module to an ONNX ``ModelProto`` in memory, through torch's ``torch.export``-based exporter.

Why that exporter (``torch.onnx.export(..., dynamo=True)``) and not the TorchScript one: it is torch's
supported path since 2.9 (the TorchScript exporter warns that it is deprecated), it takes the same
``dynamic_shapes`` as ``torch.export`` (so symbolic sizes reach the ONNX model as named dims and
``from_onnx`` makes a DynamicGraph of them), and it refuses data-dependent control flow with a
reason instead of silently tracing one branch.  It costs about a second per export, once per compile.

Parameters and buffers become initializers (constants of the graph), never inputs.  The exporter's
progress lines and its notes about torchvision are kept off the user's terminal; its errors become a
``TorchExportError`` naming torch's reason.
"""
from __future__ import annotations

import contextlib
import io
import logging
import re
import warnings
from typing import Optional, Sequence

from ...errors import TorchExportError
from ...extras import require_extra

#: the loggers the exporter talks through (notes such as "torchvision is not installed", the traced
#: graph of a failed export): these and those below them
_QUIET_LOGGERS = ("torch", "onnxscript", "onnx_ir")
_ANSI = re.compile(r"\x1b\[[0-9;]*m")
_SUMMARY = re.compile(r"## Exception summary\s*<class '(?:[\w.]*\.)?(\w+)'>: (.*)")


@contextlib.contextmanager
def _quiet():
    """The exporter's output (stdout, stderr, log notes), silenced for the duration: its errors are raised,
    and its ``UserWarning``s (a module exported in training mode) are issued again after it."""
    names = [name for name in list(logging.Logger.manager.loggerDict)
             if name.split(".")[0] in _QUIET_LOGGERS] + list(_QUIET_LOGGERS)
    loggers = [logging.getLogger(name) for name in names]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with warnings.catch_warnings(record=True) as caught, contextlib.redirect_stdout(io.StringIO()), \
                contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("always")
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)
    for w in caught:
        if w.category is UserWarning:
            warnings.warn(str(w.message), UserWarning, stacklevel=4)


def torch_reason(exc: BaseException) -> str:
    """torch's error in a line: the exception under the exporter's advice where it summarises one
    (``GuardOnDataDependentSymNode: Could not guard on data-dependent expression ...``), else its first lines."""
    text = _ANSI.sub("", str(exc)).strip()
    summary = _SUMMARY.search(text)
    if summary:
        return f"{summary.group(1)}: {summary.group(2).strip()}"
    lines = [line for line in text.splitlines() if line.strip()][:4]
    return f"{type(exc).__name__}: " + "\n".join(lines)


def to_onnx(module, args: Sequence, dynamic_shapes=None, what: Optional[str] = None, optimize: bool = True):
    """The ``onnx.ModelProto`` of ``module(*args)``; ``dynamic_shapes`` as in ``torch.export.export``.
    A module torch cannot export raises ``TorchExportError`` naming the cause."""
    torch = require_extra("torch", "from_torch")
    require_extra("onnxscript", "from_torch (torch's ONNX exporter)")
    what = what or type(module).__name__
    try:
        with _quiet(), torch.no_grad():
            program = torch.onnx.export(module, tuple(args), dynamo=True, dynamic_shapes=dynamic_shapes,
                                        verbose=False, optimize=optimize, external_data=False)
    except Exception as exc:  # noqa: BLE001 - torch raises many types; the user needs its reason
        raise TorchExportError(f"torch cannot export {what} to a graph: {torch_reason(exc)}\n(loopweave compiles "
                               f"what torch.export can capture: data-dependent control flow, such as an `if` on a "
                               f"tensor's value, needs torch.cond or a fixed branch)") from exc
    if program is None:
        raise TorchExportError(f"torch's ONNX exporter returned no program for {what}")
    return program.model_proto
