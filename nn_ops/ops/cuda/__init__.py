"""Default CUDA schedules of the op library (registered for target kind ``"cuda"``).

Importing this package registers them: ``injective`` (elementwise, broadcast and
layout ops), ``reduce`` (reductions, pooling), ``softmax`` and ``norm`` (layer_norm; a block per row) and ``gemm``
(matmul, dense, batch_matmul), ``gemv`` (few-row products: split K, partial sums in shared
memory), ``conv2d`` (direct, one thread per output) and ``conv2d_gemm`` (convolutions with
constant weights as implicit GEMMs, tiled like matmul).
"""
from . import conv2d, conv2d_gemm, gemv, matmul as gemm, injective, norm, reduce, softmax  # noqa: F401  (registration side effects)
