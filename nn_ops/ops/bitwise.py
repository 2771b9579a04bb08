"""Bitwise ops and shifts on integer tensors, with numpy broadcasting (ONNX BitwiseAnd/Or/Xor/Not, BitShift).

Each is one expression per element (``lw.bitwise_and`` ... ``lw.shift_right``), tagged
``"broadcast"`` (or ``"elemwise"`` for ``bitwise_not``): inlined into consumers or given
the injective schedule.  Shifts give numpy's answer for any amount (0, or the sign fill
of a negative value shifted right, outside [0, bits)), so bad data never reads as
undefined behaviour.
"""
from __future__ import annotations

from ...dsl import dtypes
from ...dsl.bitwise import bitwise_and, bitwise_not, bitwise_or, bitwise_xor, shift_left, shift_right
from ...dsl.tensor import Tensor
from ...errors import ExprError
from .elementwise import unary
from .logic import broadcast_map

BINARY = {"bitwise_and": bitwise_and, "bitwise_or": bitwise_or, "bitwise_xor": bitwise_xor,
          "shift_left": shift_left, "shift_right": shift_right}


def _check_int(kind: str, *tensors: Tensor) -> None:
    for t in tensors:
        if not dtypes.is_int(t.dtype):
            raise ExprError(f"{kind} needs integer tensors, got {t.name} of dtype {t.dtype}")
    if len({t.dtype for t in tensors}) > 1:
        raise ExprError(f"{kind} of {' and '.join(t.dtype for t in tensors)} tensors; cast one side first")


def bitwise_binary(kind: str, a: Tensor, b: Tensor) -> Tensor:
    """``kind`` (a key of :data:`BINARY`) of two integer tensors of one dtype, broadcast."""
    if kind not in BINARY:
        raise ExprError(f"unknown bitwise op {kind!r}; one of {', '.join(BINARY)}")
    _check_int(kind, a, b)
    return broadcast_map(BINARY[kind], [a, b], kind)


def bitwise_not_(x: Tensor) -> Tensor:
    _check_int("bitwise_not", x)
    return unary(bitwise_not, x, "bitwise_not")
