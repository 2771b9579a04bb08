"""The network compiler: graph IR (``graph.py``), the op table that builds each node's
computation from the op library (``op_table.py``), graph passes (``passes/``), and the
executables a graph compiles to (``executable.py`` for the CPU, ``cuda_executable.py``,
``dynamic_executable.py`` for shapes known at run time), with the kernel cache and the
network's kernels as tuning tasks (``tasks.py``: ``extract_tasks``).

It imports the op library, never the ONNX importer: importers build graphs for it.
"""

from . import quantized_ops  # noqa: F401,E402  (registers the int8 convolution ops in op_table.OPS)
