"""``OnnxBuilder``: ONNX graphs written with ``onnx.helper``, seeded random weights, unique names.

The models of ``model_zoo`` are built with it; each method adds nodes (and initializers) and
returns the name of its output.  The helpers follow what ``torch.onnx.export`` writes for the
layer of the same name (erf-form GELU, x * sigmoid(x) SiLU, MatMul + Add linear layers, ...).
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

    def weight(self, shape, scale) -> np.ndarray:
        return (self.rng.standard_normal(shape) * scale).astype(np.float32)

    def conv(self, x, cin, cout, k, stride=1, pad=None, groups=1, bias=False):
        pad = k // 2 if pad is None else pad
        fan_in = cin // groups * k * k
        w = (self.rng.standard_normal((cout, cin // groups, k, k)) * np.sqrt(2.0 / fan_in)).astype(np.float32)
        inputs = [x, self.init("w", w)]
        if bias:
            inputs.append(self.init("b", (self.rng.standard_normal(cout) * 0.1).astype(np.float32)))
        return self.node("Conv", inputs, kernel_shape=[k, k], strides=[stride, stride], pads=[pad] * 4, group=groups)

    def conv_transpose(self, x, cin, cout, k, stride, bias=True):
        """``nn.ConvTranspose2d(cin, cout, k, stride)`` (no padding): weight (cin, cout, k, k)."""
        inputs = [x, self.init("wt", self.weight((cin, cout, k, k), np.sqrt(2.0 / (cin * k * k / stride ** 2))))]
        if bias:
            inputs.append(self.init("b", self.weight(cout, 0.1)))
        return self.node("ConvTranspose", inputs, kernel_shape=[k, k], strides=[stride, stride])

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

    def silu(self, x):
        """``nn.SiLU`` as torch exports it: x * Sigmoid(x)."""
        return self.node("Mul", [x, self.node("Sigmoid", [x])])

    def hardswish(self, x):
        return self.node("HardSwish", [x])

    def gelu(self, x):
        """``nn.GELU()`` (exact) as torch exports it: x * 0.5 * (1 + erf(x / sqrt(2)))."""
        erf = self.node("Erf", [self.node("Div", [x, self.const(np.sqrt(2.0))])])
        return self.node("Mul", [self.node("Mul", [x, self.node("Add", [erf, self.const(1.0)])]), self.const(0.5)])

    def gelu_tanh(self, x):
        """GPT-2's ``gelu_new``: 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
        cube = self.node("Mul", [self.node("Pow", [x, self.const(3.0)]), self.const(0.044715)])
        inner = self.node("Mul", [self.node("Add", [x, cube]), self.const(np.sqrt(2.0 / np.pi))])
        t = self.node("Add", [self.const(1.0), self.node("Tanh", [inner])])
        return self.node("Mul", [self.node("Mul", [self.const(0.5), x]), t])

    def gemm(self, x, cin, cout):
        w = (self.rng.standard_normal((cout, cin)) / np.sqrt(cin)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.1).astype(np.float32)
        return self.node("Gemm", [x, self.init("fc_w", w), self.init("fc_b", b)], transB=1)

    def matmul_add(self, x, cin, cout):
        """x @ W + b as torch exports a Linear layer on a 3-d input."""
        w = (self.rng.standard_normal((cin, cout)) / np.sqrt(cin)).astype(np.float32)
        b = (self.rng.standard_normal(cout) * 0.02).astype(np.float32)
        return self.node("Add", [self.node("MatMul", [x, self.init("w", w)]), self.init("b", b)])

    def layer_norm(self, x, c, eps=1e-12):
        scale = (1.0 + self.rng.standard_normal(c) * 0.1).astype(np.float32)
        bias = (self.rng.standard_normal(c) * 0.1).astype(np.float32)
        return self.node("LayerNormalization", [x, self.init("ln_s", scale), self.init("ln_b", bias)], axis=-1,
                         epsilon=eps)

    def layer_norm_channels_first(self, x, c, eps=1e-6):
        """LayerNorm over the channels of NCHW written out as ConvNeXt's ``LayerNorm(channels_first)``
        exports it: u = mean(x, 1); s = mean((x - u)^2, 1); (x - u) / sqrt(s + eps) * w + b."""
        u = self.node("ReduceMean", [x], axes=[1], keepdims=1)
        d = self.node("Sub", [x, u])
        s = self.node("ReduceMean", [self.node("Pow", [d, self.const(2.0)])], axes=[1], keepdims=1)
        y = self.node("Div", [d, self.node("Sqrt", [self.node("Add", [s, self.const(eps)])])])
        w = self.init("ln_w", (1.0 + self.rng.standard_normal((c, 1, 1)) * 0.1).astype(np.float32))
        b = self.init("ln_b", (self.rng.standard_normal((c, 1, 1)) * 0.1).astype(np.float32))
        return self.node("Add", [self.node("Mul", [y, w]), b])

    def const(self, value, dtype=np.float32):
        return self.init("c", np.array(value, dtype))

    def model(self, x_shape, out, out_shape=None, name="model", input_dtype=None):
        from onnx import TensorProto, helper
        in_type = TensorProto.FLOAT if input_dtype is None else helper.np_dtype_to_tensor_dtype(np.dtype(input_dtype))
        graph = helper.make_graph(self.nodes, name,
                                  [helper.make_tensor_value_info("input", in_type, list(x_shape))],
                                  [helper.make_tensor_value_info(out, TensorProto.FLOAT,
                                                                 list(out_shape) if out_shape else [])],
                                  initializer=self.inits)
        model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", self.opset)], producer_name="loopweave")
        model.ir_version = 8
        return model
