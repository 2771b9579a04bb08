"""Bitwise and shift operators on integer expressions (TVM's ``bitwise_and`` ... ``shift_right``).

They are ``Call`` nodes, like the math intrinsics: every lowering pass already treats a
Call as an opaque pure function of its arguments, so only the code generators need to
know them.  Integers only: bools have ``&``/``|``/``~`` as logic (``logical_and`` ...),
and floats have no bits to speak of, so any other dtype is a DTypeError naming the
operator.  Operands promote as arithmetic does (a Python int adopts the other side's dtype).

Shifts follow numpy and ONNX BitShift where C and LLVM leave the result undefined: an
amount outside ``[0, bits)`` gives 0, or -1 when a negative value is shifted right.  A
right shift is arithmetic on signed dtypes and logical on unsigned ones.
"""
from __future__ import annotations

from ..errors import DTypeError
from . import dtypes
from .expr import Call, Const, Expr, _operands, _wrap_int, as_expr

BINARY = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<", "shift_right": ">>"}
UNARY = {"bitwise_not": "~"}
NAMES = tuple(BINARY) + tuple(UNARY)


def _require_int(name: str, dtype: str) -> None:
    if not dtypes.is_int(dtype):
        symbol = BINARY.get(name) or UNARY[name]
        hint = "use a bool tensor's logic ops (&, |, ~ on bools) instead" if dtype == dtypes.BOOL \
            else "cast to an integer dtype first"
        raise DTypeError(f"lw.{name} ('{symbol}') needs integer operands, got dtype {dtype}; {hint}")


def _fold(name: str, x: int, y: int, dtype: str) -> int:
    """What numpy computes for two constants (the result wrapped to ``dtype``)."""
    x, y = _wrap_int(x, dtype), _wrap_int(y, dtype)
    if name == "bitwise_and":
        return x & y
    if name == "bitwise_or":
        return x | y
    if name == "bitwise_xor":
        return _wrap_int(x ^ y, dtype)
    if not 0 <= y < dtypes.bits(dtype):
        return -1 if name == "shift_right" and x < 0 else 0
    return _wrap_int(x << y, dtype) if name == "shift_left" else x >> y


def _binary(name: str, a, b) -> Expr:
    a, b = _operands(a, b, f"lw.{name} ('{BINARY[name]}')")
    _require_int(name, a.dtype)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(_fold(name, a.value, b.value, a.dtype), a.dtype)
    return Call(name, (a, b), a.dtype)


def bitwise_and(a, b) -> Expr:
    return _binary("bitwise_and", a, b)


def bitwise_or(a, b) -> Expr:
    return _binary("bitwise_or", a, b)


def bitwise_xor(a, b) -> Expr:
    return _binary("bitwise_xor", a, b)


def shift_left(a, b) -> Expr:
    """``a << b``; 0 where ``b`` is negative or at least the bit width."""
    return _binary("shift_left", a, b)


def shift_right(a, b) -> Expr:
    """``a >> b`` (arithmetic for signed dtypes); 0 or -1 (sign fill) where ``b`` is out of range."""
    return _binary("shift_right", a, b)


def bitwise_not(a) -> Expr:
    a = as_expr(a)
    _require_int("bitwise_not", a.dtype)
    if isinstance(a, Const):
        return Const(_wrap_int(~a.value, a.dtype), a.dtype)
    return Call("bitwise_not", (a,), a.dtype)


__all__ = ["bitwise_and", "bitwise_or", "bitwise_xor", "bitwise_not", "shift_left", "shift_right"]
