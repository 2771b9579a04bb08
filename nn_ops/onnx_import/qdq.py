"""QDQ models as integer operators: ``QuantizeLinear(Conv(DequantizeLinear(x_q), DequantizeLinear(w_q)))``
becomes ``QLinearConv(x_q, w_q)``, and the same for MatMul (``QLinearMatMul``) and Gemm (onnxruntime's
``com.microsoft.QGemm``), before the import.

onnxruntime's static quantizer writes its QDQ format: every quantized tensor is dequantized in front of
the float operator that reads it and its result quantized again, so a plain import runs each Conv in
float between two elementwise passes, slower than the float model.  The integer operators compute the
same thing, as the ONNX definitions say, with int8 operands and int32 sums (``converters/quantized.py``:
the product exact, then the requantization), and the uint8 result feeds the next rewritten operator
directly.  A pattern is rewritten only when it means exactly that integer operator:

- Conv of one group, or depthwise (the integer path of another grouped conv widens its operands to
  int32, slower than the float conv): input ``x`` from a DequantizeLinear with one scale; weight from a DequantizeLinear of a constant
  (one scale, or one per output channel on axis 0); the bias absent, or a DequantizeLinear of an int32
  constant with zero point 0 and scale ``x_scale * w_scale`` (what the quantizer writes); the output read
  only by one QuantizeLinear with one scale (not a graph output).
- MatMul: the same with one scale for each side (QLinearMatMul's per-tensor weight).
- Gemm (a classifier's last layer): as a Conv, its weight's scales one or one per output column,
  ``transA`` 0, ``alpha`` and ``beta`` 1: onnxruntime's ``QGemm`` (``converters/qoperator.py``), so the
  layer reads its int8 weight, not a float copy of 4x the bytes (what a layer at batch 1 waits on).

The rewritten operators' outputs are returned with the model: their reference is the QDQ chain's
float32 arithmetic (one rounding of a float32 sum, not QLinearConv's exact float64 requantization), so
the importer may requantize them in float32 (``converters/quantized._direct_qconv``), within one step.

Anything else (an Add, a pool, a weight with per-channel scales on a MatMul) keeps its
DequantizeLinear / float op / QuantizeLinear and runs in float, as written.  DequantizeLinear nodes
left without readers are dropped.
"""
from __future__ import annotations

from typing import Dict, FrozenSet, List, Optional, Tuple

import numpy as np

from .context import onnx_attrs

#: the domain of onnxruntime's quantized operators (``converters/qoperator.py``): QGemm's
MICROSOFT = "com.microsoft"


def _consumers(graph) -> Dict[str, List]:
    users: Dict[str, List] = {}
    for node in graph.node:
        for name in node.input:
            if name:
                users.setdefault(name, []).append(node)
    return users


def _attr(node, name, default=None):
    return onnx_attrs(node).get(name, default)


