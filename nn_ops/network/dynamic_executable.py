"""DynamicExecutable: a compiled DynamicGraph, specialised per concrete input binding.

The graph is any object with the DynamicGraph interface (``onnx_import/dynamic.py``):
``inputs``, ``outputs``, ``value_inputs``, ``symbol_values(feed)``, ``specialize_to(feed)``,
``model_bytes``, ``name`` and ``opset``; the network compiler does not import importers.

``run(feed)`` checks the inputs against the symbolic signature, looks the binding up
(input shapes, plus the values of shape inputs) and compiles that specialisation on
first use (kernels come from the object cache when another specialisation or an
earlier process built them).  ``save`` stores the model and every specialisation
compiled so far; ``load`` brings them back without compiling.
"""
from __future__ import annotations

import io
import json
import zipfile
from typing import Dict, List, Tuple

import numpy as np

from ...errors import ArgumentError
from ...target import resolve_target
from .feed import check_names_and_dtypes
from .executable import compile_graph, load_static
from .feed import show_shape

FORMAT = "loopweave-dynamic-executable"
VERSION = 1


class DynamicExecutable:
    def __init__(self, graph, target="llvm", progress=None):
        self.graph = graph
        self.target, self.progress = target, progress
        self.specializations: Dict[tuple, object] = {}
        self.outputs = list(graph.outputs)       # (name, shape with symbols, dtype)

    @property
    def inputs(self) -> List[Tuple[str, tuple, str]]:
        """The tensor inputs (name, shape with symbols, dtype); shape inputs are left out."""
        return [(n, s, d) for n, s, d in self.graph.inputs if n not in self.graph.value_inputs]

    def _key(self, feed) -> tuple:
        self.graph.symbol_values(feed)
        shapes = tuple((n, tuple(feed[n].shape)) for n, _, _ in self.inputs)
        values = tuple((n, feed[n].dtype.str, tuple(feed[n].shape), feed[n].tobytes()) for n in self.graph.value_inputs)
        return shapes + values

    def specialization(self, feed):
        """The static Executable for ``feed``'s binding (compiled now if it is new)."""
        return self._specialization(check_names_and_dtypes(self.graph.inputs, feed))

    def _specialization(self, feed):
        key = self._key(feed)
        exe = self.specializations.get(key)
        if exe is None:
            graph, grew = self.graph.specialize_to(feed)
            if grew:        # more inputs are shape inputs now: keys made without their values are void
                self.specializations.clear()
                key = self._key(feed)
            exe = compile_graph(graph, resolve_target(self.target), progress=self.progress)
            self.specializations[key] = exe
        return exe

    def _tensor_feed(self, feed) -> dict:
        return {n: a for n, a in feed.items() if n not in self.graph.value_inputs}

    def run(self, feed) -> List[np.ndarray]:
        """Run on ``feed`` ({input name: array}); compiles the binding's specialisation on first use."""
        feed = check_names_and_dtypes(self.graph.inputs, feed)
        return self._specialization(feed).run(self._tensor_feed(feed))

    __call__ = run

    def profile(self, feed, repeat: int = 10) -> List[Tuple[str, float]]:
        feed = check_names_and_dtypes(self.graph.inputs, feed)
        return self._specialization(feed).profile(self._tensor_feed(feed), repeat)

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d}{show_shape(s)}" for n, s, d in self.graph.inputs)
        return (f"<loopweave DynamicExecutable ({ins}) -> ({', '.join(n for n, _, _ in self.outputs)}): "
                f"{len(self.specializations)} specialisation(s) compiled>")

    def _repr_html_(self) -> str:
        import html
        rows = "".join(f"<li>{html.escape(', '.join(f'{e[0]}{list(e[1])}' for e in key if len(e) == 2))}: "
                       f"{len(exe.calls)} kernel calls</li>"
                       for key, exe in self.specializations.items())
        return f"<div>{html.escape(repr(self))}<ul>{rows}</ul></div>"

    # ------------------------------------------------------------ save / load
    def save(self, path) -> None:
        """A zip: meta.json, model.onnx, and one nested executable per compiled specialisation."""
        entries = []
        with zipfile.ZipFile(path, "w", compression=zipfile.ZIP_STORED) as z:
            z.writestr("model.onnx", self.graph.model_bytes)
            for k, (key, exe) in enumerate(self.specializations.items()):
                buf = io.BytesIO()
                exe.save(buf)
                z.writestr(f"specializations/{k}.lwx", buf.getvalue())
                entries.append({"file": f"specializations/{k}.lwx",
                                "shapes": [[n, list(shape)] for n, shape in (e for e in key if len(e) == 2)],
                                "values": [[n, dt, list(shape), data.hex()]
                                           for n, dt, shape, data in (e for e in key if len(e) == 4)]})
            z.writestr("meta.json", json.dumps({
                "format": FORMAT, "version": VERSION, "name": self.graph.name, "opset": self.graph.opset,
                "value_inputs": self.graph.value_inputs, "specializations": entries}, indent=1))


def load_dynamic(z: zipfile.ZipFile, meta: dict, where: str, graph) -> DynamicExecutable:
    """A DynamicExecutable over ``graph`` (rebuilt by the caller from the zip's model) with the
    specialisations saved in ``z`` by ``DynamicExecutable.save``."""
    if meta.get("version") != VERSION:
        raise ArgumentError(f"{where}: unsupported dynamic executable version {meta.get('version')!r}")
    exe = DynamicExecutable(graph)
    for entry in meta["specializations"]:
        key = tuple((n, tuple(s)) for n, s in entry["shapes"])
        key += tuple((n, dt, tuple(shape), bytes.fromhex(data)) for n, dt, shape, data in entry["values"])
        exe.specializations[key] = load_static(io.BytesIO(z.read(entry["file"])))
    return exe
