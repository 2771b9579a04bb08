"""PolymorphicExecutable: a network compiled once for every binding of its symbolic sizes.

Made by ``lw.compile(graph, polymorphic=True)`` from a DynamicGraph
(``compile_once/builder.py`` builds the kernels).  Each kernel was built once with its
symbolic extents as ``lw.var`` sizes, which the kernel takes as arguments.  ``run`` checks the
feed against the symbolic signature, evaluates the symbolic memory plan (``symbolic_plan.py``)
at the binding, fills (or reuses) the call tables for that binding (``call_list.py``: argument
pointers into one arena, each call's sizes, and the variant of each call that the binding picks:
``KernelCall.variants``, e.g. a dense layer's kernel for few rows) and runs every kernel with one
native call; nothing is compiled at run time.  Constants are kept 64-byte aligned.  ``run_each``
calls the kernels one by one from Python through their own argument checks instead.

``save`` writes the model, the runner and each distinct kernel's object code; ``lw.load``
rebuilds the calls and the plan from the model and loads the objects (nothing is lowered or
compiled).  Shapes that are views of others (Reshape and friends) cost nothing.
"""
from __future__ import annotations

import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Sequence, Tuple

import numpy as np

from ...backends.aligned_memory import ALIGN, aligned_empty
from ...backends.llvm.call_list_runner import call_list_runner
from ...backends.runtime import clear_error_slot
from ...backends.timing import per_call_medians
from ...errors import ArgumentError, InternalError
from ...target import resolve_target
from .archive import ArchiveReader, ArchiveWriter, MetaChecker
from . import call_list, symbolic as S
from .kernel_cache import kernel_entry, kernel_module
from .feed import check_names_and_dtypes, show_shape
from .signature import SymbolicSignature
from .executable import index_out_of_range
from .export_polymorphic import export_polymorphic_library
from .symbolic_plan import SymbolicPlan

FORMAT = "loopweave-polymorphic-executable"
VERSION = 1


@dataclass(frozen=True)
class Variant:
    """A specialised kernel of a call, taken at bindings where ``rows`` (a sympy size) is at most
    ``at_most``: the same arguments and size vars as the call's general ``module``."""

    module: object
    rows: object
    at_most: int


@dataclass
class KernelCall:
    """One kernel call: ``module(*arrays of args)``; ``node`` names the graph node it computes.
    ``variants`` are tried in order at each binding (``module_at``); ``module`` runs where none
    applies (a dense layer's streaming kernel for few rows next to its blocked one)."""

    node: str
    module: object
    args: Tuple[str, ...]
    sizes: Dict[str, object]        # the module's size vars ("v0", ...) as sympy sizes of this call
    variants: Tuple[Variant, ...] = ()

    def module_at(self, binding: Dict[str, int]):
        """The kernel this call runs at ``binding`` (evaluated once per binding's call table)."""
        for v in self.variants:
            if int(S.evaluate(v.rows, binding)) <= v.at_most:
                return v.module
        return self.module


@dataclass(frozen=True)
class BindingTable:
    """A kernel argument computed from the binding, once per call table: a Resize's source
    indices and weights where the output sizes, or their ratio to the input's, are known only at
    run time (``compile_once/cnn.py``'s ``resize``)."""

    shape: tuple                # sympy sizes
    dtype: str
    compute: Callable[[Dict[str, int]], np.ndarray]

    def at(self, binding: Dict[str, int]) -> np.ndarray:
        a = np.ascontiguousarray(self.compute(binding), dtype=self.dtype)
        want = tuple(int(S.evaluate(d, binding)) for d in self.shape)
        if a.shape != want:
            raise InternalError(f"a binding table has shape {a.shape}, its kernel takes {want}; please report")
        return a


@dataclass
class View:
    """``name`` is ``source`` read with another shape (a Reshape of contiguous data)."""

    name: str
    source: str
    shape: tuple


def _aligned(a: np.ndarray) -> np.ndarray:
    """``a`` in contiguous memory that starts on a 64-byte boundary.  numpy puts a large array 16
    bytes into its pages: a kernel streaming a weight in 64-byte vectors then touches two cache lines
    per load (the few-rows dense kernels ran at ~0.6x of the static ones, whose weights sit in one
    aligned blob)."""
    a = np.ascontiguousarray(a)
    if a.ctypes.data % ALIGN == 0 or a.nbytes == 0:
        return a
    out = aligned_empty(a.nbytes).view(a.dtype).reshape(a.shape)
    out[...] = a
    return out


