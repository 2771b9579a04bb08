"""``from_onnx(model)``: an ONNX model (path or ModelProto) to a loopweave Graph, or to a
DynamicGraph when its shapes are known only at run time (``dynamic.py``)."""
from __future__ import annotations

from typing import Dict, Optional, Sequence

from ...errors import InternalError, LoopweaveError, OnnxImportError
from .dynamic import DynamicGraph
from .importer import (MIN_OPSET, import_static, load_model, model_opset, shape_inputs_behind, symbolic_dims,
                       with_input_shapes)


def from_onnx(model, input_shapes: Optional[Dict[str, Sequence[int]]] = None, name: Optional[str] = None):
    """Import an ONNX model: a :class:`Graph`, or a :class:`DynamicGraph` when shapes are only known at run time.

    ``input_shapes`` fixes dynamic input dimensions.  A model whose inputs keep symbolic
    dimensions (a batch ``"N"``), or whose shape-like operands (Reshape's shape, Slice's
    starts, Resize's sizes...) are graph inputs, imports as a DynamicGraph: ``compile``
    makes it an executable that specialises to each concrete input shape (and each value
    of those shape inputs) on first use.
    """
    try:
        return _from_onnx(model, input_shapes, name)
    except (LoopweaveError, InternalError):
        raise
    except Exception as exc:  # noqa: BLE001 - the promise: only loopweave's types escape
        raise InternalError(f"from_onnx failed unexpectedly: {type(exc).__name__}: {exc}") from exc


def _from_onnx(model, input_shapes, name):
    model = load_model(model)
    import onnx
    if not model.graph.node and not model.graph.output:
        raise OnnxImportError("the ONNX model has an empty graph (no nodes and no outputs); is the file complete?")
    try:
        onnx.checker.check_model(model)
    except Exception as exc:
        raise OnnxImportError(f"the ONNX model is malformed: {exc}") from exc
    opset = model_opset(model)
    if opset < MIN_OPSET:
        try:
            from onnx import version_converter
            model = version_converter.convert_version(model, MIN_OPSET)
            opset = MIN_OPSET
        except Exception as exc:
            raise OnnxImportError(f"the model uses opset {opset}; loopweave imports opset {MIN_OPSET} and newer, "
                                  f"and converting it failed: {exc}") from exc
    model = with_input_shapes(model, input_shapes or {})
    name = name or model.graph.name or "graph"
    if symbolic_dims(model):
        return DynamicGraph(model, opset, name, value_inputs=())
    try:
        return import_static(model, opset, name)
    except OnnxImportError as exc:
        value_inputs = shape_inputs_behind(model, exc)
        if not value_inputs:
            raise
        return DynamicGraph(model, opset, name, value_inputs=value_inputs)
