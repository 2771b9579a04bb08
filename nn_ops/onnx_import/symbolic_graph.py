"""``symbolic_graph(dynamic_graph)``: one Graph whose shapes and size attributes are sympy sizes.

The converters compute shapes and shape-valued attributes (a reshape's target, a flattening's
rows) with Python ints.  Rather than a second, symbolic copy of every converter, the model is
imported statically at three probe bindings and every size of the result is solved for: each
symbol is a distinct prime at the first two, so a size that is ``c * batch**i * seq**j`` is found
exactly from them (the ratio of its two values fixes the exponents, by unique factorisation), and
checked at the third, of even sizes (what follows a size's parity, odd at both primes, shows
there).  Values the symbolic shape inference names (``symbolic_shapes.py``) keep its
expressions, which also cover sizes that are not such products (``seq + 1``, a convolved
``floor((H - 1)/2) + 1``); the importer's own values (a decomposed batch norm's) take such an
expression where it has their sizes at every probe.  A graph whose run-time checks refuse the
probes' sizes (a deep CNN's last pool) is probed at larger ones.  What the probes
cannot explain is refused, naming the node: a graph whose structure changes with the sizes, a
constant computed from them, a size that is no product of the symbols.
"""
from __future__ import annotations

from fractions import Fraction
from itertools import product as cartesian
from typing import Dict, List, Sequence

import numpy as np
import sympy

from ...errors import OnnxImportError
from ..network import symbolic as S
from ..network.graph import Graph

#: each symbol's value at each probe: distinct primes at the first two, even sizes at the third; all
#: larger than the sizes ops specialise (a 3x3 window, one token), small enough for the memory
#: limit's import-time checks
PROBES = ((17, 19, 23, 29, 31), (37, 41, 43, 47, 53), (24, 32, 40, 48, 56))
#: the probes tried in turn where a graph's run-time checks refuse ``PROBES``, alike in kind (a
#: SqueezeNet's last pool needs images of 67 pixels or more, an Inception-v3's of 75 or more)
LARGE_PROBES = (((67, 71, 73, 79, 83), (89, 97, 101, 103, 107), (64, 72, 80, 88, 96)),
                ((131, 137, 139, 149, 151), (157, 163, 167, 173, 179), (128, 136, 144, 152, 160)))
#: the highest power of one symbol a size may hold (``seq * seq`` of attention scores)
MAX_POWER = 3


def symbolic_graph(dynamic) -> Graph:
    """``dynamic`` (a DynamicGraph without shape inputs) as one Graph with symbolic sizes."""
    if dynamic.value_inputs:
        raise OnnxImportError(f"{dynamic.name!r}: shape inputs ({', '.join(dynamic.value_inputs)}) change the "
                              f"graph's structure with their values; it has no one symbolic graph")
    symbols = list(dynamic.signature.symbols)
    if len(symbols) > len(PROBES[0]):
        raise OnnxImportError(f"{dynamic.name!r} has {len(symbols)} symbolic sizes; the symbolic graph solves for "
                              f"at most {len(PROBES[0])}")
    for probes in (PROBES,) + LARGE_PROBES:
        bindings = [dict(zip(symbols, primes)) for primes in probes]
        refused = [(check, b) for b in bindings for check in dynamic.signature.checks if not check.holds(b)]
        if not refused:
            break
    else:
        check, binding = refused[0]
        raise OnnxImportError(f"{dynamic.name!r}: its run-time check {check.message!r} refuses the probe "
                              f"sizes {binding}, so its symbolic graph cannot be solved for")
    graphs = [_import_at(dynamic, b) for b in bindings]
    return _Solver(dynamic, symbols, bindings, graphs).graph()


def _import_at(dynamic, binding: Dict[str, int]) -> Graph:
    shapes = {n: tuple(binding[str(d)] if not S.is_static(d) else int(d) for d in shape)
              for n, shape, _ in dynamic.signature.inputs}
    return dynamic.specialize(shapes, {})


