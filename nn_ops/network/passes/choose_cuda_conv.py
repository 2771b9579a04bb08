"""choose_cuda_conv: on the GPU, convolutions with constant weights become implicit GEMMs.

``conv2d(X, W[OC, C, KH, KW], b)`` with ``groups == 1`` and W an initializer becomes
``conv2d_gemm(X, W2, b)`` with ``W2 = W.reshape(OC, C*KH*KW)`` (``ops/conv2d_gemm.py``), which
the CUDA schedule tiles through shared memory like a matmul.  Grouped and depthwise
convolutions keep the direct form, and so do 1x1 convolutions of a single image: measured on an
H100 (kernels by CUDA events), MobileNetV2 at batch 1 took 0.83 ms with its 1x1 convolutions as
implicit GEMMs (few output channels, short reductions, few tiles) and 0.49 ms direct, while at
batch 32 the implicit GEMMs won, 2.09 against 4.31 ms (ResNet-18: 5.0 against 5.4). Batches
between were not compared.  With ``precision`` "tf32" or "fp16" (tensor cores) every such convolution,
1x1 ones of a single image too, becomes an implicit GEMM padded to whole warp tiles: its pixel
columns to a multiple of 32 (``columns_multiple``), the rows (output channels) of W2 to a
multiple of 32 and its columns (taps) to a multiple of the mma's depth (8, fp16: 16) with zeros
(not measured on a GPU yet).
Accepts any graph; guarantees the same values.  Run for target cuda only, after
fold_batch_norm (which rewrites conv weights) and instead of pack_conv_weights for these nodes.
"""
from __future__ import annotations

import numpy as np

from ....lowering.passes.distribute_warp_tiles import MMA_KINDS
from ...ops.cuda.matmul_tensor_cores import TILES
from ..graph import Graph

TENSOR_CORE_COLUMNS = min(TILES)   # a tensor-core conv's pixel columns and output-channel rows: whole tiles


def choose_cuda_conv(g: Graph, precision: str = "fp32") -> Graph:
    tensor_cores = precision in MMA_KINDS
    depth = MMA_KINDS[precision].depth if tensor_cores else 1   # its reduction: whole mma steps
    for node in g.nodes:
        if node.op_type != "conv2d" or node.inputs[1] not in g.initializers or int(node.attrs["groups"]) != 1:
            continue
        weight = g.initializers[node.inputs[1]]
        if weight.ndim != 4 or (weight.shape[2:] == (1, 1) and g.shape(node.inputs[0])[0] == 1 and not tensor_cores):
            continue
        name = g.fresh_name(node.inputs[1] + ".gemm")
        w2 = weight.reshape(weight.shape[0], -1)
        node.attrs = dict(node.attrs, kernel=tuple(int(d) for d in weight.shape[2:]))
        if tensor_cores:
            w2 = np.pad(w2, ((0, -w2.shape[0] % TENSOR_CORE_COLUMNS), (0, -w2.shape[1] % depth)))
            node.attrs.update(columns_multiple=TENSOR_CORE_COLUMNS, out_channels=int(weight.shape[0]))
        g.add_initializer(name, np.ascontiguousarray(w2))
        node.op_type = "conv2d_gemm"
        node.inputs = [node.inputs[0], name] + node.inputs[2:]
    return g
