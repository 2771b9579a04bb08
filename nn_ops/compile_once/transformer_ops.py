"""The shape-polymorphic walk's kernels for transformer ops and integer matrix products: Attention
(opset 23), RotaryEmbedding, MatMulInteger, QLinearMatMul and DynamicQuantizeLinear (SwiGLU is an
elementwise node of ``common.WITH_ATTRS``).  Each ``fn(walk, node, label)`` builds the
node's kernels through ``walk.kernel`` (``walk``: the ``_Builder``) or raises ``walk.unsupported``
saying why not; ``OPS`` maps op types to them.  Attention is made of the walk's own pieces, as the
static converter decomposes it: head transposes, a ``batch_matmul`` of the scores (scale, softcap,
mask and causal frontier as its epilogue; the query heads of one kv head grouped as rows, so GQA
never copies K or V), a row softmax, and a ``batch_matmul`` by V."""
from __future__ import annotations

import math

import numpy as np

from ...dsl import intrinsics as lwi
from ...dsl.expr import cast, const, select
from ...dsl.tensor import compute
from ..network import symbolic as S
from ..ops import math as math_ops
from ..ops.int8_matmul import (int8_pairs, matmul_u8s8_pair_panels, matmul_u8s8_panels, pack_words, pairs_of_words,
                               signed_bytes)
from ..ops.matmul import batch_matmul, matmul_panels, pack_panels, panel_width
from ..ops.quantize import quantize
from ..ops.rotary import rotary_embedding
from ..ops.shape import concat, reduce, softmax, transpose
from ..onnx_import.context import optional_input, optional_output
from ..onnx_import.importer import np_dtype
from .common import _attr, _show

_FLOATS = ("float32", "float64")


def _round(v):
    """Half to even, as the static path's "round"."""
    return math_ops.UNARY["round"][0](v, {})


# ---------------------------------------------------------------------- Attention
def attention(walk, node, label: str) -> None:
    """Attention of 3-d inputs with head counts or 4-d ones; GQA, causal (from the past length on),
    a bool or additive mask broadcast to the scores (as long as the keys, or shorter by a static
    amount), scale, softcap, past_key/past_value and the present outputs."""
    q, k, v, mask, past_key, past_value = (optional_input(node, i) for i in range(6))
    if optional_input(node, 6):
        raise walk.unsupported("nonpad_kv_seqlen (opset 24)")
    if optional_output(node, 3):
        raise walk.unsupported("the qk_matmul_output output")
    if int(_attr(node, "left_window_size", -1)) != -1 or int(_attr(node, "right_window_size", -1)) != -1:
        raise walk.unsupported("a sliding window (left_window_size / right_window_size)")
    dtype = walk.dtype(q)
    if dtype not in _FLOATS or any(walk.dtype(i) != dtype for i in (k, v, past_key, past_value) if i):
        raise walk.unsupported(f"inputs other than all float32 or all float64 (Q is {dtype})")
    precision = int(_attr(node, "softmax_precision", 0) or 0)
    if precision and np_dtype(precision) != dtype:
        raise walk.unsupported(f"softmax_precision {np_dtype(precision)} for {dtype} inputs")
    rank = len(walk.shape(q))
    if rank not in (3, 4) or any(len(walk.shape(i)) != rank for i in (k, v)) or bool(past_key) != bool(past_value):
        raise walk.unsupported("Q, K, V of different ranks, or past_key without past_value")
    q_heads, kv_heads = (int(_attr(node, a, 0) or 0) for a in ("q_num_heads", "kv_num_heads"))
    heads = _Heads(walk, label, rank)
    qh = heads.split(q, q_heads, "q")                                       # [B, Hq, Sq, D]
    keys = heads.with_past(k, kv_heads, past_key, optional_output(node, 1), "k")    # [B, Hkv, T, D], or None
    values = heads.with_past(v, kv_heads, past_value, optional_output(node, 2), "v")
    # [B, Hkv, D, T]: without a past (or a present output), read transposed straight from the input
    kt = heads.split(k, kv_heads, "k", keys_last=True) if keys is None else heads.transposed(keys, (0, 1, 3, 2), "k")
    vh = values if values is not None else heads.split(v, kv_heads, "v")
    b, hq, sq, d = walk.shape(qh)
    _, hkv, dk, t = walk.shape(kt)
    dv = walk.shape(vh)[3]
    if not S.is_static(hq) or not S.is_static(hkv) or int(hq) % int(hkv) or S.equal(d, dk) is not True:
        raise walk.unsupported(f"{S.show(hq)} query heads over {S.show(hkv)} kv heads, head sizes {S.show(d)} and "
                               f"{S.show(dk)}")
    rep = int(hq) // int(hkv)
    groups, rows = S.simplify(b * hkv), S.simplify(rep * sq)
    offset = _causal_offset(walk, node, k, past_key, sq, rank)
    scores = _scores(walk, node, label, heads.view(qh, (groups, rows, d)), heads.view(kt, (groups, d, t)),
                     mask, (b, hq, sq, t), rep, offset)
    flat = S.simplify(groups * rows)
    probs = walk.fresh(label + ".probs")

    def row_softmax(x, extent):
        return softmax(x, -1, name="softmax", zero_masked_rows=bool(mask))
    walk.kernel(label + ".softmax", ("softmax", False) + (("masked",) if mask else ()),
                [heads.view(scores, (flat, t))], probs, row_softmax, out_shape=(flat, t),
                variants=walk.unit_variants((flat, t), row_softmax))
    product = walk.fresh(label + ".pv")

    def by_values(p, x, extent):
        return batch_matmul(p, x, name="bmm")
    walk.kernel(label + ".values", ("attention_values",), [heads.view(probs, (groups, rows, t)),
                                                            heads.view(vh, (groups, t, dv))], product, by_values,
                out_shape=(groups, rows, dv), variants=walk.unit_variants((groups, rows, dv), by_values))
    if rank == 4:
        walk.view(product, node.output[0])
    else:
        heads.transposed(heads.view(product, (b, hq, sq, dv)), (0, 2, 1, 3), "y", then_view=node.output[0])


