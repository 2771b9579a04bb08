"""The transformer-family networks of the wider zoo (``model_zoo`` re-exports them): a ViT-Tiny/16,
a GPT-2-style causal decoder and an MLP-Mixer, written as torch.onnx exports them at opset 17.

Each builder's defaults are the full-size network at batch 1 (the benchmark); smaller keyword
arguments give the test variants (``model_zoo.SMALL``).
"""
from __future__ import annotations

import numpy as np

from .onnx_builder import OnnxBuilder

MAX_POSITIONS = 1024    # GPT-2's position table and causal-mask buffer


def _size(value, symbol: str):
    """An input axis: ``value``, or the symbol ``symbol`` where it is None (a dynamic axis)."""
    return symbol if value is None else value


def _attention(b: OnnxBuilder, x, tokens, hidden: int, heads: int, mask=None):
    """Multi-head self-attention as timm / HF export it: one fused qkv Linear, Reshape to
    (batch, tokens, 3, heads, dh), Transpose to (3, batch, heads, tokens, dh), Gather q, k, v,
    q kᵀ scaled, optional causal mask, Softmax, · v, heads merged back, output Linear.  ``tokens``
    None: a symbolic length, the Reshape targets and the mask's slice taken from a Shape chain."""
    dh = hidden // heads
    if tokens is None:      # (batch, seq) from the activations' shape, as torch exports x.size()[:2]
        lead = b.node("Slice", [b.node("Shape", [x]), b.const([0], np.int64), b.const([2], np.int64)])
        qkv_shape = b.node("Concat", [lead, b.const([3, heads, dh], np.int64)], axis=0)
        ctx_shape = b.node("Concat", [lead, b.const([hidden], np.int64)], axis=0)
    else:   # a 0 in a Reshape target copies that axis: the batch (1 as exported at batch 1, or symbolic)
        qkv_shape = b.const([0, tokens, 3, heads, dh], np.int64)
        ctx_shape = b.const([0, tokens, hidden], np.int64)
    qkv = b.node("Reshape", [b.matmul_add(x, hidden, 3 * hidden), qkv_shape])
    qkv = b.node("Transpose", [qkv], perm=[2, 0, 3, 1, 4])
    q, k, v = (b.node("Gather", [qkv, b.const(i, np.int64)], axis=0) for i in range(3))
    scores = b.node("Mul", [b.node("MatMul", [q, b.node("Transpose", [k], perm=[0, 1, 3, 2])]),
                            b.const(dh ** -0.5)])
    if mask == "where" and tokens is None:    # HF GPT-2: its bias buffer sliced to the length
        length = b.node("Gather", [b.node("Shape", [scores]), b.const([2], np.int64)], axis=0)
        causal = b.node("Slice", [b.init("causal", np.tril(np.ones((MAX_POSITIONS,) * 2, bool))[None, None]),
                                  b.const([0, 0], np.int64), b.node("Concat", [length, length], axis=0),
                                  b.const([2, 3], np.int64)])
        scores = b.node("Where", [causal, scores, b.const(np.finfo(np.float32).min)])
    elif mask == "where":       # HF GPT-2: torch.where(causal, scores, finfo.min)
        causal = np.tril(np.ones((tokens, tokens), bool))[None, None]
        scores = b.node("Where", [b.init("causal", causal), scores, b.const(np.finfo(np.float32).min)])
    elif mask == "add":       # nn.Transformer style: an additive upper-triangular -inf-like mask
        upper = np.triu(np.full((tokens, tokens), -1e9, np.float32), 1)
        scores = b.node("Add", [scores, b.init("mask", upper)])
    ctx = b.node("MatMul", [b.node("Softmax", [scores], axis=-1), v])
    ctx = b.node("Reshape", [b.node("Transpose", [ctx], perm=[0, 2, 1, 3]), ctx_shape])
    return b.matmul_add(ctx, hidden, hidden)


def vit_tiny(batch: int = 1, size: int = 224, patch: int = 16, hidden: int = 192, heads: int = 3, layers: int = 12,
             mlp: int = 768, classes: int = 1000, seed: int = 0):
    """ViT-Tiny/16 (timm ``vit_tiny_patch16_224``): 16x16/16 patch-embedding Conv, Reshape + Transpose
    to tokens, class token Concat, position embedding Add (197 tokens at 224), pre-norm blocks of
    LayerNormalization, attention, erf-form GELU MLP; final LayerNorm, the class token Gather-ed, Gemm.
    ``batch=None`` leaves the batch symbolic (``"batch"``): the class token is then expanded to the
    batch taken from a Shape chain, as torch exports ``cls_token.expand(B, -1, -1)``."""
    b = OnnxBuilder(seed, opset=17)
    grid = size // patch
    tokens = grid * grid + 1
    x = b.conv("input", 3, hidden, patch, stride=patch, pad=0, bias=True)
    x = b.node("Transpose", [b.node("Reshape", [x, b.const([0, hidden, grid * grid], np.int64)])], perm=[0, 2, 1])
    cls = b.init("cls_token", b.weight((1, 1, hidden), 0.02))
    if batch is None:
        n = b.node("Unsqueeze", [b.node("Gather", [b.node("Shape", [x]), b.const(0, np.int64)], axis=0),
                                 b.const([0], np.int64)])
        cls = b.node("Expand", [cls, b.node("Concat", [n, b.const([1, hidden], np.int64)], axis=0)])
    x = b.node("Concat", [cls, x], axis=1)
    x = b.node("Add", [x, b.init("pos_embed", b.weight((1, tokens, hidden), 0.02))])
    for _ in range(layers):
        x = b.node("Add", [x, _attention(b, b.layer_norm(x, hidden, eps=1e-6), tokens, hidden, heads)])
        y = b.matmul_add(b.gelu(b.matmul_add(b.layer_norm(x, hidden, eps=1e-6), hidden, mlp)), mlp, hidden)
        x = b.node("Add", [x, y])
    x = b.node("Gather", [b.layer_norm(x, hidden, eps=1e-6), b.const(0, np.int64)], axis=1)
    batch_dim = _size(batch, "batch")
    return b.model((batch_dim, 3, size, size), b.gemm(x, hidden, classes), (batch_dim, classes), name="vit_tiny")


