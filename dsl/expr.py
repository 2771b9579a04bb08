"""Expression nodes: immutable, hashable, structurally comparable.

Every node is a frozen dataclass with slots.  ``Var`` is an identity object (two vars
named ``i`` are different variables); every other node compares structurally, so tests
can compare IR and caches can key on it.  ``==`` builds a ``Compare`` node, as in
TVM; using that node in a Python ``if`` (or as a dict key) asks the structural
question, so both the DSL and ordinary containers work.
"""
from __future__ import annotations

import itertools
import math
from dataclasses import dataclass
from typing import Any, Tuple

from ..errors import DTypeError, ExprError
from . import dtypes
from .expr_printer import OPERATOR_SYMBOL, expr_to_str

_BINARY_OPS = ("add", "sub", "mul", "div", "floordiv", "floormod", "min", "max")
_COMPARE_OPS = ("eq", "ne", "lt", "le", "gt", "ge")


class ExprOps:
    """Operator overloading shared by expressions and iteration variables."""

    __slots__ = ()

    def __add__(self, other): return binary("add", self, other)
    def __radd__(self, other): return binary("add", other, self)
    def __sub__(self, other): return binary("sub", self, other)
    def __rsub__(self, other): return binary("sub", other, self)
    def __mul__(self, other): return binary("mul", self, other)
    def __rmul__(self, other): return binary("mul", other, self)
    def __truediv__(self, other): return binary("div", self, other)
    def __rtruediv__(self, other): return binary("div", other, self)
    def __floordiv__(self, other): return binary("floordiv", self, other)
    def __rfloordiv__(self, other): return binary("floordiv", other, self)
    def __mod__(self, other): return binary("floormod", self, other)
    def __rmod__(self, other): return binary("floormod", other, self)
    def __neg__(self): return binary("sub", const(0, as_expr(self).dtype), self)
    def __lt__(self, other): return compare("lt", self, other)
    def __le__(self, other): return compare("le", self, other)
    def __gt__(self, other): return compare("gt", self, other)
    def __ge__(self, other): return compare("ge", self, other)
    def __eq__(self, other): return compare("eq", self, other)
    def __ne__(self, other): return compare("ne", self, other)
    def __and__(self, other): return _logic_or_bits("bitwise_and", logical_and, self, other)
    def __rand__(self, other): return _logic_or_bits("bitwise_and", logical_and, other, self)
    def __or__(self, other): return _logic_or_bits("bitwise_or", logical_or, self, other)
    def __ror__(self, other): return _logic_or_bits("bitwise_or", logical_or, other, self)
    def __xor__(self, other): return _logic_or_bits("bitwise_xor", logical_xor, self, other)
    def __rxor__(self, other): return _logic_or_bits("bitwise_xor", logical_xor, other, self)
    def __invert__(self): return logical_not(self) if _is_bool(self) else bitwise_not(self)
    def __lshift__(self, other): return bitwise_binary("shift_left", self, other)
    def __rlshift__(self, other): return bitwise_binary("shift_left", other, self)
    def __rshift__(self, other): return bitwise_binary("shift_right", self, other)
    def __rrshift__(self, other): return bitwise_binary("shift_right", other, self)
    def __pow__(self, other): return float_binary_call("pow", self, other, "cast them first")

    def astype(self, dtype) -> "Expr":
        """This value converted to ``dtype``: ``x.astype("int32")`` is ``lw.cast("int32", x)``, as in TVM."""
        return cast(dtype, self)

    def __bool__(self):
        raise ExprError(
            f"the symbolic expression {self} has no truth value; use lw.if_then_else / "
            f"lw.select for conditions, and &, |, ~ instead of and, or, not; Python's max(a, b) and "
            f"min(a, b) compare their arguments this way: use lw.max(a, b) / lw.min(a, b)")

    def __array_ufunc__(self, ufunc, method, *inputs, **kwargs):
        """numpy's functions on expressions (``numpy_ufuncs.py``): numpy scalars' operators work,
        ``np.exp`` and the like name loopweave's function."""
        from .numpy_ufuncs import apply_ufunc
        return apply_ufunc(ExprOps, ufunc, method, inputs, kwargs)

    __hash__ = object.__hash__


