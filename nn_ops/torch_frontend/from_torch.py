"""``lw.from_torch(module, example_inputs, dynamic_shapes=None)``: a torch module as a loopweave graph.

The module goes through torch's ONNX exporter in memory (``export.py``: nothing is written to disk)
and then through ``from_onnx``, so what comes back is what ``lw.from_onnx`` gives: a ``Graph``, or a
``DynamicGraph`` when ``dynamic_shapes`` leaves sizes symbolic, ready for ``lw.compile``.  Its inputs
are named after ``forward``'s arguments; parameters and buffers are constants of the graph.
"""
from __future__ import annotations

from typing import Optional

from ...errors import ArgumentError
from ...extras import require_extra
from ..models import from_onnx
from .export import to_onnx
from .tensors import check_cpu


def from_torch(module, example_inputs, dynamic_shapes=None, name: Optional[str] = None):
    """Import ``module`` (a ``torch.nn.Module``) called on ``example_inputs`` (a tensor or a tuple of
    them) as a Graph, or a DynamicGraph where ``dynamic_shapes`` (as in ``torch.export.export``: e.g.
    ``{"x": {1: torch.export.Dim("seq")}}``) makes sizes symbolic.  A module torch cannot export raises
    ``TorchExportError`` with torch's reason; ops loopweave does not import, ``OnnxImportError`` listing
    them."""
    torch = require_extra("torch", "from_torch")
    if not isinstance(module, torch.nn.Module):
        raise ArgumentError(f"from_torch takes a torch.nn.Module, got {type(module).__name__}")
    args = (example_inputs,) if isinstance(example_inputs, torch.Tensor) else tuple(example_inputs)
    check_cpu([a for a in args if isinstance(a, torch.Tensor)], "from_torch")
    model = to_onnx(module, args, dynamic_shapes)
    return from_onnx(model, name=name or type(module).__name__)
