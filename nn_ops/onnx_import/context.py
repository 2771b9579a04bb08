"""The converter table and the context converters work in.

A converter is a function ``fn(ctx, node)`` registered for an ONNX op type (and an
opset range) with :func:`converter`.  It reads inputs, constants and attributes through
``ctx`` and emits graph-IR nodes with ``ctx.emit``; it raises :class:`Unsupported` for
attribute values it cannot handle, and the importer collects those for its one error.
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Dict, List, Optional

import numpy as np

from ..network.graph import Graph
from ..network.limits import memory_limit_bytes
from ..network.op_table import infer_output, output_shape, scalar_constants


class Unsupported(Exception):
    """Raised by a converter for a node it cannot convert (the reason is the message)."""


class NeedsConstant(Unsupported):
    """An operand must be a constant at import (a shape, axes, pads...): ``values`` names them.

    When such an operand comes from graph inputs, ``from_onnx`` makes the model a
    DynamicGraph that is specialised to the inputs' values at run time."""

    def __init__(self, message: str, values):
        super().__init__(message)
        self.values = list(values)


@dataclass(frozen=True)
class Converter:
    fn: Callable
    since: int
    until: Optional[int]


CONVERTERS: Dict[str, List[Converter]] = {}


def converter(op_type: str, since: int = 1, until: Optional[int] = None):
    """Register ``fn`` for ``op_type`` at opsets ``since <= opset <= until``."""
    def decorate(fn):
        CONVERTERS.setdefault(op_type, []).append(Converter(fn, since, until))
        return fn
    return decorate


def find_converter(op_type: str, opset: int) -> Optional[Converter]:
    for c in CONVERTERS.get(op_type, []):
        if c.since <= opset and (c.until is None or opset <= c.until):
            return c
    return None


def check_size(shape, dtype: str, what: str) -> None:
    """Refuse (Unsupported) a value whose size would exceed the memory limit, before anything is allocated."""
    if any(int(d) < 0 for d in shape):
        raise Unsupported(f"{what} has a negative dimension in shape {tuple(shape)}")
    elements = 1
    for d in shape:
        elements *= int(d)
    nbytes = elements * np.dtype(dtype).itemsize
    limit = memory_limit_bytes()
    if nbytes > limit:
        raise Unsupported(f"{what} of shape {tuple(shape)} ({dtype}) would take {nbytes} bytes, more than the "
                          f"memory limit of {limit} bytes (raise it with lw.memory_limit(nbytes), lw.set_memory_limit "
                          f"or LOOPWEAVE_MAX_TENSOR_BYTES)")


def onnx_attrs(node) -> dict:
    from onnx import helper
    return {a.name: helper.get_attribute_value(a) for a in node.attribute}


def _reduction_identity(kind: str, dtype: str):
    """The value of a reduction over no elements (ONNX: sum 0, prod 1, max the lowest value, ...)."""
    dt = np.dtype(dtype)
    if kind in ("sum", "prod"):
        return 0 if kind == "sum" else 1
    if kind == "mean":
        return np.nan
    if dt.kind == "f":
        return -np.inf if kind == "max" else np.inf
    if dt.kind == "b":
        return kind == "min"
    info = np.iinfo(dt)
    return info.min if kind == "max" else info.max


def _over_empty(op_type: str, attrs: dict, shape, dtype: str, empty) -> np.ndarray:
    """The constant value of an op's result when the result or an input has no elements."""
    if 0 in shape:
        return np.zeros(shape, dtype)
    if op_type == "reduce":      # over no elements: the input, empty, was never checked for size
        check_size(shape, dtype, "the result of a reduction over no elements")
        return np.full(shape, _reduction_identity(attrs["kind"], dtype), dtype)
    raise Unsupported(f"{op_type} reads {empty[0]!r}, which has no elements, and its result {tuple(shape)} is "
                      f"not empty; only reductions (to their identity) and ops with empty results take empty "
                      f"tensors")


def optional_input(node, k: int):
    """Input ``k`` of ``node``, or None when absent or empty (ONNX's omitted optional input)."""
    return node.input[k] if len(node.input) > k and node.input[k] else None


def optional_output(node, k: int):
    """Output ``k`` of ``node``, or None when absent or empty."""
    return node.output[k] if len(node.output) > k and node.output[k] else None


