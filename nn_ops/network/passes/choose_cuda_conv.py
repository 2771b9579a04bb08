"""choose_cuda_conv: on the GPU, convolutions with constant weights become implicit GEMMs.

``conv2d(X, W[OC, C, KH, KW], b)`` with ``groups == 1`` and W an initializer becomes
``conv2d_gemm(X, W2, b)`` with ``W2 = W.reshape(OC, C*KH*KW)`` (``ops/conv2d_gemm.py``), which
the CUDA schedule tiles through shared memory like a matmul.  Grouped and depthwise
convolutions keep the direct form, and so do 1x1 convolutions of a single image: measured on an
H100 (kernels by CUDA events), MobileNetV2 at batch 1 took 0.83 ms with its 1x1 convolutions as
implicit GEMMs (few output channels, short reductions, few tiles) and 0.49 ms direct, while at
batch 32 the implicit GEMMs won, 2.09 against 4.31 ms (ResNet-18: 5.0 against 5.4). Batches
between were not compared.  With ``tensor_cores`` (``precision="tf32"``) every such convolution,
1x1 ones of a single image too, becomes an implicit GEMM whose pixel columns are padded to a
multiple of 32 (``columns_multiple``) so that it makes whole warp tiles (not measured on a GPU
yet).  Accepts any graph; guarantees the same values.  Run for
target cuda only, after fold_batch_norm (which rewrites conv weights) and instead of
pack_conv_weights for these nodes.
"""
from __future__ import annotations

import numpy as np

from ..graph import Graph


TENSOR_CORE_COLUMNS = 32   # the pixel columns of a tensor-core conv, padded to a multiple of this


def choose_cuda_conv(g: Graph, tensor_cores: bool = False) -> Graph:
    for node in g.nodes:
        if node.op_type != "conv2d" or node.inputs[1] not in g.initializers or int(node.attrs["groups"]) != 1:
            continue
        weight = g.initializers[node.inputs[1]]
        if weight.ndim != 4 or (weight.shape[2:] == (1, 1) and g.shape(node.inputs[0])[0] == 1 and not tensor_cores):
            continue
        name = g.fresh_name(node.inputs[1] + ".gemm")
        g.add_initializer(name, np.ascontiguousarray(weight.reshape(weight.shape[0], -1)))
        node.op_type = "conv2d_gemm"
        node.attrs = dict(node.attrs, kernel=tuple(int(d) for d in weight.shape[2:]))
        if tensor_cores:
            node.attrs["columns_multiple"] = TENSOR_CORE_COLUMNS
        node.inputs = [node.inputs[0], name] + node.inputs[2:]
    return g
