"""The recurrent network of the wider zoo (``model_zoo`` re-exports it): a word-level LSTM language
model, PyTorch's ``word_language_model`` example as ``torch.onnx`` exports it (PTB-sized vocabulary).

The builder's defaults are the benchmark's network at batch 1; smaller keyword arguments give the
test variant (``model_zoo.SMALL``).
"""
from __future__ import annotations

import numpy as np

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