class Expr(ExprOps):
    """Base of all expression nodes; subclasses define ``dtype``."""

    __slots__ = ()
    _is_ir_node = True

    def __str__(self) -> str:
        return expr_to_str(self)

    def __repr__(self) -> str:
        return f"<{type(self).__name__} {self}>"

    def structural_key(self) -> tuple:
        """A hashable tuple equal for structurally equal nodes (Vars by identity)."""
        return (type(self).__name__,) + tuple(_key_of(getattr(self, f)) for f in self._fields())

    @classmethod
    def _fields(cls):
        return cls.__dataclass_fields__.keys()

    def same_as(self, other) -> bool:
        return isinstance(other, Expr) and structural_equal(self, other)


def _key_of(value):
    if isinstance(value, Var):
        return ("Var", id(value))
    if isinstance(value, Expr):
        return value.structural_key()
    if isinstance(value, tuple):
        return tuple(_key_of(v) for v in value)
    if hasattr(value, "structural_key"):
        return value.structural_key()
    return value


def structural_equal(a, b) -> bool:
    if a is b:
        return True
    if type(a) is not type(b):
        return False
    return _key_of(a) == _key_of(b)


def structural_hash(a) -> int:
    return hash(_key_of(a))


def _structural_node(cls):
    """Make ``cls`` a frozen slotted dataclass whose hash/bool are structural."""
    cls = dataclass(frozen=True, eq=False, slots=True, repr=False)(cls)
    cls.__hash__ = lambda self: structural_hash(self)
    return cls


_var_ids = itertools.count()


@dataclass(frozen=True, eq=False, slots=True, repr=False)
class Var(Expr):
    """A scalar variable: a symbolic size, a loop index or a let-bound name."""

    name: str
    dtype: str = dtypes.INDEX

    def __hash__(self):
        return id(self)

    def __bool__(self):
        return ExprOps.__bool__(self)


@_structural_node
class Const(Expr):
    value: Any
    dtype: str

    def __bool__(self):
        # `a == b` on two constants folds to a bool Const; containers (dict, `in`) then ask its truth
        if self.dtype == dtypes.BOOL:
            return bool(self.value)
        return ExprOps.__bool__(self)


@_structural_node
class Binary(Expr):
    op: str
    a: Expr
    b: Expr

    @property
    def dtype(self) -> str:
        return self.a.dtype


@_structural_node
class Compare(Expr):
    op: str
    a: Expr
    b: Expr
    dtype = dtypes.BOOL

    def __bool__(self):
        # Python's containers ask `a == b`; answer structurally, as TVM does.
        if self.op == "eq":
            return structural_equal(self.a, self.b)
        if self.op == "ne":
            return not structural_equal(self.a, self.b)
        return ExprOps.__bool__(self)


@_structural_node
class Logical(Expr):
    """``and`` / ``or`` of two bools, or ``not`` of one (``b`` is None)."""

    op: str
    a: Expr
    b: Any = None
    dtype = dtypes.BOOL


@_structural_node
class Select(Expr):
    condition: Expr
    true_value: Expr
    false_value: Expr

    @property
    def dtype(self) -> str:
        return self.true_value.dtype


@_structural_node
class Cast(Expr):
    dtype: str
    value: Expr


@_structural_node
class Call(Expr):
    """A pure intrinsic (``exp``, ``sqrt``, ...) applied to ``args``."""

    name: str
    args: Tuple[Expr, ...]
    dtype: str


@_structural_node
class Let(Expr):
    var: Var
    value: Expr
    body: Expr

    @property
    def dtype(self) -> str:
        return self.body.dtype


@_structural_node
class TensorLoad(Expr):
    """``tensor[indices]`` inside a compute definition."""

    tensor: Any
    indices: Tuple[Expr, ...]

    @property
    def dtype(self) -> str:
        return self.tensor.dtype


@_structural_node
class Reduce(Expr):
    """A commutative reduction of ``source`` over ``axis`` (tuple reductions share one)."""

    combiner: Any
    source: Tuple[Expr, ...]
    axis: Tuple[Any, ...]
    condition: Expr
    value_index: int

    @property
    def dtype(self) -> str:
        return self.source[self.value_index].dtype


@_structural_node
class CheckedIndex(Expr):
    """An index read from data, checked where it is used: ``value`` (int64) must lie in
    ``[0, extent)``, or in ``[-extent, extent)`` with ``wrap`` (a negative index counts from
    the end, as ONNX and numpy say; the node then evaluates to ``value + extent``).

    A bad index does not read memory: the kernel records the first one (``what`` says
    which tensor and axis it indexes) in the call's error slot and uses 0 instead, and the
    runtime raises ``ArgumentError`` after the call (on CUDA too: a device error slot).
    """

    value: Expr
    extent: Expr
    what: str
    wrap: bool = False
    dtype = dtypes.INDEX


