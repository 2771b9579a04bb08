"""Generic traversal of IR nodes (expressions and, later, statements).

``Mutator.visit`` rebuilds a node only when a child changed and returns the same
object otherwise, so passes detect fixpoints with ``is``.  Subclasses override
``visit_<ClassName>`` for the nodes they care about.
"""
from __future__ import annotations

import dataclasses
from typing import Callable, Dict

from .expr import Expr, Reduce, TensorLoad, Var


# (whether a value is an IR node is asked inline, ``getattr(value.__class__, "_is_ir_node", False)``:
# millions of times a compile, where a function call per field cost more than the test itself)
_FIELDS: Dict[type, tuple] = {}         # node class -> its dataclass field names (asked millions of times)


def _fields(cls) -> tuple:
    names = _FIELDS.get(cls)
    if names is None:
        names = _FIELDS[cls] = tuple(cls.__dataclass_fields__)
    return names


def children(node):
    """The child nodes of ``node`` in field order (tuples flattened)."""
    out = []
    for f in _fields(node.__class__):
        value = getattr(node, f)
        if getattr(value.__class__, "_is_ir_node", False):
            out.append(value)
        elif isinstance(value, tuple):
            out.extend(v for v in value if getattr(v.__class__, "_is_ir_node", False))
    return out


_MISSING = object()
_METHODS: Dict[tuple, object] = {}      # (visitor class, node class) -> its visit_<Node> function or None


class Mutator:
    def visit(self, node):
        key = (self.__class__, node.__class__)
        method = _METHODS.get(key, _MISSING)
        if method is _MISSING:
            method = _METHODS[key] = getattr(self.__class__, "visit_" + node.__class__.__name__, None)
        if method is not None:
            return method(self, node)
        return self.generic_visit(node)

    def generic_visit(self, node):
        changes = None
        for f in _fields(node.__class__):
            value = getattr(node, f)
            if getattr(value.__class__, "_is_ir_node", False):
                new = self.visit(value)
                if new is not value:
                    if changes is None:
                        changes = {}
                    changes[f] = new
            elif isinstance(value, tuple) and any(getattr(v.__class__, "_is_ir_node", False) for v in value):
                new = tuple(self.visit(v) if getattr(v.__class__, "_is_ir_node", False) else v for v in value)
                if any(a is not b for a, b in zip(new, value)):
                    if changes is None:
                        changes = {}
                    changes[f] = new
        if changes is None:
            return node
        return dataclasses.replace(node, **changes)


def post_order_visit(node, callback: Callable) -> None:
    """Call ``callback`` on every node below and including ``node``, children first."""
    stack = [(node, False)]
    while stack:
        current, expanded = stack.pop()
        if expanded:
            callback(current)
            continue
        stack.append((current, True))
        for child in reversed(children(current)):
            stack.append((child, False))


class _Substituter(Mutator):
    def __init__(self, mapping: Dict[Var, Expr]):
        self.mapping = mapping

    def visit_Var(self, node):
        return self.mapping.get(node, node)


def substitute(node, mapping: Dict[Var, Expr]):
    """Replace variables by expressions (by identity of the Var)."""
    if not mapping:
        return node
    return _Substituter(mapping).visit(node)


def collect_vars(node) -> list:
    found = {}
    post_order_visit(node, lambda n: found.setdefault(id(n), n) if isinstance(n, Var) else None)
    return list(found.values())


def uses_var(node, var: Var) -> bool:
    return any(v is var for v in collect_vars(node))


def collect_tensor_loads(node) -> list:
    """The tensors read by ``node``, in first-use order, each once."""
    found = []

    def record(n):
        if isinstance(n, TensorLoad) and all(n.tensor is not t for t in found):
            found.append(n.tensor)
    post_order_visit(node, record)
    return found


def contains_reduce(node) -> bool:
    hit = []
    post_order_visit(node, lambda n: hit.append(1) if isinstance(n, Reduce) else None)
    return bool(hit)
