"""Small ONNX model builders (seeded random weights, no downloads): tests, demos, benchmarks.

``small_cnn()``, ``resnet18()`` and ``mobilenet_v2()`` return ``onnx.ModelProto`` s with the
architectures of the well-known networks (conv + batch norm + relu/relu6, residual adds,
pools, a final Gemm), opset 13, input ``"input"`` of shape (batch, 3, size, size).
``transformer_encoder()`` is a BERT-style encoder as torch exports it at opset 17
(MatMul + Add projections, Reshape/Transpose into heads with a Shape->Gather->Concat
shape chain, scaled Softmax attention, erf-form GELU, LayerNormalization), input
``"input"`` of shape (batch, seq, hidden).  ``batch=None`` / ``seq=None`` leave them symbolic;
``symbolic_sizes(model)`` makes any model's batch (and an image's height and width) symbolic.

The wider zoo, each a full-size network at batch 1 by default: ``squeezenet1_1``,
``efficientnet_lite``, ``convnext``, ``densenet``, ``unet``, ``style_transfer``, ``shufflenet_v2``,
``inception_v3`` and ``resnet50`` (``zoo_cnn.py``); ``vit_tiny``,
``gpt2`` and ``mlp_mixer`` (``zoo_transformers.py``); ``lstm_lm``, a word-level LSTM language model
(``zoo_recurrent.py``).  ``NAMES`` lists every model (the CLI's
``zoo:NAME``), ``SMALL`` the keyword arguments of each one's small test variant.
The graphs are written with ``OnnxBuilder`` (``onnx_builder.py``).
"""
from __future__ import annotations

import numpy as np

from .onnx_builder import OnnxBuilder  # noqa: F401 - re-exported: tests build graphs with it
from .zoo_cnn import (convnext, densenet, efficientnet_lite, inception_v3, resnet50, shufflenet_v2, squeezenet1_1,
                      style_transfer, unet)
from .zoo_recurrent import lstm_lm
from .zoo_transformers import gpt2, mlp_mixer, vit_tiny


def small_cnn(batch: int = 1, size: int = 16, classes: int = 10, seed: int = 0):
    """conv-bn-relu, a residual block, max and average pools, global pool, flatten, gemm."""
    b = OnnxBuilder(seed)
    x = b.relu(b.bn(b.conv("input", 3, 8, 3), 8))
    y = b.bn(b.conv(b.relu(b.bn(b.conv(x, 8, 8, 3), 8)), 8, 8, 3), 8)
    x = b.relu(b.node("Add", [y, x]))
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    x = b.relu6(b.bn(b.conv(x, 8, 16, 1), 16))
    x = b.node("AveragePool", [x], kernel_shape=[2, 2], strides=[2, 2])
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    out = b.gemm(x, 16, classes)
    return b.model((batch, 3, size, size), out, (batch, classes), name="small_cnn")


def resnet18(batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0):
    b = OnnxBuilder(seed)
    x = b.relu(b.bn(b.conv("input", 3, 64, 7, stride=2, pad=3), 64))
    x = b.node("MaxPool", [x], kernel_shape=[3, 3], strides=[2, 2], pads=[1, 1, 1, 1])
    cin = 64
    for cout, stride in ((64, 1), (128, 2), (256, 2), (512, 2)):
        for block in range(2):
            s = stride if block == 0 else 1
            y = b.relu(b.bn(b.conv(x, cin, cout, 3, stride=s), cout))
            y = b.bn(b.conv(y, cout, cout, 3), cout)
            short = x if (s == 1 and cin == cout) else b.bn(b.conv(x, cin, cout, 1, stride=s, pad=0), cout)
            x = b.relu(b.node("Add", [y, short]))
            cin = cout
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    return b.model((batch, 3, size, size), b.gemm(x, 512, classes), (batch, classes), name="resnet18")


def symbolic_sizes(model, dims=("N", None, "H", "W")):
    """``model`` (changed in place, and returned) with its first input's axes renamed to the symbols
    ``dims`` (None keeps an axis as it is) and each output's first axis to the batch symbol (and, in
    an output of the input's rank, each other axis as long as the input's to that axis's symbol: a
    U-Net's map): a zoo model of fixed sizes made shape-polymorphic, as an export with dynamic axes
    would be."""
    in_dims = model.graph.input[0].type.tensor_type.shape.dim
    fixed = [d.dim_value for d in in_dims]
    for d, name in zip(in_dims, dims):
        if name:
            d.ClearField("dim_value")
            d.dim_param = name
    for out in model.graph.output:
        out_dims = out.type.tensor_type.shape.dim
        for k, d in enumerate(out_dims):
            same_axis = k == 0 or (len(out_dims) == len(fixed) and d.dim_value == fixed[k])
            if k < len(dims) and dims[k] and same_axis:
                d.ClearField("dim_value")
                d.dim_param = dims[k]
    return model


