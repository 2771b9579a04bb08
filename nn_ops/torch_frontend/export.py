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
from typing import Optional, Sequence

from ...errors import TorchExportError
from ...extras import require_extra

#: the loggers the exporter talks through (notes such as "torchvision is not installed")
_QUIET_LOGGERS = ("torch.onnx", "torch.export", "torch._export", "onnxscript")


@contextlib.contextmanager
def _quiet():
    """The exporter's stdout and its log notes, silenced for the duration."""
    loggers = [logging.getLogger(name) for name in _QUIET_LOGGERS]
    levels = [lg.level for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.ERROR)
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        for lg, level in zip(loggers, levels):
            lg.setLevel(level)


def torch_reason(exc: BaseException) -> str:
    """The first lines of torch's error: its type and what it says, without the long advice that follows."""
    text = str(exc).strip() or type(exc).__name__
    lines = [line for line in text.splitlines() if line.strip()][:6]
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
