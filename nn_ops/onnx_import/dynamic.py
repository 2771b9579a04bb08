"""DynamicGraph: an ONNX model whose shapes are known only at run time.

Two things make a model's shapes dynamic: a symbolic input dimension (the batch ``"N"``
of most exports) and shape-like operands that are graph inputs (Reshape's ``shape``,
Slice's ``starts``, Resize's ``sizes``...).  loopweave compiles static shapes: exact
bound inference and a static memory plan are what make its kernels fast.  So a
DynamicGraph keeps the model and its symbols, and ``specialize`` imports it for one
concrete binding (input shapes, and the values of those shape inputs); the
specialising executable (``nn_ops/network/dynamic_executable.py``) does this once per binding.

Unsupported ops are still reported at import: unless shape inputs are needed, the model
is imported once with every symbol set to 1 (or the smallest common size the symbolic shape
inference's run-time checks accept), and that import's errors are raised.

Shapes are also inferred symbolically (``symbolic_shapes.py``): every value's shape as sympy
sizes over the symbols, equalities proven at import (or refused, naming the node), and a
signature that ``symbol_values`` checks each feed against before anything runs.
"""
from __future__ import annotations

from typing import Dict, List, Sequence, Tuple

import numpy as np

from ...errors import OnnxImportError
from ..network import symbolic as S
from ..network.feed import check_names_and_dtypes, show_shape
from .importer import import_static, node_label, np_dtype, shape_inputs_behind, symbolic_dims, with_input_shapes
from .symbolic_shapes import infer_symbolic_shapes

TRIAL_SIZE = 1
#: the common sizes tried, in order, when size 1 breaks a recorded check: every size up to 64, then
#: a few larger ones (Inception-v3's unpadded stem and grid reductions need an input of at least 75)
TRIAL_SIZES = tuple(range(TRIAL_SIZE, 65)) + (96, 128, 192, 256, 384, 512, 1024, 2048, 4096)


