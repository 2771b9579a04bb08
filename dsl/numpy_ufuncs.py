"""numpy functions applied to expressions (``np.exp(A[i])``, ``np.float32(0.5) * A[i]``).

numpy hands such a call to ``ExprOps.__array_ufunc__``, which calls ``apply_ufunc``: the arithmetic,
comparison and bitwise ufuncs behind numpy scalars' operators go to the expression's own operators
(a numpy scalar is a constant of its dtype, as anywhere in an expression), so ``np.float32(0.5) * A[i]``
is ``0.5 * A[i]``; any other ufunc, or a numpy array among the operands, is an ``ExprError`` naming
what to write instead (``np.exp`` -> ``lw.exp``), where numpy would fail with "loop of ufunc does not
support argument 0".
"""
from __future__ import annotations

import numpy as np

from ..errors import ExprError

#: ufuncs that stand for Python operators (what ``np.float32(2) * x`` calls): the expression's
#: method when it is the left operand, the reflected one when it is the right
OPERATORS = {
    "add": ("__add__", "__radd__"), "subtract": ("__sub__", "__rsub__"), "multiply": ("__mul__", "__rmul__"),
    "true_divide": ("__truediv__", "__rtruediv__"), "floor_divide": ("__floordiv__", "__rfloordiv__"),
    "remainder": ("__mod__", "__rmod__"), "less": ("__lt__", "__gt__"), "less_equal": ("__le__", "__ge__"),
    "greater": ("__gt__", "__lt__"), "greater_equal": ("__ge__", "__le__"), "equal": ("__eq__", "__eq__"),
    "not_equal": ("__ne__", "__ne__"), "bitwise_and": ("__and__", "__rand__"), "bitwise_or": ("__or__", "__ror__"),
    "bitwise_xor": ("__xor__", "__rxor__"), "left_shift": ("__lshift__", "__rlshift__"),
    "right_shift": ("__rshift__", "__rrshift__"), "negative": ("__neg__", None), "invert": ("__invert__", None),
}

#: loopweave's function for a numpy ufunc a compute definition might reach for
LOOPWEAVE_FUNCTION = {
    "exp": "lw.exp(x)", "log": "lw.log(x)", "sqrt": "lw.sqrt(x)", "tanh": "lw.tanh(x)", "absolute": "lw.abs(x)",
    "fabs": "lw.abs(x)", "floor": "lw.floor(x)", "ceil": "lw.ceil(x)", "rint": "lw.round(x)",
    "power": "lw.pow(x, y)", "float_power": "lw.pow(x, y)", "maximum": "lw.max(a, b)", "fmax": "lw.max(a, b)",
    "minimum": "lw.min(a, b)", "fmin": "lw.min(a, b)", "fmod": "lw.fmod(a, b)",
}


def apply_ufunc(expr_type, ufunc, method: str, inputs, kwargs):
    """``ufunc(*inputs)`` where an input is an expression (an ``expr_type``): the operator's expression
    (a numpy scalar keeps its dtype, as ``as_expr`` reads it), or an ExprError."""
    name = ufunc.__name__
    if any(isinstance(x, np.ndarray) and x.ndim > 0 for x in inputs):
        raise ExprError(f"np.{name} of a numpy array and a loopweave expression: inside lw.compute, index "
                        f"tensors (make the array an lw.placeholder and pass it to the kernel) or use Python "
                        f"numbers")
    methods = OPERATORS.get(name) if method == "__call__" and not kwargs else None
    if methods is not None and len(inputs) == 1:
        return getattr(inputs[0], methods[0])()
    if methods is not None and len(inputs) == 2:
        left, right = inputs
        if isinstance(left, expr_type):
            return getattr(left, methods[0])(right)
        return getattr(right, methods[1])(left)
    instead = LOOPWEAVE_FUNCTION.get(name)
    hint = (f"use {instead}" if instead else
            "use loopweave's functions (lw.exp, lw.log, lw.sqrt, lw.tanh, lw.abs, lw.max(a, b), lw.min(a, b), "
            "lw.select, ...)")
    raise ExprError(f"np.{name} does not work on loopweave expressions (they are symbolic, not numbers); {hint}")