class ImportContext:
    def __init__(self, graph: Graph, opset: int, qdq_outputs=frozenset()):
        self.graph = graph
        self.opset = opset
        #: outputs of the integer operators that stand for a QDQ pattern (``qdq.py``): their reference is
        #: float32 arithmetic, so within one quantization step is as faithful as to the bit
        self.qdq_outputs = frozenset(qdq_outputs)

    # -------------------------------------------------------------- reading
    def attr(self, node, name: str, default=None):
        for a in node.attribute:
            if a.name == name:
                from onnx import helper
                value = helper.get_attribute_value(a)
                if isinstance(value, bytes):
                    try:
                        return value.decode()
                    except UnicodeDecodeError:
                        raise Unsupported(f"attribute {name!r} is not valid UTF-8 text: {value[:40]!r}") from None
                return value
        return default

    def const(self, name: str) -> Optional[np.ndarray]:
        """The value of ``name`` if it is a constant (initializer), else None."""
        if not name:
            return None
        return self.graph.initializers.get(name)

    def require_const(self, node, index: int, what: str) -> np.ndarray:
        if len(node.input) <= index or not node.input[index]:
            raise Unsupported(f"input {index} ({what}) is missing")
        value = self.const(node.input[index])
        if value is None:
            raise NeedsConstant(f"{what} (input {index}, {node.input[index]!r}) must be a constant; "
                                f"dynamic {what} is not supported", [node.input[index]])
        return value

    def shape(self, name: str):
        return self.graph.values[name].shape

    def dtype(self, name: str) -> str:
        return self.graph.values[name].dtype

    def require_float_input(self, node) -> None:
        """Refuse (Unsupported) a node whose first input is not a float tensor."""
        if not self.dtype(node.input[0]).startswith("float"):
            raise Unsupported(f"input of dtype {self.dtype(node.input[0])} (float expected)")

    # -------------------------------------------------------------- writing
    def temp(self, base: str, tag: str) -> str:
        """A fresh name for an intermediate value of the node whose output is ``base``."""
        return self.graph.fresh_name(f"{base}.{tag}")

    def add_constant(self, base: str, array: np.ndarray) -> str:
        name = self.graph.fresh_name(base)
        self.set_constant(name, array)
        return name

    def set_constant(self, name: str, array: np.ndarray) -> None:
        """Make ``name`` a constant of the graph.  Whoever computes ``array`` checks its size before
        making it (``check_size``; folds: ``fold_size.py``); this check keeps one that was not from
        becoming a weight of the network."""
        array = np.asarray(array)
        check_size(array.shape, str(array.dtype), f"the constant {name!r}")
        self.graph.add_initializer(name, array)

    def emit(self, op_type: str, inputs, output: str, attrs=None, name: str = "") -> str:
        """Add a graph node; its output's shape and dtype come from building the op."""
        attrs = dict(attrs or {})
        inputs = [i for i in inputs if i is not None]
        if op_type == "concat" and len(inputs) > 1:   # empty pieces add nothing to a concatenation
            kept = [i for i in inputs if 0 not in self.graph.values[i].shape] or inputs[:1]
            if len(kept) == 1 and len(kept) < len(inputs):
                op_type, attrs, inputs = "identity", {}, kept
            inputs = kept
        scalars = scalar_constants(self.graph, op_type, inputs)
        shapes = [self.graph.values[i].shape for i in inputs]
        dtypes = [self.graph.values[i].dtype for i in inputs]
        try:
            t = infer_output(op_type, shapes, dtypes, attrs, scalars)
        except Unsupported:
            raise
        except Exception as exc:  # a shape the op refuses: report it as this node's problem
            empty = [i for i, shp in zip(inputs, shapes) if 0 in shp]
            if empty and op_type in ("identity", "cast"):   # the result has the input's (empty) shape
                self.set_constant(output, np.zeros(shapes[0], attrs.get("to", dtypes[0])))
                return output
            if empty:
                raise Unsupported(f"{op_type} reads {empty[0]!r}, which has no elements, and loopweave cannot "
                                  f"tell the shape of its result; only reductions, concat and ops whose result "
                                  f"shape follows take empty tensors") from exc
            raise Unsupported(f"{op_type} over input shapes {shapes}: {exc}") from exc
        shape = output_shape(t)
        check_size(shape, t.dtype, f"the result {output!r}")
        empty = [i for i in inputs if 0 in self.graph.values[i].shape]
        if 0 in shape or empty:
            # nothing to compute: an empty result is empty whatever its inputs, and a reduction over
            # nothing is its identity; either becomes a constant, so no kernel ever sees a zero extent
            self.set_constant(output, _over_empty(op_type, attrs, shape, t.dtype, empty))
            return output
        self.graph.add_value(output, shape, t.dtype)
        self.graph.add_node(op_type, inputs, [output], attrs, name or output)
        return output