class _Model:
    """The model's producers, readers and constants, for matching patterns."""

    def __init__(self, model):
        from onnx import numpy_helper
        self.graph = model.graph
        self.producer = {out: node for node in model.graph.node for out in node.output}
        self.users = _consumers(model.graph)
        self.outputs = {o.name for o in model.graph.output}
        self.consts = {t.name: t for t in model.graph.initializer}
        self.added: Dict[str, np.ndarray] = {}      # constants the rewrite adds (zero points)
        self._arrays = {}
        self._to_array = numpy_helper.to_array

    def const(self, name: str) -> Optional[np.ndarray]:
        if not name or name not in self.consts:
            return None
        if name not in self._arrays:
            self._arrays[name] = self._to_array(self.consts[name])
        return self._arrays[name]

    def dequantized(self, name: str, constant: bool = False, per_channel_axis: Optional[int] = None):
        """``(q, scale, zero point or "")`` when ``name`` is a DequantizeLinear's output whose scale is
        one value (or, with ``per_channel_axis``, one per slice on that axis); ``q`` a constant when
        ``constant``; else None."""
        node = self.producer.get(name)
        if node is None or node.op_type != "DequantizeLinear" or node.domain not in ("", "ai.onnx"):
            return None
        q, scale = node.input[0], node.input[1]
        zero = node.input[2] if len(node.input) > 2 else ""
        s = self.const(scale)
        if s is None or (zero and self.const(zero) is None):
            return None
        if constant and self.const(q) is None:
            return None
        if s.size != 1:
            array = self.const(q)
            axis = int(_attr(node, "axis", 1))
            if per_channel_axis is None or array is None or s.ndim != 1 or \
                    axis % array.ndim != per_channel_axis or s.size != array.shape[per_channel_axis]:
                return None
        return q, scale, zero

    def only_quantizer(self, name: str):
        """The one QuantizeLinear (one scale) that reads ``name``, where nothing else does; else None."""
        users = self.users.get(name, [])
        if name in self.outputs or len(users) != 1:
            return None
        node = users[0]
        if node.op_type != "QuantizeLinear" or node.domain not in ("", "ai.onnx") or node.input[0] != name:
            return None
        s = self.const(node.input[1])
        zero = node.input[2] if len(node.input) > 2 else ""
        if s is None or s.size != 1 or (zero and self.const(zero) is None) or _attr(node, "output_dtype"):
            return None
        return node


def _zero_point(m: _Model, zero: str, of: str, like: str) -> str:
    """``zero``, or a new constant 0 of the dtype of the constant ``of`` (uint8 without one: the
    type QuantizeLinear gives without a zero point); QLinear operators take one."""
    if zero:
        return zero
    array = m.const(of)
    name = f"{like}.zero_point"
    m.added[name] = np.zeros((), array.dtype if array is not None else np.uint8)
    return name


def _bias(m: _Model, name: str, x_scale: str, w_scale: str) -> Optional[str]:
    """The int32 constant behind a dequantized bias of scale ``x_scale * w_scale``; None otherwise."""
    found = m.dequantized(name, constant=True, per_channel_axis=0)
    if found is None:
        return None
    q, scale, zero = found
    array, s = m.const(q), m.const(scale).astype(np.float64).ravel()
    if array.dtype != np.int32 or (zero and np.any(m.const(zero))):
        return None
    want = (m.const(x_scale).astype(np.float64) * m.const(w_scale).astype(np.float64)).ravel()
    if s.size not in (1, want.size) or not np.allclose(np.broadcast_to(s, want.shape), want, rtol=1e-5, atol=0):
        return None
    return q


def _depthwise(m: _Model, node) -> bool:
    """Whether Conv ``node`` is depthwise (a group per channel, one filter each) by a dequantized constant
    weight: its integer form is a kernel of its own (``ops/int8_conv.depthwise_u8s8_blocked``)."""
    w = m.producer.get(node.input[1])
    weight = m.const(w.input[0]) if w is not None and w.op_type == "DequantizeLinear" else None
    return weight is not None and weight.ndim == 4 and weight.shape[1] == 1 and \
        weight.shape[0] == int(_attr(node, "group", 1)) and weight.shape[0] % 8 == 0     # (in whole blocks)


def _gemm_columns(node) -> Optional[int]:
    """The weight's axis of output columns of a Gemm the integer operator computes (``transA`` 0,
    ``alpha`` and ``beta`` 1); None for another Gemm."""
    if int(_attr(node, "transA", 0)) or float(_attr(node, "alpha", 1.0)) != 1.0 or \
            float(_attr(node, "beta", 1.0)) != 1.0:
        return None
    return 0 if int(_attr(node, "transB", 0)) else 1