class DynamicGraph:
    def __init__(self, model, opset: int, name: str, value_inputs: Sequence[str], check: bool = True):
        self.model_bytes = model.SerializeToString()
        self.opset, self.name = opset, name
        self.value_inputs = list(value_inputs)
        symbolic = symbolic_dims(model)
        inits = {t.name for t in model.graph.initializer}
        self.inputs: List[Tuple[str, tuple, str]] = []
        for inp in model.graph.input:
            if inp.name in inits:
                continue
            tt = inp.type.tensor_type
            shape = symbolic.get(inp.name) or [d.dim_value for d in tt.shape.dim]
            self.inputs.append((inp.name, tuple(shape), np_dtype(tt.elem_type)))
        self.outputs = [(o.name, tuple(d.dim_value if d.HasField("dim_value") else (d.dim_param or "?")
                                       for d in o.type.tensor_type.shape.dim), np_dtype(o.type.tensor_type.elem_type))
                        for o in model.graph.output]
        self.symbols = sorted({d for _, shape, _ in self.inputs for d in shape if isinstance(d, str)})
        # every value's shape as sympy sizes over the symbols; refutes impossible models here, and
        # gives the signature a feed is checked against (with the checks import could not prove)
        self.shapes = infer_symbolic_shapes(model, node_label)
        self.signature = self.shapes.signature
        self.sample, self.trial = None, None
        if check and not self.value_inputs:        # import once now, so unsupported ops are reported before compiling
            try:
                trial = self.trial = self.trial_binding()
                self.sample = self.specialize({n: tuple(trial[d] if isinstance(d, str) else d for d in shape)
                                               for n, shape, _ in self.inputs}, {})
            except OnnxImportError as exc:     # shape inputs as well: their values are needed first
                if not getattr(exc, "more_value_inputs", None):
                    raise
                self.value_inputs = list(exc.more_value_inputs)

    def trial_binding(self) -> Dict[str, int]:
        """The sizes of the import that reports unsupported ops: every symbol = 1, unless the run-time
        checks refuse that (a 3x3 pool needs H >= 3): then the smallest common size they accept."""
        for size in TRIAL_SIZES:
            binding = {s: size for s in self.signature.symbols}
            if all(c.holds(binding) for c in self.signature.checks):
                return binding
        return {s: TRIAL_SIZE for s in self.signature.symbols}

    # ------------------------------------------------------------ specialising
    def bind(self, feed: Dict[str, np.ndarray]) -> Dict[str, int]:
        """The symbols' values for ``feed`` (checked: names, dtypes, ranks, fixed sizes, consistent symbols)."""
        return self.symbol_values(check_names_and_dtypes(self.inputs, feed))

    def symbol_values(self, feed: Dict[str, np.ndarray]) -> Dict[str, int]:
        """The symbols' values for ``feed``, checked against the symbolic signature before anything
        runs: names, dtypes, ranks, fixed sizes, one value per symbol over all inputs (an
        ArgumentError names the input and the symbol), then the run-time checks import recorded."""
        binding = self.signature.bind(feed)
        self.signature.check(binding)
        return binding

    def output_shapes(self, binding: Dict[str, int]):
        """The outputs' shapes at ``binding`` from symbolic inference (None where it did not reach)."""
        return self.signature.output_shapes(binding)

    def specialize(self, shapes: Dict[str, Sequence[int]], values: Dict[str, np.ndarray]):
        """The static Graph for these input shapes, with ``values`` (the shape inputs) as constants."""
        import onnx
        from onnx import numpy_helper
        model = onnx.ModelProto.FromString(self.model_bytes)
        if values:
            kept = [i for i in model.graph.input if i.name not in values]
            del model.graph.input[:]
            model.graph.input.extend(kept)
            for name, arr in values.items():
                model.graph.initializer.append(numpy_helper.from_array(np.asarray(arr), name))
        shapes = {n: s for n, s in shapes.items() if n not in values}
        model = with_input_shapes(model, shapes)
        try:
            return import_static(model, self.opset, self.name)
        except OnnxImportError as exc:
            binding = ", ".join(f"{n}: {tuple(s)}" for n, s in shapes.items())
            error = OnnxImportError(f"while specialising {self.name!r} to {binding}: {exc}", exc.unsupported)
            error.more_value_inputs = shape_inputs_behind(model, exc)
            raise error from exc

    def specialize_to(self, feed: Dict[str, np.ndarray]):
        """The static Graph for ``feed``'s input shapes and shape-input values.

        A converter stops at the first operand that must be constant, so an op with several
        (Slice's starts and ends, Clip's min and max) reveals them one import at a time:
        each newly found graph input joins ``value_inputs`` and the import is retried.
        Returns (graph, grew) where ``grew`` says ``value_inputs`` changed.
        """
        grew = False
        for _ in range(len(self.inputs) + 1):
            shapes = {n: tuple(feed[n].shape) for n, _, _ in self.inputs}
            values = {n: np.array(feed[n]) for n in self.value_inputs}
            try:
                return self.specialize(shapes, values), grew
            except OnnxImportError as exc:
                more = [n for n in getattr(exc, "more_value_inputs", []) if n not in self.value_inputs]
                if not more:
                    raise
                self.value_inputs = sorted(set(self.value_inputs) | set(more))
                grew = True
        raise OnnxImportError(f"{self.name!r}: the shape inputs did not settle ({', '.join(self.value_inputs)})")

    # ------------------------------------------------------------ display
    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d}{show_shape(s)}" for n, s, d in self.inputs)
        extra = f"; shape inputs (compiled per value): {', '.join(self.value_inputs)}" if self.value_inputs else ""
        outs = ", ".join(n if shape is None else f"{n}: {d}{show_shape([S.show(x) for x in shape])}"
                         for n, shape, d in self.signature.outputs)
        sizes = f"; symbolic sizes {', '.join(self.symbols)}" if self.symbols else ""
        return f"<loopweave DynamicGraph {self.name!r} ({ins}) -> ({outs}){sizes}{extra}>"

    def _repr_html_(self) -> str:
        import html
        body = html.escape(repr(self))
        if self.sample is not None:
            sizes = ", ".join(f"{k} = {v}" for k, v in self.trial.items())
            body += f"<div>imported with {html.escape(sizes)}:</div>" + self.sample._repr_html_()
        return f"<div>{body}</div>"
