"""ONNX ``Attention`` (opsets 23, 24 and 25) as a decomposition into existing graph ops.

Supported, following ``onnx.reference.ops.op_attention`` step by step:

- 4-D inputs ``[B, H, S, D]``, and 3-D inputs ``[B, S, H*D]`` with ``q_num_heads`` /
  ``kv_num_heads`` (reshaped to ``[B, S, H, D]`` and transposed to ``[B, H, S, D]``; the
  output goes back to ``[B, S, H*Dv]``);
- grouped-query attention: ``kv_num_heads`` dividing ``q_num_heads``, query head ``h``
  reading kv head ``h // (q_heads / kv_heads)`` (numpy's ``repeat`` of the kv heads);
- ``scale`` (default ``1/sqrt(D)``; ``sqrt(scale)`` multiplies Q and K, as the reference
  does) and ``softcap`` (``c * tanh(scores / c)``, before the mask);
- ``past_key`` / ``past_value`` (concatenated in front of K / V along the sequence) and
  the ``present_key`` / ``present_value`` outputs;
- ``attn_mask``: bool (True attends) or additive of any numeric type, broadcast
  right-aligned, padded with -inf up to the total kv length when shorter; an additive
  mask of another type promotes the scores as numpy does;
- ``is_causal``, bottom-right aligned: query ``i`` attends key ``j`` iff
  ``j <= i + offset``, offset = past length (or 0), or ``nonpad_kv_seqlen[b] - q_len``
  per batch when ``nonpad_kv_seqlen`` is given (opset 24+);
- ``nonpad_kv_seqlen`` (keys ``j >= nonpad_kv_seqlen[b]`` are masked) and the sliding
  window ``left_window_size`` / ``right_window_size`` (opset 25), with the same offsets;
- ``softmax_precision`` float16 / float / double, ``qk_matmul_output_mode`` 0-3 and the
  optional 4th output; rows whose bias is all -inf give zero probabilities (and Y = 0).

Decomposition: the scores are one batched ``matmul`` over ``[B*Hkv, rep*Sq, D]`` x
``[B*Hkv, D, Skv]`` (a group of ``rep`` query heads shares its kv head, so K and V are
never copied per query head), then ``add`` of the bias, ``softmax`` along the keys,
``where`` for fully masked rows, and a second batched ``matmul`` with V.  The bias is a
sum of terms: the mask (``where`` for bool), and 0/-inf terms for causal, window and
padding; terms known at import (no ``nonpad_kv_seqlen``) are built with numpy as one
constant, the per-batch ones with integer comparisons against ``nonpad_kv_seqlen``.

One deliberate difference from the python reference: with ``is_causal`` and no window,
it builds the causal matrix from the mask's own last two axes, so a mask that broadcasts
over the queries (``[1, Skv]``) gets one causal row for every query (and a 1-D mask fails);
here the frontier always follows the query row, as in the operator's function body (the
``_expanded`` graphs) and for masks of full ``[Sq, Skv]`` extent, where the two agree.

Rejected (``Unsupported``): bfloat16 anywhere, K / V / past of another dtype than Q,
kv heads that do not divide the q heads, 3-D inputs without head counts, a mask longer
than the kv sequence or not broadcasting to the scores, softmax_precision other than
float16 / float / double, qk_matmul_output_mode outside 0-3.
"""
from __future__ import annotations

import numpy as np

from ..context import ImportContext, Unsupported, check_size, converter, optional_input, optional_output

_FLOATS = ("float16", "float32", "float64")
_PRECISIONS = {1: "float32", 10: "float16", 11: "float64"}     # softmax_precision (TensorProto codes)