class _Solver:
    def __init__(self, dynamic, symbols: List[str], bindings: List[Dict[str, int]], graphs: List[Graph]):
        self.dynamic, self.symbols, self.bindings, self.graphs = dynamic, symbols, bindings, graphs
        self.known = dynamic.shapes.shapes        # the symbolic shape inference's sizes, by ONNX value name
        self.named = self._named_sizes()
        self.named_shapes = self._named_shapes()

    def graph(self) -> Graph:
        first, others = self.graphs[0], self.graphs[1:]
        out = Graph(first.name)
        out.inputs, out.outputs = list(first.inputs), list(first.outputs)
        for g in others:
            if g.inputs != first.inputs or g.outputs != first.outputs or len(g.nodes) != len(first.nodes):
                raise self.refuse(None, "its nodes differ from one size to another")
        read = {i for n in first.nodes for i in n.inputs} | set(first.outputs)
        for name, array in first.initializers.items():
            if name not in read:        # sizes computed at import for the converters (a Shape chain)
                continue
            for g in others:
                other = g.initializers.get(name)
                if other is None or other.shape != array.shape or other.dtype != array.dtype or \
                        not np.array_equal(other, array, equal_nan=True):
                    raise self.refuse(None, f"the constant {name!r} is computed from the sizes")
            out.initializers[name] = array
        for name, value in first.values.items():
            if name in first.initializers and name not in out.initializers:
                continue
            if any(name not in g.values or g.values[name].dtype != value.dtype for g in others):
                raise self.refuse(None, f"the value {name!r} differs from one size to another")
            shapes = [g.values[name].shape for g in self.graphs]
            out.values[name] = type(value)(name, self.shape(name, shapes), value.dtype)
        for k, node in enumerate(first.nodes):
            peers = [g.nodes[k] for g in others]
            if any(p.op_type != node.op_type or p.inputs != node.inputs or p.outputs != node.outputs or
                   set(p.attrs) != set(node.attrs) for p in peers):
                raise self.refuse(node, "the graph's structure changes with the sizes here")
            attrs = {a: self.attr(node, a, [node.attrs[a]] + [p.attrs[a] for p in peers]) for a in node.attrs}
            out.add_node(node.op_type, node.inputs, node.outputs, attrs, node.name)
        return out

    def refuse(self, node, why: str) -> OnnxImportError:
        where = f"node {node.name!r} ({node.op_type}): " if node is not None else ""
        return OnnxImportError(f"{self.dynamic.name!r} has no symbolic graph: {where}{why}; "
                               f"lw.compile(graph) without pipeline='graph' compiles it")

    def shape(self, name: str, shapes: Sequence[tuple]) -> tuple:
        """The value's shape: ints where static (as the static passes expect), sympy sizes elsewhere."""
        if len({len(s) for s in shapes}) != 1:
            raise self.refuse(None, f"the rank of {name!r} changes with the sizes")
        known = self.known.get(name)
        if known is not None and len(known) == len(shapes[0]) and all(
                tuple(int(S.evaluate(d, b)) for d in known) == tuple(s) for b, s in zip(self.bindings, shapes)):
            sizes = tuple(S.dim(d) for d in known)
        elif self.named_shapes.get(tuple(tuple(s) for s in shapes)) is not None:
            sizes = self.named_shapes[tuple(tuple(s) for s in shapes)]
        else:
            sizes = tuple(self.size([s[k] for s in shapes], f"dimension {k} of {name!r}")
                          for k in range(len(shapes[0])))
        return tuple(int(d) if S.is_static(d) else d for d in sizes)

    def attr(self, node, name: str, values: list):
        """The attribute's value with each int that changes with the sizes as a sympy size."""
        first = values[0]
        if isinstance(first, bool) or first is None or isinstance(first, (str, float)):
            if any(v != first for v in values[1:]):
                raise self.refuse(node, f"attribute {name!r} changes with the sizes")
            return first
        if isinstance(first, (int, np.integer)):
            if all(int(v) == int(first) for v in values[1:]):
                return first
            return self.size([int(v) for v in values], f"attribute {name!r}", node)
        if isinstance(first, (tuple, list)):
            if any(not isinstance(v, (tuple, list)) or len(v) != len(first) for v in values[1:]):
                raise self.refuse(node, f"attribute {name!r} changes length with the sizes")
            items = [self.attr(node, name, [v[k] for v in values]) for k in range(len(first))]
            return type(first)(items)
        if isinstance(first, np.ndarray):
            if any(not isinstance(v, np.ndarray) or v.shape != first.shape or not np.array_equal(v, first)
                   for v in values[1:]):
                raise self.refuse(node, f"attribute {name!r} (an array) changes with the sizes")
            return first
        if any(v != first for v in values[1:]):
            raise self.refuse(node, f"attribute {name!r} changes with the sizes")
        return first

    def _named_sizes(self) -> Dict[tuple, object]:
        """{the values at the probes: the size} of each symbolic size the shape inference names (a
        convolved ``floor((H - 1)/2) + 1``); None where two sizes not proven equal share the values."""
        named: Dict[tuple, object] = {}
        for d in {S.dim(d) for shape in self.known.values() for d in shape if not S.is_static(d)}:
            try:
                at = tuple(int(S.evaluate(d, b)) for b in self.bindings)
            except (KeyError, TypeError, ValueError):     # a size of symbols no probe binds
                continue
            if at in named and named[at] is not None and S.equal(named[at], d) is not True:
                named[at] = None
            else:
                named.setdefault(at, d)
        return named

    def _named_shapes(self) -> Dict[tuple, tuple]:
        """{the shapes at the probes: the shape} of each value the shape inference names with a symbolic
        size: an importer's own value of that shape (a decomposed batch norm's product) takes it whole,
        so a size deep in a network that is one number at every probe is not read as a constant."""
        named: Dict[tuple, tuple] = {}
        for shape in self.known.values():
            if all(S.is_static(d) for d in shape):
                continue
            try:
                at = tuple(tuple(int(S.evaluate(d, b)) for d in shape) for b in self.bindings)
            except (KeyError, TypeError, ValueError):     # a size of symbols no probe binds
                continue
            shape = tuple(S.dim(d) for d in shape)
            if at in named and named[at] is not None and any(S.equal(a, b) is not True
                                                             for a, b in zip(named[at], shape)):
                named[at] = None
            else:
                named.setdefault(at, shape)
        return named

    def size(self, values: List[int], what: str, node=None):
        """The size that is ``values[k]`` at probe ``k``: an int, ``c * prod(symbol ** e)``, or a size
        the shape inference names that has these values (an importer's own value of a convolved map)."""
        if all(v == values[0] for v in values):
            return S.dim(values[0])
        a, b = self.bindings[0], self.bindings[1]
        for powers in cartesian(range(MAX_POWER + 1), repeat=len(self.symbols)):
            if not any(powers):
                continue
            at_a = _monomial(a, self.symbols, powers)
            at_b = _monomial(b, self.symbols, powers)
            if values[0] * at_b != values[1] * at_a:
                continue
            coefficient = Fraction(values[0], at_a)
            if all(coefficient * _monomial(p, self.symbols, powers) == v for p, v in zip(self.bindings, values)):
                return sympy.Rational(coefficient.numerator, coefficient.denominator) * sympy.Mul(
                    *(S.symbol(s) ** e for s, e in zip(self.symbols, powers)))
        named = self.named.get(tuple(values))
        if named is not None:
            return named
        raise self.refuse(node, f"{what} is {values[0]}, {values[1]}, {values[2]} at sizes "
                                f"{', '.join(str(b) for b in self.bindings)}: no product of the symbols nor a "
                                f"size the shape inference names")


def _monomial(binding: Dict[str, int], symbols: Sequence[str], powers: Sequence[int]) -> int:
    out = 1
    for s, e in zip(symbols, powers):
        out *= binding[s] ** e
    return out