class _Heads:
    """One Attention node's head layouts: views and transpose/concat kernels between them."""

    def __init__(self, walk, label: str, rank: int):
        self.walk, self.label, self.rank = walk, label, rank

    def view(self, src: str, shape: tuple) -> str:
        dst = self.walk.fresh(src + ".as")
        self.walk.view(src, dst, shape)
        return dst

    def transposed(self, src: str, perm: tuple, what: str, out: str = "", then_view=None) -> str:
        shape = self.walk.shape(src)
        out = out or self.walk.fresh(src + ".t")
        out_shape = tuple(shape[p] for p in perm)

        def make(x, extent):
            return transpose(x, perm, name="transpose")
        self.walk.kernel(f"{self.label}.{what}_heads", ("transpose", perm), [src], out, make, out_shape=out_shape,
                         then_view=then_view, variants=self.walk.unit_variants(out_shape, make))
        return out

    def split(self, name: str, heads: int, what: str, out: str = "", keys_last: bool = False) -> str:
        """Input ``name`` as ``[B, H, S, D]`` (``keys_last``: ``[B, H, D, S]``): a 3-d ``[B, S, H*D]``
        one seen as ``[B, S, H, D]`` and transposed, a 4-d one as it is."""
        shape = self.walk.shape(name)
        if self.rank == 3:
            if not heads or not S.is_static(shape[2]) or int(shape[2]) % heads:
                raise self.walk.unsupported(f"3-d inputs of hidden size {S.show(shape[2])} over {heads} heads")
            name = self.view(name, shape[:2] + (S.dim(heads), S.dim(int(shape[2]) // heads)))
            perm = (0, 2, 3, 1) if keys_last else (0, 2, 1, 3)
        else:
            if heads and S.equal(shape[1], heads) is not True:
                raise self.walk.unsupported(f"{S.show(shape[1])} heads where the head-count attribute says {heads}")
            perm = (0, 1, 3, 2) if keys_last else None
        if perm is not None:
            return self.transposed(name, perm, what, out)
        if out:
            self.walk.view(name, out)
        return out or name

    def with_past(self, name: str, heads: int, past: str, present: str, what: str):
        """``[B, H, P + S, D]``: the past and the new heads concatenated along the sequence (the
        present output, when the node asks for it); None without a past or a present output."""
        if not past and not present:
            return None
        new = self.split(name, heads, what, "" if past else present)
        if not past:
            return new
        walk = self.walk
        out = present or walk.fresh(name + ".present")
        shape = walk.shape(new)
        out_shape = shape[:2] + (S.simplify(walk.shape(past)[2] + shape[2]),) + shape[3:]
        walk.kernel(f"{self.label}.present_{what}", ("concat", 2, 2), [past, new], out,
                    lambda *parts, extent: concat(parts, 2, name="concat"), out_shape=out_shape, derived_output=True)
        return out


def _causal_offset(walk, node, k: str, past_key: str, sq, rank: int):
    """None without ``is_causal``; else how the frontier's diagonal is shifted: 0, or with a past
    the past length as the kernel computes it (``"keys"``: the kv length less the query length,
    where the new keys are as many as the queries)."""
    if not int(_attr(node, "is_causal", 0)):
        return None
    if not past_key:
        return 0
    new = walk.shape(k)[1 if rank == 3 else 2]
    if S.equal(new, sq) is not True:
        raise walk.unsupported(f"is_causal with a past and {S.show(new)} new keys for {S.show(sq)} queries")
    return "keys"


def _scores(walk, node, label, q3, kt3, mask, full, rep, offset) -> str:
    """The scaled (softcapped, masked) scores ``[B*Hkv, rep*Sq, T]`` of ``q3 @ kt3``: one
    ``batch_matmul`` kernel with the rest as its epilogue."""
    dtype = walk.dtype(q3)
    d = int(walk.shape(q3)[2])
    scale = _attr(node, "scale", None)
    scale = 1 / math.sqrt(d) if scale is None else float(scale)
    cap = float(_attr(node, "softcap", 0.0) or 0.0)
    hkv = int(full[1]) // rep
    reads, inputs = _mask_reads(walk, mask, full, dtype), [q3, kt3] + ([mask] if mask else [])
    out = walk.fresh(label + ".scores")
    out_shape = walk.shape(q3)[:2] + walk.shape(kt3)[2:]
    minus_inf = const(-math.inf, dtype)

    def make(qh, kth, m=None, extent=None):
        y = batch_matmul(qh, kth, name="scores")
        rows, keys = qh.shape[1], kth.shape[2]
        sq = rows // rep if rep > 1 else rows

        def body(p, r, j):
            s = y[p, r, j] * const(scale, dtype)
            if cap > 0:
                c = const(cap, dtype)
                s = c * lwi.tanh(s / c)
            i = r % sq if rep > 1 else r
            if m is not None:
                h = (p % hkv) * rep + r // sq if rep > 1 else p % hkv
                s = reads(m, (p // hkv, h, i, j), s)
            if offset is not None:
                shift = keys - sq if offset == "keys" else offset
                s = select(j <= i + shift, s, minus_inf)
            return s
        return compute(y.shape, body, name="scores.epilogue", tag="elemwise")
    key = ("attention_scores", scale, cap, rep, offset, reads.key if mask else None)
    walk.kernel(f"{label}.scores", key, inputs, out, make, out_shape=out_shape,
                variants=walk.unit_variants(out_shape, make))
    return out


def _mask_reads(walk, mask: str, full: tuple, dtype: str):
    """How the scores' epilogue applies ``mask`` (``reads(m, (b, h, i, j), s)``): True keeps a
    bool mask's score (else -inf), an additive one is added; its axes of size 1 broadcast, but for
    the last: as long as the keys, or shorter (-inf past its end, as ONNX pads it) by a static
    amount or, a size of its own, by what a run gives.  ``reads.key``: that plan."""
    if not mask:
        return None
    shape, kind = walk.aliased(walk.shape(mask)), walk.dtype(mask)
    if kind not in ("bool", dtype):
        raise walk.unsupported(f"an attn_mask of {kind} for {dtype} scores")
    if len(shape) > 4:
        raise walk.unsupported(f"an attn_mask of shape {_show(shape)}")
    axes = []           # per mask axis: the scores' axis it reads, or None (size 1)
    short = None        # a last axis shorter than the keys: its static length, or "run time" (a size of its own)
    for a, m in enumerate(shape):
        target = full[4 - len(shape) + a]
        last = a == len(shape) - 1
        if last and S.is_static(m) and S.is_static(target) and int(m) < int(target):
            axes.append(3)
            short = int(m)
        elif last and not S.is_static(m) and S.equal(m, target) is not True:
            axes.append(3)      # T against P + S keys: at most that (the shape rule's check), maybe fewer
            short = "run time"
        elif m == 1 and a < len(shape) - 1 and S.equal(target, 1) is not True:
            axes.append(None)
        elif walk.assume_equal(m, target, mask):
            axes.append(4 - len(shape) + a)
        else:
            raise walk.unsupported(f"attn_mask of shape {_show(shape)} for scores {_show(full)}: each size 1 or the "
                                   f"scores', the last the keys' (or a static amount shorter)")
    minus_inf = const(-math.inf, dtype)

    def reads(m, index, s):
        at = tuple(0 if a is None else index[a] for a in axes)
        if axes[0] == 0:    # the batch, b = p // Hkv: the kernel's sizes do not say that B*Hkv is Hkv times B
            at = (lwi.elementwise_min(at[0], m.shape[0] - 1),) + at[1:]
        length = m.shape[-1] if short == "run time" else short
        if short is not None:
            at = at[:-1] + (lwi.elementwise_min(at[-1], length - 1),)
        value = select(m[at], s, minus_inf) if kind == "bool" else s + m[at]
        return select(index[3] < length, value, minus_inf) if short is not None else value
    reads.key = (kind, tuple(axes), short)
    return reads


# ---------------------------------------------------------------------- RotaryEmbedding
def rotary(walk, node, label: str) -> None:
    """RotaryEmbedding (``ops/rotary.py``) of 4-d input or 3-d with ``num_heads``, its caches
    constants or inputs, read at run-time position ids (checked against the cache) or, without
    them, at (batch, sequence)."""
    x = node.input[0]
    shape, heads = walk.shape(x), int(_attr(node, "num_heads", 0) or 0)
    if not walk.dtype(x).startswith("float") or len(shape) not in (3, 4) or not S.is_static(shape[-1]) \
            or (len(shape) == 3 and (not heads or int(shape[2]) % heads)):
        raise walk.unsupported(f"a RotaryEmbedding of {walk.dtype(x)} {_show(shape)} over {heads} heads")
    if not S.is_static(walk.shape(node.input[1])[-1]):
        raise walk.unsupported("rotary caches of a symbolic last axis")
    interleaved, dim = bool(_attr(node, "interleaved", 0)), int(_attr(node, "rotary_embedding_dim", 0))
    inputs = [i for i in node.input[:4] if i]
    walk.kernel(label, ("rotary", interleaved, dim, heads), inputs, node.output[0],
                lambda t, cos, sin, ids=None, extent=None: rotary_embedding(t, cos, sin, ids, interleaved, dim, heads,
                                                                             name="rotary"))


# ---------------------------------------------------------------------- integer matrix products
def integer_matmul(walk, node, label: str) -> None:
    """MatMulInteger / QLinearMatMul of a computed A (its rows flattened) by a constant 2-d B, exact in
    int32; A's zero point a constant or a computed scalar (as DynamicQuantizeLinear gives it).
    Where A's rows are whole words and B's offset from int8 is its zero point (``beta`` = 0: an int8
    weight of zero point 0, onnxruntime's default, or a uint8 one of 128), the int8 product over
    packed words (``ops/int8_matmul``, as the static path) less ``alpha`` times B's column sums;
    otherwise B widened to int32 less its zero point, packed in column panels, and A less its zero
    point widened in the kernel.  QLinearMatMul then requantizes in the same kernel as the static
    path does (float64, rounding half to even, saturating)."""
    qlinear = node.op_type == "QLinearMatMul"
    a, b = node.input[0], node.input[3 if qlinear else 1]
    a_zero, b_zero = optional_input(node, 2), optional_input(node, 5 if qlinear else 3)
    if a in walk.consts or b not in walk.consts or walk.consts[b].ndim != 2 or len(walk.shape(a)) < 2:
        raise walk.unsupported(f"{node.op_type} other than of a computed A by a constant 2-d B")
    if walk.dtype(a) not in ("int8", "uint8") or walk.dtype(b) not in ("int8", "uint8"):
        raise walk.unsupported(f"operands of {walk.dtype(a)} and {walk.dtype(b)} (int8 or uint8)")
    b_value = walk.consts[b]
    zb = 0
    if b_zero:
        if b_zero not in walk.consts or walk.consts[b_zero].size != 1:
            raise walk.unsupported("B's zero point other than one constant")
        zb = int(walk.consts[b_zero].reshape(()))
    if a_zero and (walk.shape(a_zero) not in ((), (1,))):
        raise walk.unsupported(f"A's zero point of shape {_show(walk.shape(a_zero))} (one value)")
    multiplier, to, shift = None, "int32", 0.0
    if qlinear:
        scales, y_zero = [node.input[i] for i in (1, 4, 6)], optional_input(node, 7)
        if not all(s in walk.consts and walk.consts[s].size == 1 for s in scales + ([y_zero] if y_zero else [])):
            raise walk.unsupported("scales or the output's zero point other than one constant each")
        a_scale, b_scale, y_scale = (walk.consts[s].reshape(()) for s in scales)
        multiplier = float((a_scale * b_scale) / y_scale)         # in their type, as the static path
        to = walk.dtype(y_zero) if y_zero else walk.dtype(a)
        shift = float(walk.consts[y_zero].reshape(())) if y_zero else 0.0
    depth, n = b_value.shape
    b_s, cb = signed_bytes(b_value)
    words = depth % 4 == 0 and zb == cb          # the int8 product applies (beta = 0)
    ca = 128 if walk.dtype(a) == "int8" else 0
    nr = panel_width(walk.target.lanes("int32"))
    panels = walk.fresh(b + ".panels")
    pairs = words and int8_pairs(walk.target)
    if words:
        walk.consts[panels] = pack_panels(pack_words(b_s), nr)
        if pairs:       # words of two int16 rows: one pmaddwd a vector (no byte dot product here)
            walk.consts[panels] = pairs_of_words(walk.consts[panels])
        sums = walk.fresh(b + ".sums")
        walk.consts[sums] = b_s.astype(np.int32).sum(axis=0).astype(np.int32)
    else:
        walk.consts[panels] = pack_panels(np.ascontiguousarray(b_value.astype(np.int32) - zb), nr)
    shape = walk.shape(a)
    rows = walk.fresh(a + ".rows")
    walk.view(a, rows, (S.simplify(S.product(shape[:-1])), shape[-1]))
    constant_zero = int(walk.consts[a_zero].reshape(())) if a_zero in walk.consts else None
    inputs = [rows, panels] + ([sums] if words else []) + ([a_zero] if a_zero and constant_zero is None else [])

    def make(x, w, *rest, extent=None):
        rest = list(rest)                   # [column sums if words] + [A's zero point if computed]
        column_sums = rest.pop(0) if words else None
        zero = rest.pop(0) if rest else None
        base = (const(constant_zero or 0, "int32") if zero is None
                else cast("int32", zero[(0,) * len(zero.shape)]))
        if words:       # sum_k (a_u - alpha) b_s with a_u = a + ca, alpha = za + ca
            alpha = base + const(ca, "int32")
            product = (matmul_u8s8_pair_panels if pairs else matmul_u8s8_panels)(x, w, n, name="integer_matmul")
            acc = compute(product.shape, lambda i, j: product[i, j] - alpha * column_sums[j], name="offset",
                          tag="elemwise")
        else:
            wide = compute(x.shape, lambda i, kk: cast("int32", x[i, kk]) - base, name="widen", tag="elemwise")
            acc = matmul_panels(wide, w, n, name="integer_matmul")
        if multiplier is None:
            return acc
        info = np.iinfo(to)

        def requantized(i, j):
            v = _round(cast("float64", acc[i, j]) * const(multiplier, "float64") + const(shift, "float64"))
            v = lwi.elementwise_min(lwi.elementwise_max(v, const(float(info.min), "float64")),
                                    const(float(info.max), "float64"))
            return cast(to, v)
        return compute(acc.shape, requantized, name="requantize", tag="elemwise")
    out = walk.fresh(node.output[0] + ".rows")
    key = ("integer_matmul", n, constant_zero, words, ca, (multiplier, shift, to) if qlinear else None)
    walk.kernel(label, key, inputs, out, make, out_shape=(walk.shape(rows)[0], S.dim(n)), then_view=node.output[0])


def dynamic_quantize(walk, node, label: str) -> None:
    """DynamicQuantizeLinear over any sizes, as the static path computes it: the range (with 0)
    reduced over the whole tensor, then the scale, the zero point, and the uint8 values."""
    x = node.input[0]
    if walk.dtype(x) != "float32":
        raise walk.unsupported(f"DynamicQuantizeLinear of {walk.dtype(x)} values")
    shape = walk.shape(x)
    # rows x a static last axis: the range of each row first (rows in parallel), then over the rows
    # (one flat serial reduction took 99 us of 128 x 768, this 46; per column first, 199)
    width = int(shape[-1]) if shape and S.is_static(shape[-1]) else 1
    rows = walk.fresh(x + ".rows")
    walk.view(x, rows, (S.simplify(S.product(shape) / width), S.dim(width)))
    bounds = walk.fresh(x + ".range")
    zero = const(0.0, "float32")

    def value_range(t, extent):
        lo, hi = (reduce(reduce(t, [1], kind, keepdims=False, name=f"rows_{kind}"), [0], kind, keepdims=False,
                         name=f"range_{kind}") for kind in ("min", "max"))
        return compute((2,), lambda e: select(e == 0, lwi.elementwise_min(lo[()], zero),
                                             lwi.elementwise_max(hi[()], zero)), name="range", tag="injective")
    walk.kernel(label + ".range", ("dynamic_quantize_range", width), [rows], bounds, value_range,
                out_shape=(S.dim(2),))

    def scale_of(r):            # (the range is never empty: it holds 0)
        span = r[1] - r[0]
        return select(r[1] == r[0], const(1.0, "float32"), span) / const(255.0, "float32")
    scale = optional_output(node, 1) or walk.fresh(x + ".scale")
    walk.kernel(label + ".scale", ("dynamic_quantize_scale",), [bounds], scale,
                lambda r, extent: compute((), lambda: scale_of(r), name="scale", tag="injective"), out_shape=())

    def zero_point(r, extent):
        def value():
            v = zero - r[0] / scale_of(r)
            v = lwi.elementwise_min(lwi.elementwise_max(v, zero), const(255.0, "float32"))
            return cast("uint8", _round(v))
        return compute((), value, name="zero_point", tag="injective")
    point = optional_output(node, 2) or walk.fresh(x + ".zero_point")
    walk.kernel(label + ".zero_point", ("dynamic_quantize_zero_point",), [bounds], point, zero_point, out_shape=())
    if node.output[0]:
        walk.kernel(label, ("dynamic_quantize",), [x, scale, point], node.output[0],
                    lambda t, s, z, extent: quantize(t, s, z, "uint8", name="quantize"))


OPS = {"Attention": attention, "RotaryEmbedding": rotary, "MatMulInteger": integer_matmul,
       "QLinearMatMul": integer_matmul, "DynamicQuantizeLinear": dynamic_quantize}
