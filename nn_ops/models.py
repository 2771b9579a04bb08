"""Where a network comes from: an ONNX file, an ``onnx.ModelProto``, or ``zoo:NAME`` (a bundled model,
built in memory with seeded weights).  ``lw.from_onnx`` and every CLI subcommand load models through
this one module, so a missing file, a file that is not ONNX and an unknown zoo name read alike
everywhere.

* ``ZOO_PREFIX``: ``"zoo:"``.
* ``zoo_names()``: the bundled models' names (``nn_ops.testing.model_zoo.NAMES``).
* ``load_onnx_model(source)``: the ``onnx.ModelProto`` of a path, a ModelProto or ``zoo:NAME``.
* ``from_onnx(model, input_shapes=None, name=None)``: ``onnx_import.from_onnx`` that also takes
  ``zoo:NAME``.
"""
from __future__ import annotations

from typing import Dict, Optional, Sequence, Tuple

from ..errors import ArgumentError
from .onnx_import import from_onnx as _import_onnx
from .onnx_import.importer import load_model

ZOO_PREFIX = "zoo:"


def zoo_names() -> Tuple[str, ...]:
    """The names ``zoo:NAME`` takes, in the zoo's order."""
    from .testing.model_zoo import NAMES
    return NAMES


def _is_zoo(source) -> bool:
    return isinstance(source, str) and source.startswith(ZOO_PREFIX)


def _zoo_model(source: str):
    from .testing import model_zoo
    name = source[len(ZOO_PREFIX):]
    if name not in zoo_names():
        raise ArgumentError(f"unknown zoo model {name!r}; the bundled models are {', '.join(zoo_names())} "
                            f"(listed by 'loopweave zoo')")
    return getattr(model_zoo, name)()


def load_onnx_model(source):
    """The ``onnx.ModelProto`` of ``source``: a path to an ONNX file, a ModelProto, or ``zoo:NAME``.
    A missing file or one that is not ONNX is an ``OnnxImportError`` naming it; an unknown zoo name an
    ``ArgumentError`` listing the zoo."""
    return _zoo_model(source) if _is_zoo(source) else load_model(source)


def from_onnx(model, input_shapes: Optional[Dict[str, Sequence[int]]] = None, name: Optional[str] = None):
    """Import an ONNX model (a path, an ``onnx.ModelProto``, or ``"zoo:NAME"`` for a bundled model) as a
    Graph, or a DynamicGraph when shapes are only known at run time; see ``onnx_import.from_onnx``."""
    return _import_onnx(_zoo_model(model) if _is_zoo(model) else model, input_shapes=input_shapes, name=name)
