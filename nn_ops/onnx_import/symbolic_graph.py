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
probes' sizes (a deep CNN's last pool) is probed at larger ones, and one whose checks take a size
only as a multiple of a power of two (a U-Net's skip concats) at the primes times that power; sizes
the checks equate to a multiple of another are then written as that multiple.  What the probes
cannot explain is refused, naming the node: a graph whose structure changes with the sizes, a
constant computed from them (but a resize's index and weight tables, made again at each binding
from the resize's own description, ``taps``, by the static import's numpy code, and a constant
broadcast along sizes, ViT's class token expanded to the batch: an ``expand`` of one copy; a leading
block of a constant of the model, GPT-2's position rows ``wpe[arange(seq)]`` and its causal mask's
``[:seq, :seq]``: a ``slice`` of it), a size that is no product of the symbols.
"""
from __future__ import annotations

import math
from functools import partial
from itertools import combinations_with_replacement, product as cartesian
from typing import Dict, List, Optional, Sequence

import numpy as np
import sympy

from ...errors import OnnxImportError
from ..network import symbolic as S
from ..network.graph import Graph
from ..network.polymorphic_executable import BindingTable
from ..ops.resize import axis_taps, coefficient_fn, source_coordinates

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
#: the most factors of a size that is a product of named sizes
MAX_FACTORS = 3
#: the largest power of two the probes of a symbol are scaled by where run-time checks need it to divide
MAX_SCALE = 32


def symbolic_graph(dynamic) -> Graph:
    """``dynamic`` (a DynamicGraph without shape inputs) as one Graph with symbolic sizes."""
    if dynamic.value_inputs:
        raise OnnxImportError(f"{dynamic.name!r}: shape inputs ({', '.join(dynamic.value_inputs)}) change the "
                              f"graph's structure with their values; it has no one symbolic graph")
    symbols = list(dynamic.signature.symbols)
    if len(symbols) > len(PROBES[0]):
        raise OnnxImportError(f"{dynamic.name!r} has {len(symbols)} symbolic sizes; the symbolic graph solves for "
                              f"at most {len(PROBES[0])}")
    multiples: Dict[str, int] = {}
    for probes in (PROBES,) + LARGE_PROBES:
        bindings = [dict(zip(symbols, primes)) for primes in probes]
        refused = _refused(dynamic, bindings)
        if not refused:
            break
        scaled, multiples = _scaled_to_divide(dynamic, bindings, refused)
        if scaled is not None:
            bindings, refused = scaled, []
            break
    else:
        check, binding = refused[0]
        raise OnnxImportError(f"{dynamic.name!r}: its run-time check {check.message!r} refuses the probe "
                              f"sizes {binding}, so its symbolic graph cannot be solved for")
    graphs = [_import_at(dynamic, b) for b in bindings]
    return _Solver(dynamic, symbols, bindings, graphs, multiples).graph()


def _refused(dynamic, bindings: List[Dict[str, int]]) -> list:
    return [(check, b) for b in bindings for check in dynamic.signature.checks if not check.holds(b)]


def _scaled_to_divide(dynamic, bindings: List[Dict[str, int]], refused: list):
    """(``bindings`` with the symbols of the refused checks times the least power of two up to
    ``MAX_SCALE`` that every check accepts, {symbol: that power}) where the checks refuse the probes
    at each other remainder by it (a U-Net's skip concats need its height a multiple of 8), else
    (None, {}).  The ratios of the first two probes are still ratios of distinct primes."""
    symbols = sorted({s.name for check, _ in refused for s in check.condition.free_symbols})
    scale = 2
    while scale <= MAX_SCALE:
        scaled = [{s: v * scale if s in symbols else v for s, v in b.items()} for b in bindings]
        if not _refused(dynamic, scaled):
            others = [dict(b, **{s: b[s] + r}) for b in scaled for s in symbols for r in range(1, scale)]
            if all(_refused(dynamic, [b]) for b in others):
                return scaled, dict.fromkeys(symbols, scale)
            break
        scale *= 2
    return None, {}


def _one_size_where_checked_equal(graph: Graph, checks) -> Graph:
    """``graph`` with each size that a run-time check equates to a whole multiple of another written
    as that multiple (a U-Net's ``H`` checked equal to its up-sampled ``2*(H//2)``, ``H//2`` to
    ``2*((H//2)//2)``, ...: ``H`` is ``8 * (((H//2)//2)//2)``), so that a skip concat's operands have
    one size and a kernel one size var for them; and each ``min(c, n)`` that a broadcast's check takes
    only where it is ``n`` as ``n`` (GPT-2's causal mask ``[:min(1024, seq)]`` beside its scores of
    ``seq``); the checks hold before every run."""
    times: Dict[object, tuple] = {}          # size m -> (k, n): m is k * n
    for check in checks:
        bounded = _bounded_where_checked(check.condition)
        if bounded is not None:
            times.setdefault(*bounded)
        if not isinstance(check.condition, sympy.Eq):
            continue
        (ca, ma), (cb, mb) = (S.dim(d).as_coeff_Mul() for d in check.condition.args)
        if ca.is_Integer and cb.is_Integer and ca > 0 and cb > 0 and ma != mb:
            if cb % ca == 0 and cb > ca and ma not in times:
                times[ma] = (int(cb // ca), mb)
            elif ca % cb == 0 and ca > cb and mb not in times:
                times[mb] = (int(ca // cb), ma)
    if not times:
        return graph

    def canonical(d):
        if isinstance(d, (tuple, list)):
            return type(d)(canonical(e) for e in d)
        if not isinstance(d, sympy.Basic) or S.is_static(d):
            return d
        c, m = S.dim(d).as_coeff_Mul()
        seen = set()
        while m in times and m not in seen:
            seen.add(m)
            k, m = times[m]
            c *= k
        return c * m
    for name, value in graph.values.items():
        graph.values[name] = type(value)(name, canonical(tuple(value.shape)), value.dtype)
    for node in graph.nodes:
        node.attrs = {a: canonical(v) for a, v in node.attrs.items()}
    return graph


def _bounded_where_checked(condition):
    """``(min(c, n), (1, n))`` where ``condition`` is a broadcast's check of the two sizes
    ``min(c, n)`` and ``n`` (equal, or either 1), ``c`` a whole number above 1: where it holds they are
    equal (``min(c, n)`` is 1 only where ``n`` is); None otherwise."""
    terms = condition.args if isinstance(condition, sympy.Or) else (condition,)
    pairs = [t.args for t in terms if isinstance(t, sympy.Eq) and not any(a == 1 for a in t.args)]
    if len(pairs) != 1:
        return None
    for bounded, n in (pairs[0], pairs[0][::-1]):
        if isinstance(bounded, sympy.Min) and len(bounded.args) == 2 and n in bounded.args:
            c = next(a for a in bounded.args if a != n)
            allowed = {sympy.Eq(bounded, n), sympy.Eq(n, bounded), sympy.Eq(bounded, 1), sympy.Eq(n, 1)}
            if c.is_Integer and c > 1 and all(t in allowed for t in terms):
                return bounded, (1, n)
    return None


def _resize_table(taps: dict, in_size, out_size, axis: int, weights: bool, binding: Dict[str, int]) -> np.ndarray:
    """A resize's index (or, ``weights``, weight) table along ``axis`` at ``binding``, made as the
    Resize converter makes it at static sizes."""
    d, o = int(S.evaluate(in_size, binding)), int(S.evaluate(out_size, binding))
    scale = taps["scales"][axis] if taps["scales"] is not None else o / d
    coeffs = coefficient_fn(taps["mode"], taps["rounding"], taps["cubic_a"], taps["antialias"])
    idx, w = axis_taps(source_coordinates(taps["transform"], o, d, scale), d, scale, coeffs, taps["exclude"])
    if weights:
        return w
    return idx[np.arange(o), w.argmax(axis=1)][:, None] if taps["mode"] == "nearest" else idx


def _import_at(dynamic, binding: Dict[str, int]) -> Graph:
    shapes = {n: tuple(binding[str(d)] if not S.is_static(d) else int(d) for d in shape)
              for n, shape, _ in dynamic.signature.inputs}
    return dynamic.specialize(shapes, {})


class _Solver:
    def __init__(self, dynamic, symbols: List[str], bindings: List[Dict[str, int]], graphs: List[Graph],
                 multiples: Optional[Dict[str, int]] = None):
        self.dynamic, self.symbols, self.bindings, self.graphs = dynamic, symbols, bindings, graphs
        # each symbol the checks accept only as a multiple of k, as ``k * a symbol of its own``
        self.as_multiples = {S.symbol(s): k * S.symbol(f"{s}_over_{k}") for s, k in (multiples or {}).items()}
        self.known = dynamic.shapes.shapes        # the symbolic shape inference's sizes, by ONNX value name
        self.named = self._named_sizes()
        self.named_shapes = self._named_shapes()
        self.producer = {o: node for g in graphs[:1] for node in g.nodes for o in node.outputs}
        self.solved: Dict[str, tuple] = {}

    def graph(self) -> Graph:
        first, others = self.graphs[0], self.graphs[1:]
        out = Graph(first.name)
        out.inputs, out.outputs = list(first.inputs), list(first.outputs)
        for g in others:
            if g.inputs != first.inputs or g.outputs != first.outputs or len(g.nodes) != len(first.nodes):
                raise self.refuse(None, "its nodes differ from one size to another")
        read = {i for n in first.nodes for i in n.inputs} | set(first.outputs)
        expanded: Dict[str, np.ndarray] = {}      # a constant broadcast along sizes -> the one copy
        sliced: Dict[str, tuple] = {}             # a leading block of a constant of the model -> (its name, it)
        for name, array in first.initializers.items():
            if name not in read:        # sizes computed at import for the converters (a Shape chain)
                continue
            arrays = [array] + [g.initializers.get(name) for g in others]
            if any(other is None or other.shape != array.shape or other.dtype != array.dtype or
                   not np.array_equal(other, array, equal_nan=True) for other in arrays[1:]):
                copy = self.broadcast_copy(arrays)
                if copy is not None:
                    expanded[name] = copy
                    continue
                whole = self.sliced_from(name, arrays)
                if whole is not None:
                    sliced[name] = whole
                    continue
                make = self.resize_table(name, arrays)
                if make is None:
                    raise self.refuse(None, f"the constant {name!r} is computed from the sizes")
                out.inputs.append(name)
                out.binding_tables[name] = make
                continue
            out.initializers[name] = array
        for name, value in first.values.items():
            if name in first.initializers and name not in out.initializers and name not in out.binding_tables \
                    and name not in expanded and name not in sliced:
                continue
            if any(name not in g.values or g.values[name].dtype != value.dtype for g in others):
                raise self.refuse(None, f"the value {name!r} differs from one size to another")
            out.values[name] = type(value)(name, self.value_shape(name), value.dtype)
        out.binding_tables = {name: BindingTable(out.values[name].shape, out.values[name].dtype, make)
                              for name, make in out.binding_tables.items()}
        for name, copy in expanded.items():
            base = out.fresh_name(name + ".copy")
            out.add_initializer(base, copy)
            out.add_node("expand", [base], [name], {"shape": out.values[name].shape}, name)
        for name, (source, whole) in sliced.items():
            base = out.fresh_name(source)
            out.add_initializer(base, whole)
            out.add_node("slice", [base], [name], {"begin": (0,) * whole.ndim, "end": out.values[name].shape,
                                                   "step": (1,) * whole.ndim}, name)
        for k, node in enumerate(first.nodes):
            peers = [g.nodes[k] for g in others]
            if any(p.op_type != node.op_type or p.inputs != node.inputs or p.outputs != node.outputs or
                   set(p.attrs) != set(node.attrs) for p in peers):
                raise self.refuse(node, "the graph's structure changes with the sizes here")
            attrs = {a: self.attr(node, a, [node.attrs[a]] + [p.attrs[a] for p in peers]) for a in node.attrs}
            out.add_node(node.op_type, node.inputs, node.outputs, attrs, node.name)
        return _one_size_where_checked_equal(out, self.dynamic.signature.checks)

    def broadcast_copy(self, arrays: list) -> Optional[np.ndarray]:
        """The one copy (size 1 on each axis whose length changes) where the constant ``arrays`` (at
        each probe) are that copy broadcast along sizes; None otherwise."""
        first = arrays[0]
        if any(a.ndim != first.ndim or a.dtype != first.dtype for a in arrays[1:]):
            return None
        axes = tuple(k for k in range(first.ndim) if len({a.shape[k] for a in arrays}) > 1)
        copy = first[tuple(slice(0, 1) if k in axes else slice(None) for k in range(first.ndim))]
        if not axes or any(not np.array_equal(np.broadcast_to(copy, a.shape), a, equal_nan=True) for a in arrays):
            return None
        return np.ascontiguousarray(copy)

    def sliced_from(self, name: str, arrays: list) -> Optional[tuple]:
        """(The name, the value) of the constant of the model (as of rank ``arrays[0].ndim``, leading
        axes of 1 added) whose leading block the constant ``arrays`` (at each probe) is along each axis
        whose length changes, whole along the others, itself one value at every probe; None where
        there is none."""
        first = arrays[0]
        if any(a.ndim != first.ndim or a.dtype != first.dtype for a in arrays[1:]):
            return None
        varies = [len({a.shape[k] for a in arrays}) > 1 for k in range(first.ndim)]
        for other, whole in self.graphs[0].initializers.items():
            if other == name or whole.dtype != first.dtype or whole.ndim > first.ndim:
                continue
            whole = whole.reshape((1,) * (first.ndim - whole.ndim) + whole.shape)
            if any(v and max(a.shape[k] for a in arrays) > whole.shape[k] or not v and whole.shape[k] != first.shape[k]
                   for k, v in enumerate(varies)):
                continue
            if all(np.array_equal(whole[tuple(slice(0, d) for d in a.shape)], a, equal_nan=True) for a in arrays) \
                    and all(other in g.initializers and g.initializers[other].size == whole.size and
                            np.array_equal(g.initializers[other].reshape(whole.shape), whole, equal_nan=True)
                            for g in self.graphs[1:]):
                return other, np.ascontiguousarray(whole)
        return None

    def resize_table(self, name: str, arrays: list):
        """``binding -> table`` where ``name`` is, at every probe, the index or weight table of one
        resize along an axis whose length changes with the sizes, and the resize's ``taps`` make it
        again there (``_resize_table``); None otherwise (an antialiased resize to sizes given: its tap
        count changes with the scale; a crop's coordinates)."""
        readers = [n for n in self.graphs[0].nodes if name in n.inputs]
        if len(readers) != 1 or readers[0].op_type != "resize" or "taps" not in readers[0].attrs:
            return None
        node, taps = readers[0], readers[0].attrs["taps"]
        if taps["transform"] == "tf_crop_and_resize" or taps["antialias"] and taps["scales"] is None:
            return None
        per_axis = 2 if node.attrs["weighted"] else 1
        k = node.inputs.index(name) - 1
        axis = node.attrs["axes"][k // per_axis]
        make = partial(_resize_table, taps, self.value_shape(node.inputs[0])[axis],
                       self.value_shape(node.outputs[0])[axis], axis, k % per_axis == 1)
        if any(not np.array_equal(make(b).astype(a.dtype), a) for a, b in zip(arrays, self.bindings)):
            return None
        return make

    def refuse(self, node, why: str) -> OnnxImportError:
        where = f"node {node.name!r} ({node.op_type}): " if node is not None else ""
        return OnnxImportError(f"{self.dynamic.name!r} has no symbolic graph: {where}{why}; "
                               f"lw.compile(graph) without pipeline='graph' compiles it")

    def value_shape(self, name: str) -> tuple:
        """``shape`` of the value ``name`` of the imported graphs, solved once."""
        if name not in self.solved:
            self.solved[name] = self.shape(name, [g.values[name].shape for g in self.graphs])
        return self.solved[name]

    def shape(self, name: str, shapes: Sequence[tuple]) -> tuple:
        """The value's shape: ints where static (as the static passes expect), sympy sizes elsewhere.  An
        importer's own value of its producer's input's shape at every probe (a decomposed batch norm's
        product of a conv's map) takes that input's shape, even where the probes cannot tell two named
        sizes apart (``H//2`` and ``(H - 1)//2 + 1`` at probes scaled to even sizes)."""
        if len({len(s) for s in shapes}) != 1:
            raise self.refuse(None, f"the rank of {name!r} changes with the sizes")
        known = self.known.get(name)
        alike = [i for i in getattr(self.producer.get(name), "inputs", ())
                 if i in self.graphs[0].values and [g.values[i].shape for g in self.graphs] == list(shapes)]
        if known is not None and len(known) == len(shapes[0]) and all(
                tuple(int(S.evaluate(d, b)) for d in known) == tuple(s) for b, s in zip(self.bindings, shapes)):
            sizes = tuple(S.dim(d) for d in known)
        elif known is None and alike:
            return self.value_shape(alike[0])
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

    def same(self, a, b) -> bool:
        """Whether sizes ``a`` and ``b`` are proven equal at every binding the checks accept (each symbol
        they take only as a multiple of ``k``, as one)."""
        return S.equal(a, b) is True or bool(self.as_multiples) and \
            S.equal(S.dim(a).subs(self.as_multiples), S.dim(b).subs(self.as_multiples)) is True

    def named_product(self, values: List[int]):
        """``c * a [* b [* d]]`` of sizes the shape inference names or symbols (a channels-first layer
        norm's rows ``N * (H//4) * (W//4)``, an up-sampled ``2 * (W//4)``) that has ``values`` at the probes, fewest factors first; None
        where none has."""
        factors = [(at, d) for at, d in self.named.items() if d is not None] + \
            [(tuple(b[s] for b in self.bindings), S.symbol(s)) for s in self.symbols]
        for count in range(1, MAX_FACTORS + 1):
            for picked in combinations_with_replacement(factors, count):
                at = [math.prod(f[0][k] for f in picked) for k in range(len(values))]
                c, rest = divmod(values[0], at[0])
                if c and not rest and all(c * a == v for a, v in zip(at, values)):
                    return c * sympy.Mul(*(d for _, d in picked))
        return None

    def _named_sizes(self) -> Dict[tuple, object]:
        """{the values at the probes: the size} of each symbolic size the shape inference names (a
        convolved ``floor((H - 1)/2) + 1``); None where two sizes not proven equal share the values."""
        named: Dict[tuple, object] = {}
        for d in {S.dim(d) for shape in self.known.values() for d in shape if not S.is_static(d)}:
            try:
                at = tuple(int(S.evaluate(d, b)) for b in self.bindings)
            except (KeyError, TypeError, ValueError):     # a size of symbols no probe binds
                continue
            if at in named and named[at] is not None and not self.same(named[at], d):
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
            if at in named and named[at] is not None and not all(self.same(a, b) for a, b in zip(named[at], shape)):
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
            coefficient, rest = divmod(values[0], at_a)
            if rest:        # an integer ``c`` only: at probes scaled to divide, ``H/8`` would pass for ``H//8``
                continue
            if all(coefficient * _monomial(p, self.symbols, powers) == v for p, v in zip(self.bindings, values)):
                return coefficient * sympy.Mul(*(S.symbol(s) ** e for s, e in zip(self.symbols, powers)))
        named = self.named.get(tuple(values))
        if named is not None:
            return named
        product = self.named_product(values)
        if product is not None:
            return product
        raise self.refuse(node, f"{what} is {values[0]}, {values[1]}, {values[2]} at sizes "
                                f"{', '.join(str(b) for b in self.bindings)}: no product of the symbols nor a "
                                f"size the shape inference names")


def _monomial(binding: Dict[str, int], symbols: Sequence[str], powers: Sequence[int]) -> int:
    out = 1
    for s, e in zip(symbols, powers):
        out *= binding[s] ** e
    return out
