"""Bitwise and shift operators on integer expressions (TVM's ``bitwise_and`` ... ``shift_right``).

They are ``Call`` nodes, like the math intrinsics: every lowering pass already treats a
Call as an opaque pure function of its arguments, so only the code generators need to
know them (``NAMES``).  Integers only: bools have ``&``/``|``/``~`` as logic
(``logical_and`` ...), and floats have no bits to speak of, so any other dtype is a
DTypeError naming the operator.  Operands promote as arithmetic does (a Python int
adopts the other side's dtype).  The builders live in ``expr.py``, next to the
operators ``&``, ``|``, ``^``, ``~``, ``<<``, ``>>`` that use them; this module names them.

Shifts follow numpy and ONNX BitShift where C and LLVM leave the result undefined: an
amount outside ``[0, bits)`` gives 0, or -1 when a negative value is shifted right.  A
right shift is arithmetic on signed dtypes and logical on unsigned ones.
"""
from __future__ import annotations

from .expr import BITWISE_BINARY, BITWISE_UNARY, Expr, bitwise_binary, bitwise_not

NAMES = tuple(BITWISE_BINARY) + tuple(BITWISE_UNARY)


def bitwise_and(a, b) -> Expr:
    return bitwise_binary("bitwise_and", a, b)


def bitwise_or(a, b) -> Expr:
    return bitwise_binary("bitwise_or", a, b)


def bitwise_xor(a, b) -> Expr:
    return bitwise_binary("bitwise_xor", a, b)


def shift_left(a, b) -> Expr:
    """``a << b``; 0 where ``b`` is negative or at least the bit width."""
    return bitwise_binary("shift_left", a, b)


def shift_right(a, b) -> Expr:
    """``a >> b`` (arithmetic for signed dtypes); 0 or -1 (sign fill) where ``b`` is out of range."""
    return bitwise_binary("shift_right", a, b)


__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "shift_right"]
