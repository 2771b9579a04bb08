"""ONNX import: ``from_onnx(path_or_model) -> Graph``.

Converters are registered per ONNX op type (and opset range) in ``nn.py``,
``elementwise.py``, ``shape.py`` and ``reduce.py``; ``fold.py`` evaluates constant subgraphs.
"""
from .context import CONVERTERS, converter
from .importer import from_onnx

__all__ = ["from_onnx", "converter", "CONVERTERS"]