# ----------------------------------------------------------------------------- builders

def const(value, dtype: str | None = None) -> Const:
    """A constant; without a dtype, ints are int64, floats float32, bools bool."""
    if isinstance(value, Const):
        return value if dtype is None else Const(value.value, dtypes.normalize(dtype))
    if dtype is None:
        if isinstance(value, bool):
            dtype = dtypes.BOOL
        elif isinstance(value, int):
            dtype = dtypes.INDEX
        elif isinstance(value, float):
            dtype = "float32"
        else:
            raise DTypeError(f"cannot make a constant from {value!r} of type {type(value).__name__}")
    dtype = dtypes.normalize(dtype)
    if dtypes.is_float(dtype):
        value = float(value)
    elif dtype == dtypes.BOOL:
        value = bool(value)
    else:
        if isinstance(value, float) and not value.is_integer():
            raise DTypeError(f"the literal {value!r} is not an integer but is used as {dtype}")
        value = int(value)
    return Const(value, dtype)


def as_expr(value, like: str | None = None) -> Expr:
    """Convert a Python number (adopting dtype ``like``) or an IterVar to an expression."""
    if isinstance(value, Expr):
        return value
    var = getattr(value, "var", None)
    if isinstance(var, Var):
        return var
    if isinstance(value, (bool, int, float)):
        if like is not None and not isinstance(value, bool):
            if isinstance(value, float) and not dtypes.is_float(like) and not value.is_integer():
                raise DTypeError(
                    f"the float literal {value!r} meets an expression of dtype {like}; "
                    f"cast the expression with lw.cast('float32', ...) first")
            if isinstance(value, float) and not dtypes.is_float(like):
                raise DTypeError(
                    f"the float literal {value!r} meets an expression of dtype {like}; "
                    f"write it as an int or cast the expression")
            if like == dtypes.BOOL:
                return const(value)
            return const(value, like)
        return const(value)
    if hasattr(value, "dtype") and hasattr(value, "item") and getattr(value, "ndim", 1) == 0:
        return const(value.item(), str(value.dtype))
    raise ExprError(f"cannot use {value!r} (of type {type(value).__name__}) in an expression")


def _operands(a, b, what: str):
    a_is_expr = isinstance(a, ExprOps)
    b_is_expr = isinstance(b, ExprOps)
    if a_is_expr and not b_is_expr:
        a = as_expr(a)
        b = as_expr(b, a.dtype)
    elif b_is_expr and not a_is_expr:
        b = as_expr(b)
        a = as_expr(a, b.dtype)
    else:
        a, b = as_expr(a), as_expr(b)
    dtype = dtypes.promote(a.dtype, b.dtype, what)
    if a.dtype != dtype:
        a = Cast(dtype, a)
    if b.dtype != dtype:
        b = Cast(dtype, b)
    return a, b


def binary(op: str, a, b) -> Expr:
    a, b = _operands(a, b, f"'{OPERATOR_SYMBOL.get(op, op)}'")
    if a.dtype == dtypes.BOOL and op not in ("min", "max"):
        raise DTypeError(f"arithmetic '{OPERATOR_SYMBOL.get(op, op)}' on bool values; cast them to an int dtype first")
    if op == "div" and not dtypes.is_float(a.dtype):
        raise DTypeError(
            f"'/' on integer dtype {a.dtype} is ambiguous; use '//' (floor division) "
            f"or cast to a float dtype")
    if op in ("floordiv", "floormod") and isinstance(b, Const) and b.value == 0:
        raise ExprError(f"division by the constant zero in {a} {OPERATOR_SYMBOL[op]} 0")
    folded = _fold_binary(op, a, b)
    return folded if folded is not None else Binary(op, a, b)


def compare(op: str, a, b) -> Expr:
    a, b = _operands(a, b, f"'{OPERATOR_SYMBOL[op]}'")
    if isinstance(a, Const) and isinstance(b, Const):
        return const(_PY_COMPARE[op](a.value, b.value), dtypes.BOOL)
    return Compare(op, a, b)


def _as_bool(value, what: str) -> Expr:
    value = as_expr(value)
    if value.dtype != dtypes.BOOL:
        raise DTypeError(f"{what} needs a bool operand, got {value} of dtype {value.dtype}")
    return value


