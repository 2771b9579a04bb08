"""The graph IR of whole networks: values, nodes and initializers.

A :class:`Graph` holds named :class:`Value` s with shapes (ints, or sympy sizes) and dtypes, a list of
:class:`Node` s in topological order (op type, attributes, input and output value
names) and the constant tensors (initializers) as numpy arrays.  Op types are
loopweave's own (``conv2d``, ``dense``, ``add``, ``relu``, ``max_pool2d``, ...), with
every attribute filled in; the ONNX importer translates ONNX nodes into them, graph
passes rewrite them, and the executor compiles them.
"""
from __future__ import annotations

import html
from dataclasses import dataclass, field
from typing import Dict, List, Tuple

import numpy as np
import sympy


@dataclass
class Value:
    """A tensor flowing through the graph: a name, a shape, a dtype.  A size is an int, or in the
    graph of a model with symbolic sizes (``onnx_import/symbolic_graph.py``) a sympy expression of
    them."""

    name: str
    shape: Tuple[int, ...]
    dtype: str = "float32"

    def __repr__(self) -> str:
        return f"{self.name}: {self.dtype}{list(self.shape)}"


@dataclass
class Node:
    """One operation: ``outputs = op_type(*inputs, **attrs)`` (values by name)."""

    op_type: str
    inputs: List[str]
    outputs: List[str]
    attrs: Dict[str, object] = field(default_factory=dict)
    name: str = ""

    def __repr__(self) -> str:
        attrs = ", ".join(f"{k}={_short(v)}" for k, v in self.attrs.items())
        return (f"{', '.join(self.outputs)} = {self.op_type}({', '.join(self.inputs)}"
                f"{', ' if attrs and self.inputs else ''}{attrs})")


def _short(v) -> str:
    if isinstance(v, np.ndarray):
        return f"array{list(v.shape)}"
    if isinstance(v, float):
        return f"{v:g}"
    return repr(v)


