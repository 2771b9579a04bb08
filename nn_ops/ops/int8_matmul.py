"""int8 matrix products over words of four packed bytes: ``D[i, j] = sum_k a[i, k] * b[k, j]`` with a
uint8 A and an int8 B, summed exactly in int32.

A quantized dense layer (onnxruntime's ``quantize_dynamic``: MatMulInteger of uint8 activations by an
int8 weight) widened both sides to int32 and ran the int32 matmul: 0.25x onnxruntime's speed at
128 x 768 x 768 on Zen 5, which multiplies four bytes per instruction (VNNI ``vpdpbusd``).  Here the
reduction runs over words: A's four bytes ``4 kw .. 4 kw + 3`` of a row are one int32 (one load: LLVM
joins the four byte loads), B is packed at compile time into words of four rows (``pack_words``), and
``dot4_u8s8`` multiplies and sums a word pair, which the CPU code generator turns into ``vpdpbusd``
where the target has it.  So the matmul schedule (register tile, packed column panels) applies as it
is, with a quarter of the reduction steps.

Where the CPU has no byte dot product (x86 without VNNI), the words are of two rows widened to int16
instead (``pairs_of_words``, at compile time) and ``dot2_i16`` multiplies a pair of them: one
``pmaddwd`` per vector, no widening or regrouping in the loop (``matmul_u8s8_pair_panels``).

Zero points and the signedness of each side are the converter's business (``converters/quantized``):
an int8 A is read with each byte offset by 128 (``a_signed``), a uint8 B is packed offset by -128, and
the corrections are elementwise terms after the product.
"""
from __future__ import annotations

import numpy as np

from ...dsl.expr import cast, const
from ...dsl.intrinsics import dot2_i16, dot4_u8s8
from ...dsl.reduction import sum as lw_sum
from ...dsl.tensor import Tensor, compute, reduce_axis
from ...errors import ExprError
from .registry import register_schedule, schedule_injective

SIGN_BITS = np.int32(-0x7F7F7F80)     # 0x80808080: flips each byte's top bit (an int8 byte + 128 as uint8)


def unsigned_offset(dtype) -> int:
    """What is taken off a byte of ``dtype`` to make it int8 (``vpdpbusd``'s second operand): 128 from
    a uint8, 0 from an int8."""
    return 128 if np.dtype(dtype) == np.uint8 else 0


def signed_bytes(b: np.ndarray):
    """``(b - offset as int8, offset)`` for an int8 or uint8 weight (``unsigned_offset``)."""
    offset = unsigned_offset(b.dtype)
    return (b.astype(np.int16) - offset).astype(np.int8), offset


