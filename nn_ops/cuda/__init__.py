"""Default CUDA schedules of the op library (registered for target kind ``"cuda"``).

Importing this package registers them: ``injective`` (elementwise, broadcast and
layout ops), ``reduce`` (reductions, softmax's reductions, pooling) and ``gemm``
(matmul, dense, batch_matmul).
"""
from . import gemm, injective, reduce  # noqa: F401  (registration side effects)
