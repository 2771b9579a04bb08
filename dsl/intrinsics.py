"""Math intrinsics and elementwise min/max."""
from __future__ import annotations

from ..errors import DTypeError
from . import dtypes
from .expr import Call, Const, Expr, as_expr, binary, cast, const, float_binary_call, select

FLOAT_ONLY = ("exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "floor", "ceil", "round",
              "pow", "fmod")


def _call(name: str, *args) -> Expr:
    args = tuple(as_expr(a) for a in args)
    dtype = args[0].dtype
    if name in FLOAT_ONLY and not dtypes.is_float(dtype):
        raise DTypeError(f"lw.{name} needs a float argument, got dtype {dtype}; cast it first")
    return Call(name, args, dtype)


def exp(x) -> Expr: return _call("exp", x)
def log(x) -> Expr: return _call("log", x)
def sqrt(x) -> Expr: return _call("sqrt", x)
def rsqrt(x) -> Expr: return _call("rsqrt", x)
def tanh(x) -> Expr: return _call("tanh", x)
def sigmoid(x) -> Expr: return _call("sigmoid", x)
def erf(x) -> Expr: return _call("erf", x)
def floor(x) -> Expr: return _call("floor", x)
def ceil(x) -> Expr: return _call("ceil", x)
def round(x) -> Expr:  # noqa: A001 - the intrinsic's name
    """Round half to even, as numpy does."""
    return _call("round", x)


def abs(x) -> Expr:  # noqa: A001
    x = as_expr(x)
    if x.dtype == dtypes.BOOL:
        raise DTypeError("lw.abs of a bool value")
    if isinstance(x, Const):
        return const(-x.value if x.value < 0 else x.value, x.dtype)
    return Call("abs", (x,), x.dtype)


def pow(x, y) -> Expr:  # noqa: A001
    """``x ** y`` of floats (what the ``**`` operator builds)."""
    return float_binary_call("pow", x, y, "cast them first")


def fmod(x, y) -> Expr:
    """C's fmod: ``x - n * y`` with ``n = trunc(x / y)`` computed exactly (the sign of ``x``)."""
    return float_binary_call("fmod", x, y, "use % for integers")


def dot4_u8s8(a, b) -> Expr:
    """The int32 sum of four byte products: byte r of ``a`` read as uint8 times byte r of ``b`` read
    as int8 (bytes little-endian, r = 0..3).  The inner step of an int8 matrix product over words
    of four packed bytes; on x86 with VNNI one ``vpdpbusd`` does 16 of them (its accumulator the
    other side of an ``+``), elsewhere the bytes are widened and multiplied."""
    a, b = as_expr(a), as_expr(b)
    if a.dtype != "int32" or b.dtype != "int32":
        raise DTypeError(f"lw.dot4_u8s8 takes two int32 words of four packed bytes, got {a.dtype} and {b.dtype}")
    return Call("dot4_u8s8", (a, b), "int32")


def dot2_i16(a, b) -> Expr:
    """The int32 sum of two int16 products: the low halves of ``a`` and ``b`` (each read as int16)
    multiplied, plus the high halves.  The inner step of an int8 matrix product on a CPU without a
    byte dot product, over words of two bytes widened to int16 (exact: no int16 sum of products);
    on x86 one ``pmaddwd`` does 4, 8 or 16 of them."""
    a, b = as_expr(a), as_expr(b)
    if a.dtype != "int32" or b.dtype != "int32":
        raise DTypeError(f"lw.dot2_i16 takes two int32 words of two packed int16, got {a.dtype} and {b.dtype}")
    return Call("dot2_i16", (a, b), "int32")


def elementwise_min(a, b) -> Expr:
    return binary("min", a, b)


def elementwise_max(a, b) -> Expr:
    return binary("max", a, b)


__all__ = ["exp", "log", "sqrt", "rsqrt", "tanh", "sigmoid", "erf", "floor", "ceil", "round",
           "abs", "pow", "fmod", "dot4_u8s8", "dot2_i16", "elementwise_min", "elementwise_max", "select", "cast"]