def mobilenet_v2(batch: int = 1, size: int = 224, classes: int = 1000, seed: int = 0):
    b = OnnxBuilder(seed)
    x = b.relu6(b.bn(b.conv("input", 3, 32, 3, stride=2), 32))
    cin = 32
    settings = [(1, 16, 1, 1), (6, 24, 2, 2), (6, 32, 3, 2), (6, 64, 4, 2), (6, 96, 3, 1), (6, 160, 3, 2),
                (6, 320, 1, 1)]
    for t, c, n, s in settings:
        for k in range(n):
            stride = s if k == 0 else 1
            hidden = cin * t
            y = x
            if t != 1:
                y = b.relu6(b.bn(b.conv(y, cin, hidden, 1, pad=0), hidden))
            y = b.relu6(b.bn(b.conv(y, hidden, hidden, 3, stride=stride, groups=hidden), hidden))
            y = b.bn(b.conv(y, hidden, c, 1, pad=0), c)
            x = b.node("Add", [x, y]) if stride == 1 and cin == c else y
            cin = c
    x = b.relu6(b.bn(b.conv(x, cin, 1280, 1, pad=0), 1280))
    x = b.node("GlobalAveragePool", [x])
    x = b.node("Flatten", [x], axis=1)
    return b.model((batch, 3, size, size), b.gemm(x, 1280, classes), (batch, classes), name="mobilenet_v2")


def transformer_encoder(batch=1, seq: int = 128, hidden: int = 256, heads: int = 4, layers: int = 4,
                        ffn: int = 1024, seed: int = 0):
    """A BERT-style encoder stack (post-LayerNorm), opset 17, as torch.onnx exports it.

    ``batch=None`` / ``seq=None`` leave the batch / sequence length symbolic (``"batch"``, ``"seq"``);
    with a symbolic ``seq`` the head split's target shape takes both sizes from a Shape chain."""
    b = OnnxBuilder(seed, opset=17)
    dh = hidden // heads
    x = "input"
    for _ in range(layers):
        # the head split's target shape comes from a shape chain, as in torch exports
        shape = b.node("Shape", [x])
        n = b.node("Unsqueeze", [b.node("Gather", [shape, b.const(0, np.int64)], axis=0), b.const([0], np.int64)])
        if seq is None:     # a symbolic sequence length: the head shape takes it from the same Shape
            t = b.node("Unsqueeze", [b.node("Gather", [shape, b.const(1, np.int64)], axis=0),
                                     b.const([0], np.int64)])
            head_shape = b.node("Concat", [n, t, b.const([heads, dh], np.int64)], axis=0)
        else:
            head_shape = b.node("Concat", [n, b.const([seq, heads, dh], np.int64)], axis=0)

        def heads_of(t, perm):
            return b.node("Transpose", [b.node("Reshape", [t, head_shape])], perm=perm)
        q = heads_of(b.matmul_add(x, hidden, hidden), [0, 2, 1, 3])
        k = heads_of(b.matmul_add(x, hidden, hidden), [0, 2, 3, 1])
        v = heads_of(b.matmul_add(x, hidden, hidden), [0, 2, 1, 3])
        scores = b.node("Div", [b.node("MatMul", [q, k]), b.const(np.sqrt(dh))])
        probs = b.node("Softmax", [scores], axis=-1)
        ctx = b.node("Transpose", [b.node("MatMul", [probs, v])], perm=[0, 2, 1, 3])
        ctx = b.node("Reshape", [ctx, b.const([0, 0, hidden], np.int64)])
        x = b.layer_norm(b.node("Add", [b.matmul_add(ctx, hidden, hidden), x]), hidden)
        h = b.matmul_add(x, hidden, ffn)
        erf = b.node("Erf", [b.node("Div", [h, b.const(np.sqrt(2.0))])])
        g = b.node("Mul", [b.node("Mul", [h, b.node("Add", [erf, b.const(1.0)])]), b.const(0.5)])
        x = b.layer_norm(b.node("Add", [b.matmul_add(g, ffn, hidden), x]), hidden)
    batch_dim = "batch" if batch is None else batch
    seq_dim = "seq" if seq is None else seq
    return b.model((batch_dim, seq_dim, hidden), x, (batch_dim, seq_dim, hidden), name="transformer_encoder")


NAMES = ("resnet18", "mobilenet_v2", "small_cnn", "transformer_encoder", "squeezenet1_1", "vit_tiny",
         "efficientnet_lite", "convnext", "densenet", "unet", "gpt2", "mlp_mixer", "style_transfer", "lstm_lm",
         "shufflenet_v2", "inception_v3", "resnet50")

# the small test variant of each wider-zoo model: builder keyword arguments
SMALL = {
    "squeezenet1_1": dict(size=64, classes=100),
    "vit_tiny": dict(size=64, layers=2),
    "efficientnet_lite": dict(size=64, classes=100, stem=16, head=256,
                              stages=((1, 3, 1, 16, 1), (6, 3, 2, 24, 2), (6, 5, 2, 40, 1), (6, 3, 2, 80, 1))),
    "convnext": dict(size=64, classes=100, depths=(1, 1, 2, 1), dims=(32, 64, 128, 256)),
    "densenet": dict(size=64, classes=100, blocks=(2, 4), growth=16, stem=32),
    "unet": dict(size=64, base=16, depth=3),
    "gpt2": dict(seq=32, vocab=1000, hidden=128, heads=2, layers=2),
    "mlp_mixer": dict(size=64, patch=8, hidden=64, tokens_mlp=32, channels_mlp=256, layers=2, classes=100),
    "style_transfer": dict(size=32, base=16, residuals=1),
    "lstm_lm": dict(seq=8, batch=2, vocab=100, hidden=32),
    "shufflenet_v2": dict(size=64, classes=100, stages=((116, 2), (232, 2)), head=256),
    "inception_v3": dict(size=139, classes=100, width=0.25, blocks_c=1),
    "resnet50": dict(size=64, classes=100, blocks=(1, 2, 1, 1), width=16),
}