class Graph:
    """A network: inputs, outputs, nodes (topologically ordered), values, initializers."""

    def __init__(self, name: str = "graph"):
        self.name = name
        self.inputs: List[str] = []
        self.outputs: List[str] = []
        self.nodes: List[Node] = []
        self.values: Dict[str, Value] = {}
        self.initializers: Dict[str, np.ndarray] = {}
        # inputs computed from the sizes at each binding ({name: BindingTable}): a resize's index tables
        # over a map of symbolic size
        self.binding_tables: Dict[str, object] = {}

    # ------------------------------------------------------------ building
    def add_value(self, name: str, shape, dtype: str = "float32") -> Value:
        value = Value(name, tuple(d if isinstance(d, sympy.Expr) and not d.is_Integer else int(d) for d in shape),
                      str(np.dtype(dtype)))
        self.values[name] = value
        return value

    def add_initializer(self, name: str, array: np.ndarray) -> Value:
        array = np.asarray(array)
        if not array.flags.c_contiguous:    # (np.ascontiguousarray would make a 0-d array 1-d)
            array = array.copy(order="C")
        self.initializers[name] = array
        return self.add_value(name, array.shape, array.dtype)

    def add_node(self, op_type: str, inputs, outputs, attrs=None, name: str = "") -> Node:
        node = Node(op_type, list(inputs), list(outputs), dict(attrs or {}), name or outputs[0])
        self.nodes.append(node)
        return node

    def fresh_name(self, base: str) -> str:
        name, k = base, 0
        while name in self.values:
            k += 1
            name = f"{base}_{k}"
        return name

    # ------------------------------------------------------------ queries
    def producer_map(self) -> Dict[str, Node]:
        return {out: n for n in self.nodes for out in n.outputs}

    def consumer_map(self) -> Dict[str, List[Node]]:
        users: Dict[str, List[Node]] = {}
        for n in self.nodes:
            for i in n.inputs:
                users.setdefault(i, []).append(n)
        return users

    def shape(self, name: str) -> Tuple[int, ...]:
        return self.values[name].shape

    def is_constant(self, name: str) -> bool:
        return name in self.initializers

    def copy(self) -> "Graph":
        g = Graph(self.name)
        g.inputs, g.outputs = list(self.inputs), list(self.outputs)
        g.nodes = [Node(n.op_type, list(n.inputs), list(n.outputs), dict(n.attrs), n.name) for n in self.nodes]
        g.values = {k: Value(v.name, v.shape, v.dtype) for k, v in self.values.items()}
        g.initializers = dict(self.initializers)
        g.binding_tables = dict(self.binding_tables)
        return g

    def op_counts(self) -> Dict[str, int]:
        counts: Dict[str, int] = {}
        for n in self.nodes:
            counts[n.op_type] = counts.get(n.op_type, 0) + 1
        return counts

    # ------------------------------------------------------------ display
    def __repr__(self) -> str:
        return (f"<loopweave Graph {self.name!r}: {len(self.nodes)} nodes, {len(self.inputs)} inputs, "
                f"{len(self.outputs)} outputs, {len(self.initializers)} initializers>")

    def __str__(self) -> str:
        lines = [f"graph {self.name}("]
        for i in self.inputs:
            lines.append(f"    {self.values[i]!r},")
        lines.append(f") -> ({', '.join(self.outputs)}):  "
                     f"# {len(self.initializers)} initializers, {self._weight_bytes() / 1e6:.1f} MB")
        for n in self.nodes:
            shapes = ", ".join(f"{self.values[o].dtype}{list(self.values[o].shape)}" for o in n.outputs
                               if o in self.values)
            lines.append(f"    {n!r}  # {shapes}")
        return "\n".join(lines)

    def _weight_bytes(self) -> int:
        return sum(a.nbytes for a in self.initializers.values())

    def _repr_html_(self) -> str:
        def esc(x) -> str:
            return html.escape(str(x))

        def shape_of(names) -> str:
            parts = []
            for nm in names:
                v = self.values.get(nm)
                if v is None:
                    parts.append("?")
                else:
                    parts.append(("w" if nm in self.initializers else "") + str(list(v.shape)))
            return ", ".join(parts)

        rows = []
        for k, n in enumerate(self.nodes):
            attrs = ", ".join(f"{a}={_short(v)}" for a, v in n.attrs.items())
            rows.append(f"<tr><td>{k}</td><td><b>{esc(n.op_type)}</b></td><td>{esc(n.name)}</td>"
                        f"<td>{esc(shape_of(n.inputs))}</td><td>{esc(shape_of(n.outputs))}</td>"
                        f"<td style='font-size:smaller'>{esc(attrs)}</td></tr>")
        ins = ", ".join(esc(repr(self.values[i])) for i in self.inputs)
        outs = ", ".join(esc(repr(self.values[o])) for o in self.outputs)
        counts = ", ".join(f"{esc(op)} &times;{k}" for op, k in sorted(self.op_counts().items(), key=lambda x: -x[1]))
        return (f"<div><b>Graph {esc(self.name)}</b>: inputs {ins}; outputs {outs}; "
                f"{len(self.nodes)} nodes, {self._weight_bytes() / 1e6:.1f} MB of weights"
                f"<div style='font-size:smaller'>ops: {counts}</div>"
                f"<div style='max-height:420px;overflow:auto'>"
                f"<table><tr><th>#</th><th>op</th><th>name</th><th>inputs</th><th>outputs</th><th>attrs</th></tr>"
                + "".join(rows) + "</table></div></div>")

    # ------------------------------------------------------------ checks
    def check(self) -> None:
        """Every input of every node is defined before it is used (internal invariant)."""
        from ...errors import InternalError
        defined = set(self.inputs) | set(self.initializers)
        for n in self.nodes:
            for i in n.inputs:
                if i not in defined:
                    raise InternalError(f"graph node {n.name} ({n.op_type}) reads {i!r} before it is defined")
            defined.update(n.outputs)
        for o in self.outputs:
            if o not in defined:
                raise InternalError(f"graph output {o!r} is never computed")