class PolymorphicExecutable:
    def __init__(self, signature: SymbolicSignature, calls: Sequence[KernelCall], views: Sequence[View],
                 plan: SymbolicPlan, constants: Dict[str, np.ndarray], outputs: Sequence[str], name: str = "graph",
                 kernels: Dict[str, object] = None, model_bytes: bytes = b"", opset: int = 0, target=None,
                 tables: Dict[str, BindingTable] = None):
        self.signature, self.calls, self.plan = signature, list(calls), plan
        self.tables = dict(tables or {})
        self.views = list(views)
        self.constants = {n: _aligned(a) for n, a in constants.items()}
        self.output_names = list(outputs)
        self.name = name
        self.kernels = dict(kernels or {})      # structural key (text) -> Module: what save writes
        self.model_bytes, self.opset, self.target = model_bytes, opset, target
        self.tuned_kernels = 0                  # distinct kernels scheduled from a tuning record (not saved)
        self._view_shapes: Dict[tuple, list] = {}
        self.runner_object, self._runner = b"", None
        # input shapes -> (call table, the outputs' arena views, or None where an output is an input):
        # a binding that ran, so passed its checks; cleared when the arena moves
        self._tables: Dict[tuple, tuple] = {}
        self._tables_arena = -1
        self._plain_inputs = tuple((n, np.dtype(dt)) for n, _, dt in signature.inputs)
        # one run at a time: runs share the arena and the call tables (the native call releases the
        # GIL, and two threads' runs wrote over each other's values)
        self._lock = threading.RLock()

    @property
    def inputs(self) -> List[Tuple[str, tuple, str]]:
        return [(n, tuple(S.show(d) if not S.is_static(d) else int(d) for d in s), dt)
                for n, s, dt in self.signature.inputs]

    @property
    def outputs(self):
        return [(n, tuple(S.show(d) for d in s) if s is not None else None, dt) for n, s, dt in self.signature.outputs]

    def bind(self, feed) -> Dict[str, int]:
        binding = self.signature.bind(feed)
        self.signature.check(binding)
        return binding

    def use_runner(self, obj: bytes) -> None:
        """Run through the native call-list loop of object code ``obj`` (``backends/llvm/call_list_runner.py``)."""
        self.runner_object = obj
        self._runner = call_list_runner(obj)
        self._tables.clear()

    def run(self, feed) -> List[np.ndarray]:
        """Run on ``feed`` ({input name: array}); the outputs are new arrays.  One native call runs
        every kernel (the call tables of the last few bindings are kept).  Safe to call from several
        threads: their runs take turns."""
        if self._runner is None:
            return self.run_each(feed)
        with self._lock:
            return self._run(feed)

    def _run(self, feed) -> List[np.ndarray]:
        plain = self._plain_run(feed)
        if plain is not None:
            (table, outputs), arrays = plain
            if table.run_plain(self._runner, arrays):
                self._raise_index_error(table)
            return [np.array(o) for o in outputs]
        feed = check_names_and_dtypes(self.signature.inputs, feed)
        binding = self.bind(feed)
        feed = {n: np.ascontiguousarray(a) for n, a in feed.items()}
        planned = self._planned(binding)
        key = self._shapes_key(feed)
        entry = self._tables.get(key)
        if entry is None:
            arrays = dict(self.constants)
            arrays.update(planned)
            tables = {n: t.at(binding) for n, t in self.tables.items()}
            arrays.update(tables)
            roots = {v.name: self._feed_root(v.name) for v in self.views}
            inputs = {n: n for n in feed}
            inputs.update({name: root for name, root in roots.items() if root in feed})
            table = call_list.CallTable([(c.module_at(binding), c.args, c.sizes) for c in self.calls], arrays,
                                        binding, inputs, [n for n, _ in self._plain_inputs], keep=tables.values())
            views = None
            if all(n in planned or self._feed_root(n) in self.constants for n in self.output_names):
                views = [planned[n] if n in planned else self._constant_output(n, binding) for n in self.output_names]
            if len(self._tables) >= 8:
                self._tables.pop(next(iter(self._tables)))
            entry = self._tables[key] = (table, views)
        table = entry[0]
        if table.run(self._runner, feed):
            self._raise_index_error(table)
        outputs = []
        for n in self.output_names:
            source = planned.get(n)
            if source is None and self._feed_root(n) in self.constants:
                source = self._constant_output(n, binding)
            elif source is None:      # an input (or a view of one) given back as an output
                root = self._feed_root(n)
                source = feed[root].reshape(self._shape_at(n, binding))
            outputs.append(np.array(source))
        return outputs

    def _constant_output(self, name: str, binding) -> np.ndarray:
        """Output ``name`` where it is a constant (or a view of one): a network that gives back a weight."""
        root = self._feed_root(name)
        return self.constants[root] if root == name else self.constants[root].reshape(self._shape_at(name, binding))

    def _planned(self, binding) -> Dict[str, np.ndarray]:
        """The arena views at ``binding``; where the arena had to move, the call tables (which point
        into the old one) are dropped."""
        planned = self.plan.arrays(binding)
        if self._tables_arena != self.plan.grown:
            self._tables.clear()
            self._tables_arena = self.plan.grown
        return planned

    def _shapes_key(self, feed) -> tuple:
        """The call tables' key: the inputs' shapes, which fix the binding."""
        return tuple(feed[n].shape for n, _ in self._plain_inputs)

    def _plain_run(self, feed):
        """((call table, output views), input arrays) when ``feed`` is plain (a dict of exactly the
        inputs, C-contiguous arrays of the right dtypes) at shapes whose binding ran (so passed its
        checks) since the arena last moved, else None (``run``'s checked path).  The checked path
        cost ~7 us of a 100 us one-token encoder run; this one ~2."""
        if type(feed) is not dict or len(feed) != len(self._plain_inputs):
            return None
        arrays = []
        for name, dtype in self._plain_inputs:
            a = feed.get(name)
            if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous:
                return None
            arrays.append(a)
        entry = self._tables.get(tuple(a.shape for a in arrays))
        if entry is None or entry[1] is None:
            return None
        return entry, arrays

    def _raise_index_error(self, table):
        """IndexOutOfRangeError naming the node whose index check failed and its graph values (the
        kernel's ``inK``): the runner stops after that call without saying which, so the calls are
        replayed one by one up to it (only on this error path; they recompute the same values)."""
        clear_error_slot(table.err)
        failed = None
        for k, call in enumerate(self.calls):
            table.entry(k)()
            if table.err[0]:
                failed = call
                break
        if failed is None:
            raise InternalError(f"{self.name}: an index check failed once and not when the calls were replayed")
        raise index_out_of_range(table.err, failed.args, f"node '{failed.node}' ({failed.module.name})", failed.node)

    def _feed_root(self, name: str) -> str:
        sources = {v.name: v.source for v in self.views}
        while name in sources:
            name = sources[name]
        return name

    def _shape_at(self, name: str, binding) -> tuple:
        view = next(v for v in self.views if v.name == name)
        return tuple(int(S.evaluate(d, binding)) for d in view.shape)

    def run_each(self, feed) -> List[np.ndarray]:
        """``run`` with each kernel called from Python through its own argument checks (slower; a
        check of the call tables, and what a kernel refusing its arrays would name)."""
        with self._lock:
            return self._run_each(feed)

    def _run_each(self, feed) -> List[np.ndarray]:
        feed = check_names_and_dtypes(self.signature.inputs, feed)
        binding = self.bind(feed)
        arrays = dict(self.constants)
        arrays.update({n: np.ascontiguousarray(a) for n, a in feed.items()})
        arrays.update(self._planned(binding))
        arrays.update({n: t.at(binding) for n, t in self.tables.items()})
        for name, source, shape in self._input_views(binding):
            arrays[name] = arrays[source].reshape(shape)
        for call in self.calls:
            try:
                call.module_at(binding)(*(arrays[a] for a in call.args))
            except ArgumentError as exc:        # a kernel refusing planned arrays is a compiler bug
                raise ArgumentError(f"node {call.node!r}: {exc}") from exc
        return [np.array(arrays[n]) for n in self.output_names]

    __call__ = run

    def profile(self, feed, repeat: int = 10, in_order: bool = False) -> List[Tuple[str, float]]:
        """(node, median seconds) of each kernel call at ``feed``'s binding, run on its own through the
        call table (for finding hot spots): ``repeat`` times in a row, or with ``in_order`` once per
        pass over the calls in run order, as a run sees the caches (``Executable.profile``)."""
        with self._lock:
            return self._profile(feed, repeat, in_order)

    def _profile(self, feed, repeat: int, in_order: bool) -> List[Tuple[str, float]]:
        self.run(feed)                                    # fills the table of this binding
        feed = {n: np.ascontiguousarray(a) for n, a in check_names_and_dtypes(self.signature.inputs, feed).items()}
        table = self._tables[self._shapes_key(feed)][0]
        for ptrs, j, name in table.patches:
            ptrs[j] = feed[name].ctypes.data
        return per_call_medians([(call.node, table.entry(k)) for k, call in enumerate(self.calls)], repeat, in_order)

    def _input_views(self, binding) -> List[Tuple[str, str, tuple]]:
        """(view, source, concrete shape) of the views outside the arena (of inputs), per binding."""
        key = tuple(sorted(binding.items()))
        found = self._view_shapes.get(key)
        if found is None:
            found = [(v.name, v.source, tuple(int(S.evaluate(d, binding)) for d in v.shape)) for v in self.views
                     if v.name not in self.plan.slot_of or v.source not in self.plan.slot_of]
            if len(self._view_shapes) >= 8:
                self._view_shapes.pop(next(iter(self._view_shapes)))
            self._view_shapes[key] = found
        return found

    def export_library(self, path, prefix: str = "lw_", params: str = "embed", cc=None, levels=()):
        """Write the network as a shared library whose C API takes the sizes (``model.so`` and
        ``model.h``; ``export_polymorphic.py``); returns the library's path."""
        return export_polymorphic_library(self, path, prefix, params, cc, levels)

    def save(self, path) -> None:
        """A checksummed zip (``archive.py``): meta.json, model.onnx and each distinct kernel's object
        code with its structural key; ``lw.load`` rebuilds the calls and the plan from the model (no
        lowering, no LLVM) and loads the objects."""
        entries = []
        with ArchiveWriter(path) as z:
            z.add("model.onnx", self.model_bytes)
            z.add("runner.o", self.runner_object)
            for k, (key, module) in enumerate(self.kernels.items()):
                z.add(f"kernels/{k}.o", module.object_code)
                entries.append({"key": key, "file": f"kernels/{k}.o", **kernel_entry(module)})
            z.finish({"format": FORMAT, "version": VERSION, "name": self.name, "opset": self.opset,
                      "target": {"kind": self.target.kind, "cpu": self.target.cpu, "features": self.target.features},
                      "kernels": entries})

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d}{show_shape(s)}" for n, s, d in self.inputs)
        return (f"<loopweave PolymorphicExecutable {self.name!r} ({ins}): {len(self.calls)} kernel calls, "
                f"{len(self.kernels) or len({id(c.module) for c in self.calls})} distinct kernels"
                f"{f' ({self.tuned_kernels} from tuning records)' if self.tuned_kernels else ''}, "
                f"{len(self.plan.slot_sizes)} arena slots>")

    def _repr_html_(self) -> str:
        """The signature, the run-time checks, each kernel call with its arguments' symbolic shapes,
        and the arena slots' symbolic sizes."""
        import html
        shapes = dict((n, s) for n, s, _ in self.signature.inputs)
        shapes.update((n, shape) for n, (shape, _) in self.plan.values.items())
        shapes.update((v.name, v.shape) for v in self.views)
        shapes.update((n, tuple(S.dim(int(d)) for d in a.shape)) for n, a in self.constants.items())
        shapes.update((n, t.shape) for n, t in self.tables.items())

        def arg(name):
            return f"{name}{show_shape([S.show(d) for d in shapes[name]])}" if name in shapes else name
        def variants(c):
            return "".join(f"; <code>{html.escape(v.module.name)}</code> where {html.escape(S.show(v.rows))} &lt;= "
                           f"{v.at_most}" for v in c.variants)
        calls = "".join(f"<li>{html.escape(c.node)}: <code>{html.escape(c.module.name)}</code>("
                        f"{html.escape(', '.join(arg(a) for a in c.args))}){variants(c)}</li>" for c in self.calls)
        checks = "".join(f"<li>{html.escape(c.node)}: {html.escape(c.message)}</li>" for c in self.signature.checks)
        slots = ", ".join(html.escape(S.show(size)) for size in self.plan.slot_sizes)
        return (f"<div>{html.escape(repr(self))}<div>run-time checks:</div><ul>{checks or '<li>none</li>'}</ul>"
                f"<div>kernel calls:</div><ol>{calls}</ol><div>arena slots (bytes): {slots}</div></div>")


