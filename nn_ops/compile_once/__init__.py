"""The compile-once network compiler: a ``DynamicGraph`` built once into kernels over symbolic sizes.

``build_polymorphic`` (``builder.py``) walks the ONNX model of a ``DynamicGraph`` with the shapes of
``onnx_import/symbolic_shapes.py`` and builds kernels whose extents are ``lw.var`` s; ``cnn.py``,
``general_ops.py`` and ``transformer_ops.py`` hold the kernels of each family of ops, ``common.py``
what they share.  ``tasks.py`` lists the kernels as tuning tasks at one binding (``instance.py``: a
kernel at one binding of its sizes) and ``tuned.py`` replays those tasks' records on them.  The executable it makes lives in ``network/polymorphic_executable.py``.  It sits
above ``onnx_import`` (which only imports models) and beside the static compiler of
``network/``; the two are meant to become one pipeline over graphs with symbolic shapes.
"""
from .builder import build_polymorphic

__all__ = ["build_polymorphic"]
