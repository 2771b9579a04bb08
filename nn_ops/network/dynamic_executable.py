"""DynamicExecutable: a compiled DynamicGraph, specialised per concrete input binding.

The graph is any object with the DynamicGraph interface (``onnx_import/dynamic.py``):
``inputs``, ``outputs``, ``value_inputs``, ``symbol_values(feed)`` (the feed checked against the
symbolic signature, giving the symbols' values), ``specialize_to(feed)``,
``model_bytes``, ``name`` and ``opset``; the network compiler does not import importers.

``run(feed)`` checks the inputs against the symbolic signature, looks the binding up
(input shapes, plus the values of shape inputs) and compiles that specialisation on
first use (kernels come from the object cache when another specialisation or an
earlier process built them).  ``save`` stores the model and every specialisation
compiled so far; ``load`` brings them back without compiling.

At most ``max_specializations`` (default ``MAX_SPECIALIZATIONS``, 16) are kept, least recently used
first out: a server whose clients send ever new shapes compiles one per new shape but never holds
more than that many (each holds its kernels, weights and arena).  ``load`` of a file that holds
more brings back the most recently used ``MAX_SPECIALIZATIONS`` (``save`` writes them oldest first).
"""
from __future__ import annotations

import collections
import io
import threading
from typing import List, Tuple

import numpy as np

from ...errors import ArgumentError
from ...target import resolve_target
from .archive import ArchiveReader, ArchiveWriter, MetaChecker
from .feed import check_names_and_dtypes
from .executable import compile_graph, load_static
from .signature import export_needs_fixed_shapes
from .feed import show_shape

MAX_SPECIALIZATIONS = 16
FORMAT = "loopweave-dynamic-executable"
VERSION = 2      # 2: checksummed members (archive.py); version 1 files are refused