def load_polymorphic_kernels(reader: ArchiveReader) -> Dict[str, object]:
    """The kernels of a saved PolymorphicExecutable by structural key, loaded (every member verified
    first; objects compiled for another CPU or feature string are refused)."""
    meta, where, check = reader.meta, reader.where, MetaChecker(reader.where)
    if meta.get("version") != VERSION:
        raise ArgumentError(f"{where}: unsupported polymorphic executable version {meta.get('version')!r} "
                            f"(this loopweave reads version {VERSION})")
    host = resolve_target("llvm")
    saved = check.get(meta, "target", dict)
    cpu, features = check.get(saved, "cpu", str, "target."), check.get(saved, "features", str, "target.")
    if cpu != host.cpu or features != host.features:
        raise ArgumentError(f"{where} was compiled for cpu {saved['cpu']!r} with other CPU features than "
                            f"this machine ({host.cpu!r}); compile the model again here")
    kernels = {}
    for entry in check.get(meta, "kernels", list):
        key, member = check.get(entry, "key", str, "kernels."), check.get(entry, "file", str, "kernels.")
        for field, kind in (("symbol", str), ("name", str), ("params", list), ("size_names", list)):
            check.get(entry, field, kind, "kernels.")
        obj = reader.read(member)                       # verified against its checksum, loaded or not
        try:
            kernels[key] = kernel_module(entry, obj, host)
        except (KeyError, TypeError):
            check.fail(f"has malformed parameters for kernel {entry['name']!r}")
    return kernels
