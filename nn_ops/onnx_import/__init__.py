"""ONNX import: ``from_onnx(path_or_model) -> Graph`` (or a DynamicGraph, ``dynamic.py``).

``from_onnx.py`` is the entry point; ``importer.py`` walks a static model's nodes;
converters are registered per ONNX op type (and opset range) in ``converters/``, one file
per op family, through the table in ``context.py``; ``fold.py`` evaluates constant subgraphs.
"""
from .context import CONVERTERS, converter
from .from_onnx import from_onnx

__all__ = ["from_onnx", "converter", "CONVERTERS"]
