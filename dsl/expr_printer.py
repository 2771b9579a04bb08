"""The text form of expressions: ``str(expr)``, and the index expressions inside printed loop IR.

It reads like Python: ``A[i, k] * B[k, j]``, ``select(i < n, x, 0.0)``, ``float32(i)``,
parenthesised only where precedence needs it.  Nodes are told apart by class name,
so this module imports no node classes: ``dsl/expr.py`` defines ``Expr.__str__`` with
it, and the loop IR's vector and buffer expressions (``BufferLoad``, ``Ramp``,
``Broadcast``) print through the same function.
"""
from __future__ import annotations

from typing import Dict

# the operator each Binary/Compare op is written with (also used in the DSL's error messages)
OPERATOR_SYMBOL = {"add": "+", "sub": "-", "mul": "*", "div": "/", "floordiv": "//", "floormod": "%",
                   "eq": "==", "ne": "!=", "lt": "<", "le": "<=", "gt": ">", "ge": ">="}
_PREC = {"or": 1, "and": 2, "not": 3, "cmp": 4, "add": 5, "sub": 5, "mul": 6, "div": 6, "floordiv": 6,
         "floormod": 6}


def _prec(e) -> int:
    kind = type(e).__name__
    if kind == "Binary":
        return _PREC.get(e.op, 10)
    if kind == "Compare":
        return _PREC["cmp"]
    if kind == "Logical":
        return _PREC[e.op]
    return 10


def _const_to_str(e) -> str:
    if e.dtype == "bool":
        return str(bool(e.value))
    if e.dtype == "int64":
        return str(e.value)
    if e.dtype == "float32":
        return repr(float(e.value))
    return f"{e.dtype}({e.value!r})"


def expr_to_str(e, names: Dict[int, str] | None = None) -> str:
    """``e`` as text; ``names`` renames variables by ``id`` (to tell apart distinct vars named alike)."""
    def s(x):
        return expr_to_str(x, names)

    def p(x, min_prec):
        return f"({s(x)})" if _prec(x) < min_prec else s(x)

    kind = type(e).__name__
    if kind == "Var":
        return names.get(id(e), e.name) if names else e.name
    if kind == "Const":
        return _const_to_str(e)
    if kind == "Binary":
        if e.op in ("min", "max"):
            return f"{e.op}({s(e.a)}, {s(e.b)})"
        prec = _PREC[e.op]
        right = prec + (0 if e.op in ("add", "mul") else 1)
        return f"{p(e.a, prec)} {OPERATOR_SYMBOL[e.op]} {p(e.b, right)}"
    if kind == "Compare":
        return f"{p(e.a, 5)} {OPERATOR_SYMBOL[e.op]} {p(e.b, 5)}"
    if kind == "Logical":
        if e.op == "not":
            return f"not {p(e.a, 3)}"
        prec = _PREC[e.op]
        return f"{p(e.a, prec)} {e.op} {p(e.b, prec + 1)}"
    if kind == "Select":
        return f"select({s(e.condition)}, {s(e.true_value)}, {s(e.false_value)})"
    if kind == "Cast":
        return f"{e.dtype}({s(e.value)})"
    if kind == "Call":
        return f"{e.name}({', '.join(s(a) for a in e.args)})"
    if kind == "Let":
        return f"(let {s(e.var)} = {s(e.value)} in {s(e.body)})"
    if kind == "TensorLoad":
        return f"{e.tensor.name}[{', '.join(s(i) for i in e.indices)}]"
    if kind == "Reduce":
        axes = ", ".join(iv.name for iv in e.axis)
        src = ", ".join(s(x) for x in e.source)
        src = src if len(e.source) == 1 else f"({src})"
        where = "" if type(e.condition).__name__ == "Const" else f", where={s(e.condition)}"
        part = "" if len(e.source) == 1 else f"[{e.value_index}]"
        return f"{e.combiner.name}({src}, axis=[{axes}]{where}){part}"
    if kind == "BufferLoad":
        return f"{e.buffer.name}[{', '.join(s(i) for i in e.indices)}]"
    if kind == "CheckedIndex":
        return f"checked({s(e.value)}, {'-' + s(e.extent) + ', ' if e.wrap else ''}{s(e.extent)})"
    if kind == "Ramp":
        return f"ramp({s(e.base)}, {s(e.stride)}, {e.lanes})"
    if kind == "Broadcast":
        return f"x{e.lanes}({s(e.value)})"
    return f"<{kind}>"