class _Attention:
    """One Attention node being converted: its inputs, attributes and emitting helpers."""

    def __init__(self, ctx: ImportContext, node):
        self.ctx, self.node = ctx, node
        self.base = node.output[0]
        self.dtype = ctx.dtype(node.input[0])
        self.rank = len(ctx.shape(node.input[0]))

    # ------------------------------------------------------------------ helpers
    def tmp(self, tag: str) -> str:
        return self.ctx.graph.fresh_name(f"{self.base}.{tag}")

    def emit(self, op: str, inputs, tag: str, attrs=None, out=None) -> str:
        return self.ctx.emit(op, inputs, out or self.tmp(tag), attrs, name=f"{self.node.name or self.base}.{tag}")

    def const(self, tag: str, value, dtype=None) -> str:
        return self.ctx.add_constant(f"{self.base}.{tag}", np.asarray(value, dtype or self.dtype))

    def shape(self, name: str):
        return list(self.ctx.shape(name))

    def additive(self, allowed: str, dtype: str, tag: str) -> str:
        """A bool tensor as an additive bias: 0 where it holds, -inf elsewhere."""
        return self.emit("where", [allowed, self.const(tag + "_0", 0, dtype), self.const(tag + "_inf", -np.inf, dtype)],
                         tag)

    # ------------------------------------------------------------------ checks
    def check(self) -> None:
        """Reject dtypes and ranks the decomposition does not handle."""
        names = {"Q": 0, "K": 1, "V": 2, "past_key": 4, "past_value": 5}
        if self.dtype not in _FLOATS:
            raise Unsupported(f"Q has dtype {self.dtype}; only float16, float32 and float64 are supported")
        for what, k in names.items():
            name = optional_input(self.node, k)
            if name is not None and self.ctx.dtype(name) != self.dtype:
                raise Unsupported(f"{what} has dtype {self.ctx.dtype(name)} and Q {self.dtype}; "
                                  f"only inputs of one dtype are supported")
        ranks = [len(self.ctx.shape(self.node.input[k])) for k in range(3)]
        if self.rank not in (3, 4) or len(set(ranks)) != 1:
            raise Unsupported(f"Q, K, V of ranks {ranks}: they must all be 3-D or all 4-D")
        if (optional_input(self.node, 4) is None) != (optional_input(self.node, 5) is None):
            raise Unsupported("past_key and past_value must be given together")
        for what in ("past_key", "past_value"):
            name = optional_input(self.node, names[what])
            if name is not None and len(self.ctx.shape(name)) != 4:
                raise Unsupported(f"{what} has shape {tuple(self.ctx.shape(name))}; it must be 4-D "
                                  f"[batch, kv_heads, past_sequence, head_size]")
        if optional_input(self.node, 6) is not None and optional_input(self.node, 4) is not None:
            raise Unsupported("nonpad_kv_seqlen together with past_key/past_value")

    # ------------------------------------------------------------------ heads
    def heads(self, name: str, num_heads: int, what: str) -> str:
        """A 3-D ``[B, S, H*D]`` input as ``[B, H, S, D]``; a 4-D input as it is."""
        shape = self.shape(name)
        if len(shape) == 4:
            if num_heads and num_heads != shape[1]:
                raise Unsupported(f"{what} has {shape[1]} heads but the head-count attribute says {num_heads}")
            return name
        b, s, hidden = shape
        if not num_heads:
            raise Unsupported("3-D inputs need the q_num_heads and kv_num_heads attributes")
        if hidden % num_heads:
            raise Unsupported(f"{what} hidden size {hidden} is not a multiple of its {num_heads} heads")
        split = self.emit("reshape", [name], f"{what}_split", {"shape": (b, s, num_heads, hidden // num_heads)})
        return self.emit("transpose", [split], f"{what}_heads", {"perm": (0, 2, 1, 3)})

    def with_past(self, new: str, past_index: int, out_index: int, tag: str) -> str:
        """``concat(past, new)`` along the sequence (``new`` without a past), written to the
        present output when the node asks for it."""
        past = optional_input(self.node, past_index)
        out = optional_output(self.node, out_index)
        if past is None:
            return self.emit("copy", [new], tag, out=out) if out else new
        ps, ns = self.shape(past), self.shape(new)
        if len(ps) != 4 or ps[:2] != ns[:2] or ps[3] != ns[3]:
            raise Unsupported(f"{tag} past of shape {ps} does not extend {ns} along the sequence axis")
        return self.emit("concat", [past, new], tag, {"axis": 2}, out=out)


def _scale_factor(att: _Attention, q_head: int) -> float:
    """``sqrt(scale)`` in Q's dtype (the reference scales Q and K by it)."""
    scale = att.ctx.attr(att.node, "scale", None)
    scale = 1 / np.sqrt(q_head) if scale is None else float(scale)
    return float(np.dtype(att.dtype).type(np.sqrt(scale)))


def _scores(att: _Attention, q: str, k: str, rep: int) -> str:
    """``(Q * s) @ (K * s)^T`` as ``[B, Hq, Sq, Skv]``: one batched matmul, GQA by grouping
    ``rep`` query heads per kv head."""
    b, hq, sq, d = att.shape(q)
    _, hkv, skv, _ = att.shape(k)
    s = _scale_factor(att, d)
    qs = att.emit("mul", [q, att.const("sqrt_scale_q", s)], "q_scaled")
    ks = att.emit("mul", [k, att.const("sqrt_scale_k", s)], "k_scaled")
    kt = att.emit("transpose", [ks], "k_t", {"perm": (0, 1, 3, 2)})
    q3 = att.emit("reshape", [qs], "q_groups", {"shape": (b * hkv, rep * sq, d)})
    kt3 = att.emit("reshape", [kt], "k_t3", {"shape": (b * hkv, d, skv)})
    s3 = att.emit("matmul", [q3, kt3], "qk")
    return att.emit("reshape", [s3], "qk4", {"shape": (b, hq, sq, skv)})


def _softcap(att: _Attention, scores: str) -> str:
    """``c * tanh(scores / c)`` when ``softcap`` is positive."""
    cap = float(att.ctx.attr(att.node, "softcap", 0.0) or 0.0)
    if cap <= 0:
        return scores
    c = att.const("softcap", cap)
    t = att.emit("tanh", [att.emit("div", [scores, c], "softcap_div")], "softcap_tanh")
    return att.emit("mul", [t, c], "softcapped")


def _mask_term(att: _Attention, skv: int):
    """The attn_mask as an additive bias (numpy array when constant, else a graph value), or None."""
    name = optional_input(att.node, 3)
    if name is None:
        return None
    mdtype = att.ctx.dtype(name)
    shape = att.shape(name)
    if "bfloat16" in mdtype:
        raise Unsupported("a bfloat16 attn_mask")
    if not shape or shape[-1] > skv:
        raise Unsupported(f"attn_mask of shape {shape} for {skv} keys: its last axis must be at most the "
                          f"total kv length")
    wdtype = att.dtype if mdtype == "bool" else str(np.promote_types(att.dtype, mdtype))
    value = att.ctx.const(name)
    if value is not None:
        bias = np.where(value, 0, -np.inf).astype(wdtype) if mdtype == "bool" else value.astype(wdtype)
        pad = [(0, 0)] * (bias.ndim - 1) + [(0, skv - shape[-1])]
        return np.pad(bias, pad, constant_values=-np.inf)
    bias = att.additive(name, wdtype, "mask_bias") if mdtype == "bool" else (
        name if mdtype == wdtype else att.emit("cast", [name], "mask_cast", {"to": wdtype}))
    if shape[-1] < skv:
        rank = len(shape)
        bias = att.emit("pad", [bias], "mask_pad", {"before": (0,) * rank, "after": (0,) * (rank - 1) +
                                                     (skv - shape[-1],), "value": -np.inf})
    return bias


def _window(att: _Attention):
    """(left, right) window sizes, -1 for an unbounded side (opset 25)."""
    left = int(att.ctx.attr(att.node, "left_window_size", -1))
    right = int(att.ctx.attr(att.node, "right_window_size", -1))
    if left < -1 or right < -1:
        raise Unsupported(f"left_window_size={left}, right_window_size={right}: each must be -1 or >= 0")
    return left, right


def _static_allowed(sq: int, skv: int, offset: int, causal: bool, left: int, right: int) -> np.ndarray:
    """[Sq, Skv]: which keys each query may attend under causal and window with a scalar offset."""
    check_size((sq, skv), "int64", "the attention mask")
    diff = (np.arange(sq)[:, None] + offset) - np.arange(skv)[None, :]      # i + offset - j
    allowed = np.ones((sq, skv), bool)
    if causal:
        allowed &= diff >= 0
    if left >= 0:
        allowed &= diff <= left
    if right >= 0:
        allowed &= -diff <= right
    return allowed


def _per_batch_allowed(att: _Attention, nonpad: str, sq: int, skv: int, causal: bool, left: int, right: int) -> str:
    """[B, 1, Sq, Skv] bool from ``nonpad_kv_seqlen``: padding, and causal / window with the
    offset ``nonpad[b] - Sq``; every test is ``const <= n[b]`` or ``n[b] <= const``."""
    b = att.shape(nonpad)[0]
    n = att.emit("reshape", [nonpad], "nonpad_b", {"shape": (b, 1, 1, 1)})
    i, j = np.arange(sq)[:, None], np.arange(skv)[None, :]
    tests = [("less", np.broadcast_to(j, (sq, skv)), n, "pad_ok")]                              # j < n
    if causal:
        tests.append(("less_equal", j - i + sq, n, "causal_ok"))            # j <= i + n - sq
    if left >= 0:
        tests.append(("less_equal", n, left + j - i + sq, "left_ok"))       # i + n - sq - j <= left
    if right >= 0:
        tests.append(("less_equal", j - i + sq - right, n, "right_ok"))     # j - (i + n - sq) <= right
    allowed = None
    for op, a, c, tag in tests:
        operands = [x if isinstance(x, str) else att.const(tag + "_idx", x, "int64") for x in (a, c)]
        ok = att.emit(op, operands, tag)
        allowed = ok if allowed is None else att.emit("and", [allowed, ok], tag + "_all")
    return allowed


def _bias(att: _Attention, sq: int, skv: int, past_len: int):
    """The additive bias as (static numpy array or None, graph value or None, dtype)."""
    causal = bool(att.ctx.attr(att.node, "is_causal", 0))
    left, right = _window(att)
    mask = _mask_term(att, skv)
    mdtype = att.dtype if mask is None else (str(mask.dtype) if isinstance(mask, np.ndarray) else att.ctx.dtype(mask))
    static = mask if isinstance(mask, np.ndarray) else None
    dynamic = mask if isinstance(mask, str) else None
    nonpad = optional_input(att.node, 6)
    if nonpad is not None:
        if att.shape(nonpad) != [att.shape(att.node.input[0])[0]]:
            raise Unsupported(f"nonpad_kv_seqlen of shape {att.shape(nonpad)}: it must be [batch]")
        term = att.additive(_per_batch_allowed(att, nonpad, sq, skv, causal, left, right), mdtype, "nonpad_bias")
        dynamic = term if dynamic is None else att.emit("add", [dynamic, term], "bias_sum")
    elif causal or left >= 0 or right >= 0:
        allowed = _static_allowed(sq, skv, past_len, causal, left, right)
        term = np.where(allowed, 0, -np.inf).astype(mdtype)
        static = term if static is None else static + term
    return static, dynamic, mdtype


def _add_bias(att: _Attention, scores: str, static, dynamic, dtype: str):
    """``scores + bias`` in the bias dtype, and the bias value (None when there is none)."""
    if static is None and dynamic is None:
        return scores, None
    if dtype != att.dtype:
        scores = att.emit("cast", [scores], "qk_wide", {"to": dtype})
    bias = dynamic
    if static is not None:
        sname = att.const("bias_static", static, dtype)
        bias = sname if dynamic is None else att.emit("add", [dynamic, sname], "bias")
    return att.emit("add", [scores, bias], "qk_bias"), (static if dynamic is None else bias)


def _guard(att: _Attention, probs: str, bias) -> str:
    """Zero the probability rows whose bias is -inf for every key (softmax gives NaN there)."""
    if bias is None:
        return probs
    pdtype = att.ctx.dtype(probs)
    zero = att.const("row_zero", 0, pdtype)
    if isinstance(bias, np.ndarray):
        dead = np.isneginf(bias.max(axis=-1, keepdims=True))
        if not dead.any():
            return probs
        return att.emit("where", [att.const("dead_rows", dead, "bool"), zero, probs], "probs_guarded")
    rank = len(att.shape(bias))
    row_max = att.emit("reduce", [bias], "bias_row_max", {"axes": (rank - 1,), "kind": "max", "keepdims": True})
    dead = att.emit("isinf", [row_max], "dead_rows", {"positive": False, "negative": True})
    return att.emit("where", [dead, zero, probs], "probs_guarded")


def _softmax_dtype(att: _Attention, current: str) -> str:
    """The dtype softmax runs in: ``softmax_precision`` when set, else that of the biased scores."""
    code = int(att.ctx.attr(att.node, "softmax_precision", 0) or 0)
    if code == 0:
        return current
    if code not in _PRECISIONS:
        raise Unsupported(f"softmax_precision={code}: only float16 (10), float (1) and double (11) are supported")
    return _PRECISIONS[code]


def _as(att: _Attention, name: str, dtype: str, tag: str, out=None) -> str:
    """``name`` cast to ``dtype`` (written to ``out`` when given)."""
    if att.ctx.dtype(name) == dtype:
        return att.emit("copy", [name], tag, out=out) if out else name
    return att.emit("cast", [name], tag, {"to": dtype}, out=out)


def _heads_counts(att: _Attention, q: str, k: str, v: str) -> int:
    """Query heads per kv head (1 without GQA); checks batch sizes and head sizes."""
    (b, hq, _, dq), (bk, hk, _, dk), (bv, hv, _, _) = att.shape(q), att.shape(k), att.shape(v)
    if not b == bk == bv:
        raise Unsupported(f"batch sizes Q {b}, K {bk}, V {bv} differ")
    if dq != dk:
        raise Unsupported(f"Q head size {dq} and K head size {dk} differ")
    if hk != hv or hq % hk:
        raise Unsupported(f"{hq} query heads over {hk} key and {hv} value heads: the kv heads must be equal and "
                          f"divide the query heads")
    return hq // hk


def _output(att: _Attention, y3: str, shape) -> None:
    """Y from the ``[B*Hkv, rep*Sq, Dv]`` product: ``[B, Hq, Sq, Dv]``, or ``[B, Sq, Hq*Dv]`` for 3-D inputs."""
    out, name = att.node.output[0], att.node.name or att.node.output[0]
    if att.rank == 4:
        att.ctx.emit("reshape", [y3], out, {"shape": tuple(shape)}, name=name)
        return
    b, h, s, dv = shape
    yt = att.emit("transpose", [att.emit("reshape", [y3], "y4", {"shape": tuple(shape)})], "y_t",
                  {"perm": (0, 2, 1, 3)})
    att.ctx.emit("reshape", [yt], out, {"shape": (b, s, h * dv)}, name=name)


@converter("Attention", since=23)
def attention(ctx: ImportContext, node):
    """Scaled dot-product attention (see the module docstring for what is covered)."""
    att = _Attention(ctx, node)
    att.check()
    q_heads = int(ctx.attr(node, "q_num_heads", 0) or 0)
    kv_heads = int(ctx.attr(node, "kv_num_heads", 0) or 0)
    q = att.heads(node.input[0], q_heads, "Q")
    k_new = att.heads(node.input[1], kv_heads, "K")
    v_new = att.heads(node.input[2], kv_heads, "V")
    past = optional_input(node, 4)
    past_len = att.shape(past)[2] if past is not None else 0
    k = att.with_past(k_new, 4, 1, "present_key")
    v = att.with_past(v_new, 5, 2, "present_value")
    rep = _heads_counts(att, q, k, v)
    b, hq, sq, _ = att.shape(q)
    _, hkv, skv, dv = att.shape(v)
    mode = int(ctx.attr(node, "qk_matmul_output_mode", 0) or 0)
    if mode not in (0, 1, 2, 3):
        raise Unsupported(f"qk_matmul_output_mode={mode} (only 0, 1, 2 and 3)")

    scores = _softcap(att, _scores(att, q, k, rep))
    static, dynamic, bdtype = _bias(att, sq, skv, past_len)
    biased, bias = _add_bias(att, scores, static, dynamic, bdtype)
    sdtype = _softmax_dtype(att, ctx.dtype(biased))
    probs = att.emit("softmax", [_as(att, biased, sdtype, "qk_precision")], "probs", {"axis": -1})
    probs = _guard(att, probs, bias)

    qk_out = optional_output(node, 3)
    if qk_out:
        _as(att, {0: scores, 1: scores, 2: biased, 3: probs}[mode], att.dtype, "qk_output", out=qk_out)
    p3 = att.emit("reshape", [_as(att, probs, att.dtype, "probs_t1")], "probs_groups",
                  {"shape": (b * hkv, rep * sq, skv)})
    v3 = att.emit("reshape", [v], "v3", {"shape": (b * hkv, skv, dv)})
    y3 = att.emit("matmul", [p3, v3], "pv")
    _output(att, y3, (b, hq, sq, dv))