def gpt2(batch: int = 1, seq: int = 128, vocab: int = 50257, hidden: int = 768, heads: int = 12, layers: int = 6,
         mask: str = "where", seed: int = 0):
    """A GPT-2-style causal decoder (distilgpt2's sizes by default, HF's export at opset 17): input
    ``"input"`` int64 token ids (batch, seq); token embedding Gather + position embedding (a Gather of
    a constant arange) Add; pre-norm blocks with causal attention (``mask`` "where": Where on a
    constant lower-triangular bool, "add": an additive upper-triangular mask) and a tanh-GELU MLP;
    final LayerNorm and the tied LM head (MatMul with the transposed token embedding).  ``batch=None``
    / ``seq=None`` leave the batch / length symbolic (``"batch"``, ``"seq"``), as an export with dynamic
    axes does: then the positions are a Range to the length and the mask a Slice of a
    ``MAX_POSITIONS``-square buffer."""
    if seq is None and mask == "add":
        raise ValueError("gpt2(seq=None) takes mask='where' (the buffer sliced to the length), not 'add'")
    b = OnnxBuilder(seed, opset=17)
    wte = b.init("wte", b.weight((vocab, hidden), 0.02))
    x = b.node("Gather", [wte, "input"], axis=0)
    if seq is None:
        length = b.node("Gather", [b.node("Shape", ["input"]), b.const(1, np.int64)], axis=0)
        ids = b.node("Unsqueeze", [b.node("Range", [b.const(0, np.int64), length, b.const(1, np.int64)]),
                                   b.const([0], np.int64)])
    else:
        ids = b.const(np.arange(seq)[None], np.int64)
    positions = b.node("Gather", [b.init("wpe", b.weight((MAX_POSITIONS, hidden), 0.01)), ids], axis=0)
    x = b.node("Add", [x, positions])
    for _ in range(layers):
        x = b.node("Add", [x, _attention(b, b.layer_norm(x, hidden, eps=1e-5), seq, hidden, heads, mask=mask)])
        y = b.matmul_add(b.gelu_tanh(b.matmul_add(b.layer_norm(x, hidden, eps=1e-5), hidden, 4 * hidden)),
                         4 * hidden, hidden)
        x = b.node("Add", [x, y])
    x = b.layer_norm(x, hidden, eps=1e-5)
    logits = b.node("MatMul", [x, b.node("Transpose", [wte], perm=[1, 0])])
    batch_dim = _size(batch, "batch")
    seq_dim = _size(seq, "seq")
    return b.model((batch_dim, seq_dim), logits, (batch_dim, seq_dim, vocab), name="gpt2", input_dtype=np.int64)


def mlp_mixer(batch: int = 1, size: int = 224, patch: int = 16, hidden: int = 512, tokens_mlp: int = 256,
              channels_mlp: int = 2048, layers: int = 8, classes: int = 1000, seed: int = 0):
    """MLP-Mixer S/16: patch-embedding Conv, tokens (Reshape + Transpose), blocks of LayerNorm ->
    Transpose -> token-mixing MLP (over the 196 patches) -> Transpose back -> residual, LayerNorm ->
    channel-mixing MLP -> residual (erf GELU); final LayerNorm, ReduceMean over tokens, Gemm.
    ``batch=None`` leaves the batch symbolic (``"batch"``)."""
    b = OnnxBuilder(seed, opset=17)
    n = (size // patch) ** 2
    x = b.conv("input", 3, hidden, patch, stride=patch, pad=0, bias=True)
    x = b.node("Transpose", [b.node("Reshape", [x, b.const([0, hidden, n], np.int64)])], perm=[0, 2, 1])
    for _ in range(layers):
        y = b.node("Transpose", [b.layer_norm(x, hidden, eps=1e-6)], perm=[0, 2, 1])
        y = b.matmul_add(b.gelu(b.matmul_add(y, n, tokens_mlp)), tokens_mlp, n)
        x = b.node("Add", [x, b.node("Transpose", [y], perm=[0, 2, 1])])
        y = b.matmul_add(b.gelu(b.matmul_add(b.layer_norm(x, hidden, eps=1e-6), hidden, channels_mlp)),
                         channels_mlp, hidden)
        x = b.node("Add", [x, y])
    x = b.node("ReduceMean", [b.layer_norm(x, hidden, eps=1e-6)], axes=[1], keepdims=0)
    batch_dim = _size(batch, "batch")
    return b.model((batch_dim, 3, size, size), b.gemm(x, hidden, classes), (batch_dim, classes), name="mlp_mixer")
