"""Small ONNX model builders (seeded random weights, no downloads): tests, demos, benchmarks.

``small_cnn()``, ``resnet18()`` and ``mobilenet_v2()`` return ``onnx.ModelProto`` s with the
architectures of the well-known networks (conv + batch norm + relu/relu6, residual adds,
pools, a final Gemm), opset 13, input ``"input"`` of shape (batch, 3, size, size).
``transformer_encoder()`` is a BERT-style encoder as torch exports it at opset 17
(MatMul + Add projections, Reshape/Transpose into heads with a Shape->Gather->Concat
shape chain, scaled Softmax attention, erf-form GELU, LayerNormalization), input
``"input"`` of shape (batch, seq, hidden).  ``batch=None`` leaves the batch symbolic.
"""
from __future__ import annotations

import numpy as np


class OnnxBuilder:
    """Adds nodes and initializers with unique names; each method returns the output name."""

    def __init__(self, seed: int = 0, opset: int = 13):
        self.opset = opset
        self.rng = np.random.default_rng(seed)
        self.nodes, self.inits = [], []
        self._count = 0

    def _name(self, base: str) -> str:
        self._count += 1
        return f"{base}_{self._count}"

    def init(self, base: str, array) -> str:
        from onnx import numpy_helper
        name = self._name(base)
        self.inits.append(numpy_helper.from_array(np.asarray(array), name))
        return name

    def node(self, op: str, inputs, n_out: int = 1, **attrs):
        from onnx import helper
        outs = [self._name(op.lower()) for _ in range(n_out)]
        self.nodes.append(helper.make_node(op, list(inputs), outs, name=outs[0] + "_node", **attrs))
        return outs[0] if n_out == 1 else outs

    def conv(self, x, cin, cout, k, stride=1, pad=None, groups=1, bias=False):
        pad = k // 2 if pad is None else pad
        fan_in = cin // groups * k * k
        w = (self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        inputs = [x, self.init("w", w)]
        if bias:
            inputs.append(self.init("b", (self.rng.standard_normal(cout) * 0.1).astype(np.float32)))
        return self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=groups)

    def bn(self, x, c):
        r = self.rng
        params = [r.uniform(0.5, 1.5, c), r.standard_normal(c) * 0.1, r.standard_normal(c) * 0.1,
                  r.uniform(0.5, 1.5, c)]
        return self.node("BatchNormalization", [x] + [self.init("bn", p.astype(np.float32)) for p in params],
                         epsilon=1e-5)

    def relu(self, x):
        return self.node("Relu", [x])

    def relu6(self, x):
        lo = self.init("min", np.array(0.0, np.float32))
        hi = self.init("max", np.array(6.0, np.float32))
        return self.node("Clip", [x, lo, hi])

    def gemm(self, x, cin, cout):
        w = (self.rng.standard_normal((cout, cin)) / np.sqrt(cin)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        return self.node("Gemm", [x, self.init("fc_w", w), self.init("fc_b", b)], transB=1)

    def matmul_add(self, x, cin, cout):
        """x @ W + b as torch exports a Linear layer on a 3-d input."""
        w = (self.rng.standard_normal((cin, cout)) / np.sqrt(cin)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.02).astype(np.float32)
        return self.node("Add", [self.node("MatMul", [x, self.init("w", w)]), self.init("b", b)])

    def layer_norm(self, x, c):
        scale = (1.0 + self.rng.standard_normal(c) * 0.1).astype(np.float32)
        bias = (self.rng.standard_normal(c) * 0.1).astype(np.float32)
        return self.node("LayerNormalization", [x, self.init("ln_s", scale), self.init("ln_b", bias)], axis=-1,
                         epsilon=1e-12)

    def const(self, value, dtype=np.float32):
        return self.init("c", np.array(value, dtype))

    def model(self, x_shape, out, out_shape=None, name="model"):
        from onnx import TensorProto, helper
        graph = helper.make_graph(self.nodes, name,
                                  [helper.make_tensor_value_info("input", TensorProto.FLOAT, list(x_shape))],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT,
                                                                 list(out_shape) if out_shape else [])],
                                  initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="loopweave")
        model.ir_version = 8
        return model


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
    """A BERT-style encoder stack (post-LayerNorm), opset 17, as torch.onnx exports it."""
    b = OnnxBuilder(seed, opset=17)
    dh = hidden // heads
    x = "input"
    for _ in range(layers):
        # the head split's target shape comes from a shape chain, as in torch exports
        n = b.node("Unsqueeze", [b.node("Gather", [b.node("Shape", [x]), b.const(0, np.int64)], axis=0),
                                 b.const([0], np.int64)])
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
    return b.model((batch_dim, seq, hidden), x, (batch_dim, seq, hidden), name="transformer_encoder")
