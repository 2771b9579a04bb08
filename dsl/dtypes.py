"""Dtypes loopweave knows and the rules that combine them.

A dtype is a plain string (``"float32"``, ``"int64"``, ...), as in numpy.  Promotion is
explicit: two operands of one kind (float/float, int/int) promote to the wider one;
float mixed with int is an error unless one side is a Python literal, which adopts the
other operand's dtype.  Index arithmetic is int64.
"""
from __future__ import annotations

import numpy as np

from ..errors import DTypeError

FLOAT_DTYPES = ("float16", "float32", "float64")
INT_DTYPES = ("int8", "int16", "int32", "int64")
UINT_DTYPES = ("uint8", "uint16", "uint32", "uint64")
BOOL = "bool"
INDEX = "int64"
ALL_DTYPES = FLOAT_DTYPES + INT_DTYPES + UINT_DTYPES + (BOOL,)

_BITS = {"float16": 16, "float32": 32, "float64": 64, "int8": 8, "int16": 16, "int32": 32,
         "int64": 64, "uint8": 8, "uint16": 16, "uint32": 32, "uint64": 64, "bool": 1}


_KNOWN = frozenset(ALL_DTYPES)


#: names whose width numpy and C read differently (numpy: "float" is float64, "int" int64; loopweave's
#: default is float32): refused, with the explicit names to choose from
_AMBIGUOUS = {"float": "'float32' (loopweave's default) or 'float64'", "int": "'int32' or 'int64'",
              "uint": "'uint8', 'uint16', 'uint32' or 'uint64'"}


def normalize(dtype) -> str:
    """Return the canonical name of ``dtype`` (a string or numpy dtype), or raise DTypeError; the
    ambiguous ``"float"`` / ``"int"`` / ``"uint"`` (and Python's ``float`` and ``int``) are refused."""
    if dtype.__class__ is str and dtype in _KNOWN:
        return dtype  # the common case, on every constant built during lowering
    ambiguous = dtype.__name__ if dtype is float or dtype is int else dtype if isinstance(dtype, str) else None
    if ambiguous in _AMBIGUOUS:
        raise DTypeError(f"dtype {dtype!r} is ambiguous (numpy reads it as {np.dtype(ambiguous).name}, C as "
                         f"a narrower type); write {_AMBIGUOUS[ambiguous]}")
    try:
        name = np.dtype(dtype).name
    except (TypeError, ValueError) as exc:  # ValueError: an object whose .dtype numpy cannot read
        raise DTypeError(f"unknown dtype {dtype!r}; use one of {', '.join(ALL_DTYPES)}") from exc
    if name not in ALL_DTYPES:
        raise DTypeError(f"unsupported dtype {name!r}; use one of {', '.join(ALL_DTYPES)}")
    return name


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def is_int(dtype: str) -> bool:
    """True for signed and unsigned integers (not bool)."""
    return dtype in INT_DTYPES or dtype in UINT_DTYPES


def is_signed(dtype: str) -> bool:
    return dtype in INT_DTYPES


def bits(dtype: str) -> int:
    return _BITS[dtype]


def itemsize(dtype: str) -> int:
    return np.dtype(dtype).itemsize


def promote(a: str, b: str, what: str) -> str:
    """The dtype of a binary operation on ``a`` and ``b``; ``what`` names it for errors."""
    if a == b:
        return a
    if is_float(a) and is_float(b):
        return a if bits(a) >= bits(b) else b
    if is_int(a) and is_int(b):
        if is_signed(a) != is_signed(b):
            signed, unsigned = (a, b) if is_signed(a) else (b, a)
            return signed if bits(signed) > bits(unsigned) else "int64"
        return a if bits(a) >= bits(b) else b
    raise DTypeError(
        f"{what} mixes {a} and {b}; add an explicit lw.cast(...) on one side "
        f"(loopweave never mixes float, int and bool implicitly)")