def logical_and(a, b) -> Expr:
    a, b = _as_bool(a, "'&'"), _as_bool(b, "'&'")
    if isinstance(a, Const):
        return b if a.value else a
    if isinstance(b, Const):
        return a if b.value else b
    return Logical("and", a, b)


def logical_or(a, b) -> Expr:
    a, b = _as_bool(a, "'|'"), _as_bool(b, "'|'")
    if isinstance(a, Const):
        return a if a.value else b
    if isinstance(b, Const):
        return b if b.value else a
    return Logical("or", a, b)


def logical_not(a) -> Expr:
    a = _as_bool(a, "'~'")
    if isinstance(a, Const):
        return const(not a.value)
    return Logical("not", a)


def logical_xor(a, b) -> Expr:
    """``^`` of two bools: true where exactly one holds."""
    return compare("ne", _as_bool(a, "'^'"), _as_bool(b, "'^'"))


def _is_bool(value) -> bool:
    return isinstance(value, bool) or (isinstance(value, ExprOps) and as_expr(value).dtype == dtypes.BOOL)


def _logic_or_bits(name: str, logical, a, b) -> Expr:
    """``&``, ``|``, ``^`` are logic when a side is bool, else bitwise (integers only), as in numpy and TVM."""
    if _is_bool(a) or _is_bool(b):
        return logical(a, b)
    return bitwise_binary(name, a, b)


_PY_COMPARE = {
    "eq": lambda x, y: x == y, "ne": lambda x, y: x != y, "lt": lambda x, y: x < y,
    "le": lambda x, y: x <= y, "gt": lambda x, y: x > y, "ge": lambda x, y: x >= y,
}


def _wrap_int(value: int, dtype: str) -> int:
    """Wrap ``value`` to ``dtype``'s range, as native code would."""
    nbits = dtypes.bits(dtype)
    value &= (1 << nbits) - 1
    if dtypes.is_signed(dtype) and value >= 1 << (nbits - 1):
        value -= 1 << nbits
    return value


def _fold_binary(op: str, a: Expr, b: Expr):
    """Constant folding and the identities that keep index expressions small."""
    if isinstance(a, Const) and isinstance(b, Const):
        x, y = a.value, b.value
        if op in ("floordiv", "floormod", "div") and y == 0:
            return None
        result = {
            "add": lambda: x + y, "sub": lambda: x - y, "mul": lambda: x * y,
            "div": lambda: x / y, "floordiv": lambda: x // y, "floormod": lambda: x % y,
            "min": lambda: min(x, y), "max": lambda: max(x, y),
        }[op]()
        if dtypes.is_int(a.dtype):
            result = _wrap_int(int(result), a.dtype)
        elif dtypes.is_float(a.dtype) and isinstance(result, float) and math.isnan(result):
            return None
        return Const(result, a.dtype)
    is_int = dtypes.is_int(a.dtype)
    if op == "add":
        if _is_const(b, 0):
            return a
        if _is_const(a, 0):
            return b
    elif op == "sub":
        if _is_const(b, 0):
            return a
        if is_int and structural_equal(a, b):
            return Const(0, a.dtype)
    elif op == "mul":
        if _is_const(b, 1):
            return a
        if _is_const(a, 1):
            return b
        if is_int and (_is_const(a, 0) or _is_const(b, 0)):
            return Const(0, a.dtype)
    elif op in ("floordiv", "div"):
        if _is_const(b, 1):
            return a
    elif op == "floormod":
        if is_int and _is_const(b, 1):
            return Const(0, a.dtype)
    return None


def _is_const(e: Expr, value) -> bool:
    return isinstance(e, Const) and e.value == value


def cast(dtype, value) -> Expr:
    """Convert ``value`` to ``dtype`` (float->int truncates toward zero, as in C).

    The dtype comes first, as in TVM's ``tir.Cast``; TOPI's ``topi.cast(x, dtype)`` order
    is caught with the call to write instead (``x.astype(dtype)`` reads that way round).
    """
    if isinstance(dtype, ExprOps) or (isinstance(value, str) and not isinstance(dtype, str)):
        x = str(as_expr(dtype)) if isinstance(dtype, ExprOps) else repr(dtype)
        fix = f"lw.cast({value!r}, {x})"
        if isinstance(dtype, ExprOps):
            operand = f"({x})" if isinstance(as_expr(dtype), (Binary, Compare, Logical)) else x
            fix += f" or {operand}.astype({value!r})"
        raise DTypeError(f"lw.cast takes the dtype first: write {fix}, not lw.cast({x}, {value!r})")
    dtype = dtypes.normalize(dtype)
    value = as_expr(value)
    if value.dtype == dtype:
        return value
    if isinstance(value, Const):
        v = value.value
        if dtype == dtypes.BOOL:
            return Const(bool(v), dtype)
        if dtypes.is_float(dtype):
            return Const(float(v), dtype)
        if dtypes.is_float(value.dtype) and (math.isnan(v) or math.isinf(v)):
            return Cast(dtype, value)
        return Const(_wrap_int(int(v), dtype), dtype)
    return Cast(dtype, value)