class DynamicExecutable:
    def __init__(self, graph, target="llvm", progress=None, tuning_log=None, checks=None,
                 max_specializations: int = MAX_SPECIALIZATIONS):
        if not isinstance(max_specializations, int) or isinstance(max_specializations, bool) or max_specializations < 1:
            raise ArgumentError(f"max_specializations must be a whole number >= 1, got {max_specializations!r}")
        self.graph = graph
        self.target, self.progress, self.tuning_log = target, progress, tuning_log
        self.checks = checks
        self.max_specializations = max_specializations
        self.specializations: "collections.OrderedDict[tuple, object]" = collections.OrderedDict()   # oldest use first
        self.outputs = list(graph.outputs)       # (name, shape with symbols, dtype)
        # one thread at a time compiles a specialisation (specialize_to may widen the graph's shape
        # inputs and void the keys); two threads meeting a new binding compiled it twice before.
        # Finding a compiled one takes no lock; runs take the specialisation's own lock.
        self._compiling = threading.RLock()

    @property
    def inputs(self) -> List[Tuple[str, tuple, str]]:
        """The tensor inputs (name, shape with symbols, dtype); shape inputs are left out."""
        return [(n, s, d) for n, s, d in self.graph.inputs if n not in self.graph.value_inputs]

    def _key(self, feed) -> tuple:
        shapes = tuple((n, tuple(feed[n].shape)) for n, _, _ in self.inputs)
        values = tuple((n, feed[n].dtype.str, tuple(feed[n].shape), feed[n].tobytes()) for n in self.graph.value_inputs)
        return shapes + values

    def specialization(self, feed):
        """The static Executable for ``feed``'s binding (compiled now if it is new)."""
        return self._specialization(check_names_and_dtypes(self.graph.inputs, feed))

    def _specialization(self, feed):
        self.graph.symbol_values(feed)       # the symbolic signature's checks, before anything runs
        key = self._key(feed)
        exe = self.specializations.get(key)     # compiled before: no lock on a run's path
        if exe is not None:
            try:
                self.specializations.move_to_end(key)
            except KeyError:        # evicted by another thread meanwhile: it still runs this once
                pass
            return exe
        with self._compiling:
            return self._found_or_compiled(feed)

    def _found_or_compiled(self, feed):
        key = self._key(feed)
        exe = self.specializations.get(key)
        if exe is None:
            graph, grew = self.graph.specialize_to(feed)
            if grew:        # more inputs are shape inputs now: keys made without their values are void
                self.specializations.clear()
                key = self._key(feed)
            exe = compile_graph(graph, resolve_target(self.target), progress=self.progress,
                                tuning_log=self.tuning_log, checks=self.checks)
            self.specializations[key] = exe
            while len(self.specializations) > self.max_specializations:
                self.specializations.popitem(last=False)       # the least recently used
        return exe

    def _tensor_feed(self, feed) -> dict:
        return {n: a for n, a in feed.items() if n not in self.graph.value_inputs}

    def run(self, feed) -> List[np.ndarray]:
        """Run on ``feed`` ({input name: array}); compiles the binding's specialisation on first use.

        The feed is checked against the graph's symbolic signature first (``symbol_values``:
        names, dtypes, ranks, fixed sizes, one value per symbol, the run-time checks recorded at
        import); an ArgumentError names the input (or node) and the symbol before anything runs."""
        feed = check_names_and_dtypes(self.graph.inputs, feed)
        return self._specialization(feed).run(self._tensor_feed(feed))

    __call__ = run

    def profile(self, feed, repeat: int = 10, in_order: bool = False) -> List[Tuple[str, float]]:
        feed = check_names_and_dtypes(self.graph.inputs, feed)
        return self._specialization(feed).profile(self._tensor_feed(feed), repeat, in_order)

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
    def export_library(self, path, prefix: str = "lw_", params: str = "embed", cc=None):
        """Not for dynamic shapes yet: the C API has fixed shapes (an ArgumentError that says what to do)."""
        raise export_needs_fixed_shapes(self.inputs)

    def save(self, path) -> None:
        """A checksummed zip (``archive.py``): meta.json, model.onnx, and one nested executable per
        compiled specialisation."""
        entries = []
        with ArchiveWriter(path) as z:
            z.add("model.onnx", self.graph.model_bytes)
            for k, (key, exe) in enumerate(self.specializations.items()):
                buf = io.BytesIO()
                exe.save(buf)
                z.add(f"specializations/{k}.lwx", buf.getvalue())
                entries.append({"file": f"specializations/{k}.lwx",
                                "shapes": [[n, list(shape)] for n, shape in (e for e in key if len(e) == 2)],
                                "values": [[n, dt, list(shape), data.hex()]
                                           for n, dt, shape, data in (e for e in key if len(e) == 4)]})
            z.finish({"format": FORMAT, "version": VERSION, "name": self.graph.name, "opset": self.graph.opset,
                      "value_inputs": self.graph.value_inputs, "specializations": entries})


def check_dynamic_meta(reader: ArchiveReader) -> None:
    """Refuse other versions, and a meta.json whose keys a DynamicGraph needs are missing or mistyped."""
    meta, check = reader.meta, MetaChecker(reader.where)
    if meta.get("version") != VERSION:
        raise ArgumentError(f"{reader.where}: unsupported dynamic executable version {meta.get('version')!r} "
                            f"(this loopweave reads version {VERSION})")
    check.get(meta, "name", str)
    check.get(meta, "opset", int)
    if not all(isinstance(n, str) for n in check.get(meta, "value_inputs", list)):
        check.fail("has a bad 'value_inputs'")
    check.get(meta, "specializations", list)


def load_dynamic(reader: ArchiveReader, graph) -> DynamicExecutable:
    """A DynamicExecutable over ``graph`` (rebuilt by the caller from the archive's model) with the
    specialisations saved by ``DynamicExecutable.save``; every member is verified first."""
    check_dynamic_meta(reader)
    check = MetaChecker(reader.where)
    exe = DynamicExecutable(graph)
    for entry in reader.meta["specializations"][-exe.max_specializations:]:
        member = check.get(entry, "file", str, "specializations.")
        try:
            key = tuple((n, tuple(check.shape(s, n))) for n, s in entry["shapes"])
            key += tuple((n, dt, tuple(check.shape(shape, n)), bytes.fromhex(data))
                         for n, dt, shape, data in entry["values"])
        except (KeyError, TypeError, ValueError):
            check.fail(f"has a malformed entry for {member!r}")
        exe.specializations[key] = load_static(io.BytesIO(reader.read(member)), f"{reader.where} member {member!r}")
    return exe