def qdq_to_qlinear(model) -> Tuple[object, FrozenSet[str]]:
    """``model`` with its QDQ Conv, MatMul and Gemm patterns as QLinearConv / QLinearMatMul / QGemm (the
    module docstring says which), and the outputs of the operators written; the model itself when it has
    none (it is never modified in place)."""
    if not any(n.op_type == "DequantizeLinear" for n in model.graph.node):
        return model, frozenset()
    import onnx
    from onnx import helper, numpy_helper
    m = _Model(model)                      # read only: the model is copied only if a pattern is found
    position = {id(node): k for k, node in enumerate(model.graph.node)}
    replaced: Dict[int, object] = {}       # node index -> its integer operator
    dropped = set()                        # indices of the QuantizeLinear nodes folded into one
    for k, node in enumerate(model.graph.node):
        if node.domain not in ("", "ai.onnx") or node.op_type not in ("Conv", "MatMul", "Gemm"):
            continue
        conv, gemm = node.op_type == "Conv", node.op_type == "Gemm"
        if conv and int(_attr(node, "group", 1)) != 1 and not _depthwise(m, node):
            continue        # (a grouped integer conv widens to int32: slower than the float one)
        columns = _gemm_columns(node) if gemm else 0 if conv else None
        if gemm and columns is None:
            continue
        quantizer = m.only_quantizer(node.output[0])
        if quantizer is None:
            continue
        x = m.dequantized(node.input[0])
        w = m.dequantized(node.input[1], constant=True, per_channel_axis=columns)
        if x is None or w is None or m.const(x[1]).size != 1 or not x[2]:
            continue        # (without its zero point, x's integer type is not known here)
        y_zero = quantizer.input[2] if len(quantizer.input) > 2 else ""
        inputs = [x[0], x[1], x[2], w[0], w[1],
                  _zero_point(m, w[2], w[0], w[0]), quantizer.input[1], y_zero]
        if (conv or gemm) and len(node.input) > 2 and node.input[2]:
            bias = _bias(m, node.input[2], x[1], w[1])
            if bias is None:
                continue
            inputs.append(bias)
        if not y_zero:
            inputs[7] = _zero_point(m, "", "", quantizer.output[0])      # QuantizeLinear's default: uint8
        if gemm:        # (QGemm's inputs: A, its scale and zero point, B's, the bias, Y's scale and zero point)
            inputs = inputs[:6] + [inputs[8] if len(inputs) > 8 else ""] + inputs[6:8]
        replaced[k] = helper.make_node("QGemm" if gemm else "QLinearConv" if conv else "QLinearMatMul", inputs,
                                       [quantizer.output[0]], name=node.name or quantizer.name,
                                       domain=MICROSOFT if gemm else "")
        if conv:
            replaced[k].attribute.extend(node.attribute)
        elif gemm:
            replaced[k].attribute.extend(a for a in node.attribute if a.name == "transB")
        dropped.add(position[id(quantizer)])
    if not replaced:
        return model, frozenset()
    model = onnx.ModelProto.FromString(model.SerializeToString())
    if any(n.domain == MICROSOFT for n in replaced.values()) and \
            not any(imp.domain == MICROSOFT for imp in model.opset_import):
        model.opset_import.append(helper.make_opsetid(MICROSOFT, 1))
    model.graph.initializer.extend(numpy_helper.from_array(array, name) for name, array in m.added.items())
    nodes = [replaced.get(k, node) for k, node in enumerate(model.graph.node) if k not in dropped]
    # DequantizeLinear nodes no one reads any more (their weights' float copies with them)
    while True:
        read = {i for n in nodes for i in n.input} | m.outputs
        kept = [n for n in nodes if n.op_type != "DequantizeLinear" or any(o in read for o in n.output)]
        if len(kept) == len(nodes):
            break
        nodes = kept
    del model.graph.node[:]
    model.graph.node.extend(nodes)
    read = {i for n in nodes for i in n.input} | m.outputs | {i.name for i in model.graph.input}
    kept_init = [t for t in model.graph.initializer if t.name in read]
    del model.graph.initializer[:]
    model.graph.initializer.extend(kept_init)
    return model, frozenset(n.output[0] for n in replaced.values())