def select(condition, true_value, false_value) -> Expr:
    """``true_value`` where ``condition`` holds, else ``false_value`` (both evaluated)."""
    condition = _as_bool(condition, "select")
    t, f = _operands(true_value, false_value, "select")
    if isinstance(condition, Const):
        return t if condition.value else f
    return Select(condition, t, f)


def if_then_else(condition, true_value, false_value) -> Expr:
    """Same as :func:`select`; the name TVM users know."""
    return select(condition, true_value, false_value)


def var(name: str = "v", dtype: str = dtypes.INDEX) -> Var:
    """A symbolic scalar, e.g. a size: ``n = lw.var("n")``."""
    if not isinstance(name, str) or not name.isidentifier():
        raise ExprError(f"a var name must be an identifier, got {name!r}")
    return Var(name, dtypes.normalize(dtype))


# ----------------------------------------------------------------------------- calls behind operators
# ``**`` and the bit operators build intrinsic Calls; they are defined here, below the
# operators that use them, and ``intrinsics.py`` / ``bitwise.py`` name them for users.

def float_binary_call(name: str, x, y, hint: str) -> Expr:
    """``Call(name, (x, y))`` of two float operands (``pow``, ``fmod``); ``hint`` says what to do otherwise."""
    x, y = _operands(x, y, f"lw.{name}")
    if not dtypes.is_float(x.dtype):
        raise DTypeError(f"lw.{name} needs float arguments, got {x.dtype}; {hint}")
    return Call(name, (x, y), x.dtype)


BITWISE_BINARY = {"bitwise_and": "&", "bitwise_or": "|", "bitwise_xor": "^", "shift_left": "<<", "shift_right": ">>"}
BITWISE_UNARY = {"bitwise_not": "~"}


def _require_int(name: str, dtype: str) -> None:
    if not dtypes.is_int(dtype):
        symbol = BITWISE_BINARY.get(name) or BITWISE_UNARY[name]
        hint = "use a bool tensor's logic ops (&, |, ~ on bools) instead" if dtype == dtypes.BOOL \
            else "cast to an integer dtype first"
        raise DTypeError(f"lw.{name} ('{symbol}') needs integer operands, got dtype {dtype}; {hint}")


def _fold_bits(name: str, x: int, y: int, dtype: str) -> int:
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


def bitwise_binary(name: str, a, b) -> Expr:
    """One of the ``BITWISE_BINARY`` operations on two integer operands (constants fold as numpy does)."""
    a, b = _operands(a, b, f"lw.{name} ('{BITWISE_BINARY[name]}')")
    _require_int(name, a.dtype)
    if isinstance(a, Const) and isinstance(b, Const):
        return Const(_fold_bits(name, a.value, b.value, a.dtype), a.dtype)
    return Call(name, (a, b), a.dtype)


def bitwise_not(a) -> Expr:
    """``~a`` of an integer (all bits flipped)."""
    a = as_expr(a)
    _require_int("bitwise_not", a.dtype)
    if isinstance(a, Const):
        return Const(_wrap_int(~a.value, a.dtype), a.dtype)
    return Call("bitwise_not", (a,), a.dtype)


def checked_index(value, extent, what: str, wrap: bool = False) -> Expr:
    """``value`` as an index into an axis of ``extent`` elements, checked at run time (see
    :class:`CheckedIndex`); ``what`` names the tensor and axis for the error message."""
    value = as_expr(value)
    if not dtypes.is_int(value.dtype):
        raise DTypeError(f"an index checked against {what} must be an integer, got dtype {value.dtype}")
    if value.dtype != dtypes.INDEX:
        value = cast(dtypes.INDEX, value)
    return CheckedIndex(value, as_expr(extent, dtypes.INDEX), str(what), bool(wrap))