def pack_words(b: np.ndarray) -> np.ndarray:
    """int8 B [K, N] -> int32 [ceil(K / 4), N]: word ``[kw, j]`` holds ``B[4 kw + r, j]`` in byte r
    (little-endian), rows past K zero."""
    if b.dtype != np.int8 or b.ndim != 2:
        raise ExprError(f"pack_words takes a 2-d int8 array, got {b.dtype} of shape {b.shape}")
    k, n = b.shape
    padded = np.zeros((-(-k // 4) * 4, n), np.int8)
    padded[:k] = b
    return np.ascontiguousarray(padded.reshape(-1, 4, n).transpose(0, 2, 1)).view(np.int32)[..., 0]


def _word(A: Tensor, i, kw, a_signed: bool):
    """Bytes ``4 kw .. 4 kw + 3`` of A's row ``i`` as one int32, each read as uint8."""
    return word_of(lambda r: A[i, 4 * kw + r], a_signed)


def word_of(byte, signed: bool):
    """The four bytes ``byte(0) .. byte(3)`` (uint8 or int8 expressions) as one int32 word for
    ``dot4_u8s8``, each read as uint8: an int8 byte counts + 128 (``signed``)."""
    def widened(r):
        value = byte(r)
        return cast("int32", cast("uint8", value) if signed else value)
    word = widened(0) | (widened(1) << 8) | (widened(2) << 16) | (widened(3) << 24)
    return word ^ const(int(SIGN_BITS), "int32") if signed else word


_COUNT = {2: "two", 4: "four"}


def _product(A: Tensor, words, columns, b_word, name: str, tag: str, rows: int = 4) -> Tensor:
    """``D[i, j] = sum_kw dot(A's word kw of row i, b_word(kw, j))`` over ``words`` words of ``rows``
    rows each (A of rows x words columns): ``dot4_u8s8`` over words of four bytes of a uint8 or int8 A,
    ``dot2_i16`` over pairs of A widened to int16 (``widened_to_int16``)."""
    if A.ndim != 2 or A.dtype not in (("int16",) if rows == 2 else ("uint8", "int8")):     # (pairs: A widened)
        raise ExprError(f"matmul_u8s8: A must be a 2-d uint8 or int8 tensor, got {A.dtype} of rank {A.ndim}")
    depth = A.shape[1]
    if not hasattr(depth, "value") or depth.value != rows * int(words.value):
        raise ExprError(f"matmul_u8s8: A has {depth} columns where B's {words} words of {_COUNT[rows]} rows need "
                        f"{rows * int(words.value)}; pad A's rows with zeros to a multiple of {rows}")
    a_signed = A.dtype == "int8"
    dot, word = (dot4_u8s8, _word) if rows == 4 else (dot2_i16, _pair)
    kw = reduce_axis((0, words), name="kw")
    return compute((A.shape[0], columns), lambda i, j: lw_sum(dot(word(A, i, kw, a_signed), b_word(kw, j)), axis=kw),
                   name=name, tag=tag)


def matmul_u8s8(A: Tensor, Bw: Tensor, name: str = "matmul_u8s8") -> Tensor:
    """``D[i, j] = sum_kw dot4_u8s8(A's word kw of row i, Bw[kw, j])`` for A [M, 4 Kw] (uint8; int8
    bytes count + 128) and B's words Bw [Kw, N] (``pack_words``)."""
    if Bw.ndim != 2 or Bw.dtype != "int32":
        raise ExprError(f"matmul_u8s8: B's words must be a 2-d int32 tensor, got {Bw.dtype} of rank {Bw.ndim}")
    return _product(A, Bw.shape[0], Bw.shape[1], lambda kw, j: Bw[kw, j], name, "matmul")


def matmul_u8s8_panels(A: Tensor, Bp: Tensor, columns: int, name: str = "matmul_u8s8") -> Tensor:
    """``matmul_u8s8`` with B's words in column panels ``Bp[ceil(N / nr), Kw, nr]`` (``pack_panels`` of
    ``pack_words``), packed once when the network is compiled: the CPU's register-blocked schedule."""
    if Bp.ndim != 3 or Bp.dtype != "int32":
        raise ExprError(f"matmul_u8s8_panels: B's panels must be a 3-d int32 tensor, got {Bp.dtype} of rank "
                        f"{Bp.ndim}")
    nr = int(Bp.shape[2].value)
    return _product(A, Bp.shape[1], int(columns), lambda kw, j: Bp[j // nr, kw, j % nr], name, "matmul_panels")


def int8_pairs(target) -> bool:
    """Whether int8 products for ``target`` run over int16 pairs (``matmul_u8s8_pair_panels``): an
    x86 CPU without a byte dot product (VNNI)."""
    return target.kind == "llvm" and target.arch == "x86_64" and \
        not {"avx512vnni", "avxvnni"} & target.enabled_features()


def pairs_of_words(words: np.ndarray) -> np.ndarray:
    """B's words of four int8 rows (``pack_words``, [Kw, N] int32, or panels [P, Kw, nr]) as words of
    two rows widened to int16 ([2 Kw, N], or [P, 2 Kw, nr]): word ``[kp, j]`` holds ``B[2 kp, j]`` in its
    low half and ``B[2 kp + 1, j]`` in its high half."""
    if words.dtype != np.int32:
        raise ExprError(f"pairs_of_words takes int32 words of four packed bytes, got {words.dtype}")
    rows = np.moveaxis(words.view(np.int8).reshape(words.shape + (4,)), -1, -2)      # [..., Kw, 4, N]
    halves = rows.astype(np.int16).reshape(words.shape[:-2] + (words.shape[-2] * 2, 2, words.shape[-1]))
    return np.ascontiguousarray(np.moveaxis(halves, -2, -1)).view(np.int32)[..., 0]


def _pair(A: Tensor, i, kp, a_signed: bool):
    """Bytes ``2 kp`` and ``2 kp + 1`` of A's row ``i``, each read as uint8 (an int8 byte + 128), as
    the two int16 halves of one int32: from A's copy widened to int16 (``widened_to_int16``), one
    32-bit load (LLVM joins the two), where the bytes took two loads, a shift and an or before each
    broadcast (2 x 6 instructions for every 2 x 2 ``pmaddwd`` of a 6-row tile as AVX2 code)."""
    def half(r):
        return cast("int32", A[i, 2 * kp + r]) & const(0xFFFF, "int32")
    return half(0) | (half(1) << 16)


def widened_to_int16(A: Tensor, name: str) -> Tensor:
    """A [M, K] uint8 (int8: each byte + 128) as int16, a copy of its own (tag ``int8.widen``,
    scheduled at the kernel's root as an elementwise op): read by ``_pair``."""
    signed = A.dtype == "int8"

    def widen(i, k):
        value = cast("int16", cast("uint8", A[i, k]))
        return value ^ const(0x80, "int16") if signed else value
    return compute(A.shape, widen, name=name + ".int16", tag="int8.widen")


@register_schedule("int8.widen", "llvm")
def schedule_widened(s, op, target):
    """The widened copy of A: rows in parallel (unless little), the row in vectors."""
    schedule_injective(s, op, target)


def matmul_u8s8_pair_panels(A: Tensor, Bp: Tensor, columns: int, name: str = "matmul_u8s8") -> Tensor:
    """``matmul_u8s8_panels`` over B's words of two rows widened to int16 (``pairs_of_words`` of the
    panels): ``D[i, j] = sum_kp dot2_i16(A's bytes 2 kp, 2 kp + 1 of row i, Bp[j // nr, kp, j % nr])``."""
    if Bp.ndim != 3 or Bp.dtype != "int32":
        raise ExprError(f"matmul_u8s8_pair_panels: B's panels must be a 3-d int32 tensor, got {Bp.dtype} of rank "
                        f"{Bp.ndim}")
    nr = int(Bp.shape[2].value)
    if A.ndim != 2 or A.dtype not in ("uint8", "int8"):
        raise ExprError(f"matmul_u8s8: A must be a 2-d uint8 or int8 tensor, got {A.dtype} of rank {A.ndim}")
    return _product(widened_to_int16(A, name), Bp.shape[1], int(columns), lambda kp, j: Bp[j // nr, kp, j % nr], name,
                    "matmul_panels", rows=2)
