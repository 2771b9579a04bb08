"""Recurrent models: the wider zoo's word-level LSTM language model (``model_zoo`` re-exports it),
PyTorch's ``word_language_model`` example as ``torch.onnx`` exports it (PTB-sized vocabulary; the
defaults are the benchmark's network at batch 1, smaller keyword arguments the test variant in
``model_zoo.SMALL``), and ``recurrent_layer``: one LSTM, GRU or RNN node with any of its options (the
tests' and ``benchmarks/recurrent.py``'s).
"""
from __future__ import annotations

import numpy as np

from ..onnx_import.converters.recurrent import GATES
from .onnx_builder import OnnxBuilder


def lstm_lm(batch: int = 1, seq: int = 35, vocab: int = 10000, hidden: int = 256, layers: int = 2, seed: int = 0):
    """Input ``"input"``: int64 token ids (seq, batch); an embedding Gather, ``layers`` stacked LSTMs
    (each an ONNX LSTM node, its Y squeezed of the direction axis, as torch exports ``nn.LSTM``) and a
    Linear decoder to the vocabulary's logits (seq, batch, vocab)."""
    b = OnnxBuilder(seed, opset=14)
    x = b.node("Gather", [b.init("embedding", b.weight((vocab, hidden), 0.1)), "input"], axis=0)
    scale = 1.0 / np.sqrt(hidden)           # torch's LSTM init: uniform(-1/sqrt(H), 1/sqrt(H)), as wide
    for _ in range(layers):
        weights = [b.init(name, b.weight(shape, scale)) for name, shape in
                   (("W", (1, 4 * hidden, hidden)), ("R", (1, 4 * hidden, hidden)), ("B", (1, 8 * hidden)))]
        y = b.node("LSTM", [x] + weights, hidden_size=hidden)
        x = b.node("Squeeze", [y, b.const([1], np.int64)])
    return b.model((seq, batch), b.matmul_add(x, hidden, vocab), (seq, batch, vocab), name="lstm_lm",
                   input_dtype=np.int64)


def recurrent_layer(kind: str, S: int = 5, B: int = 2, I: int = 3, H: int = 4, direction: str = "forward",
                    layout: int = 0, initial: bool = False, lens=None, peepholes: bool = False, outputs=None,
                    scale: float = 0.5, seed: int = 0, **attrs):
    """(a one-node ``kind`` model, a feed for it): ``S`` steps of batch ``B``, ``I`` inputs, ``H``
    units; weights and biases standard normal times ``scale`` as initializers; ``initial``: initial
    states as inputs ``H0`` (and ``C0``); ``lens``: ``sequence_lens`` as input ``L``; ``peepholes``:
    an LSTM's P; ``outputs``: the output names (empty for one left out); ``attrs``: the node's other
    attributes (clip, activations, ...)."""
    from onnx import TensorProto, helper, numpy_helper
    D = 2 if direction == "bidirectional" else 1
    G = GATES[kind]
    rng = np.random.default_rng(seed)
    consts = {"W": rng.standard_normal((D, G * H, I)), "R": rng.standard_normal((D, G * H, H)),
              "B": rng.standard_normal((D, 2 * G * H))}
    if peepholes:
        consts["P"] = rng.standard_normal((D, 3 * H))
    inits = [numpy_helper.from_array((v * scale).astype(np.float32), k) for k, v in consts.items()]
    x_shape = [B, S, I] if layout else [S, B, I]
    state_shape = [B, D, H] if layout else [D, B, H]
    graph_inputs = [helper.make_tensor_value_info("X", TensorProto.FLOAT, x_shape)]
    names = ["X", "W", "R", "B", "", "", "", ""]
    feed = {"X": rng.standard_normal(x_shape).astype(np.float32)}
    if lens is not None:
        graph_inputs.append(helper.make_tensor_value_info("L", TensorProto.INT32, [B]))
        names[4], feed["L"] = "L", np.array(lens, np.int32)
    for k, state in ((5, "H0"), (6, "C0")) if initial else ():
        if state == "C0" and kind != "LSTM":
            continue
        graph_inputs.append(helper.make_tensor_value_info(state, TensorProto.FLOAT, state_shape))
        names[k], feed[state] = state, rng.standard_normal(state_shape).astype(np.float32)
    if peepholes:
        names[7] = "P"
    while names[-1] == "":
        names.pop()
    shapes = {"Y": [B, S, D, H] if layout else [S, D, B, H], "Y_h": state_shape, "Y_c": state_shape}
    outs = outputs or (["Y", "Y_h", "Y_c"] if kind == "LSTM" else ["Y", "Y_h"])
    node = helper.make_node(kind, names, outs, hidden_size=H, direction=direction,
                            **({"layout": layout} if layout else {}), **attrs)
    graph = helper.make_graph([node], kind.lower(), graph_inputs,
                              [helper.make_tensor_value_info(o, TensorProto.FLOAT, shapes[o]) for o in outs if o],
                              inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 14)])
    model.ir_version = 8
    return model, feed
