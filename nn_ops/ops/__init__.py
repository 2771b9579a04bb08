"""The op library: each op's compute definition, with its default schedule per target.

One family per file (``conv2d.py``, ``matmul.py``, ``pooling.py``, ...).  A file holds the
compute functions and their CPU (``"llvm"``) schedules; the CUDA schedules of the same
family are in ``cuda/`` under the same file name.  ``registry.py`` is the table from
(op tag, target kind) to schedule function that ``schedule(outputs, target)`` reads.
"""
from . import cuda as _cuda_schedules  # noqa: F401  (registers the default CUDA schedules)
