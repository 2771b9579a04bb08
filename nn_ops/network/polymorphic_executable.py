"""PolymorphicExecutable: a network compiled once for every binding of its symbolic sizes.

Made by ``lw.compile(graph, polymorphic=True)`` from a DynamicGraph
(``compile_once/builder.py`` builds the kernels).  Each kernel was built once with its
symbolic extents as ``lw.var`` sizes, which the kernel takes as arguments.  ``run`` checks the
feed against the symbolic signature, evaluates the symbolic memory plan (``symbolic_plan.py``)
at the binding, fills the call tables for that binding (``call_list.py``: argument pointers into
one arena, each call's sizes, and the variant of each call that the binding picks:
``KernelCall.variants``, e.g. a dense layer's kernel for few rows) and runs every kernel with one
native call.  A variant the compile deferred (``pending_kernels.Deferred``: a conv's Winograd and
row-block kernels) is built when the first binding that picks it fills its table; nothing else is
compiled at run time, and ``build_variants`` builds them all up front.  A plain feed at the shapes
of a recent binding skips all of that but the lookup of its tables by the shapes.  The kernels write the outputs into
new arrays, as the static executable's do.  Constants lie in one block, each 64-byte aligned.
``run_each`` calls the kernels one by one from Python through their own argument checks instead.

``save`` writes the model, the runner and each distinct kernel's object code; ``lw.load``
rebuilds the calls and the plan from the model and loads the objects (nothing is lowered or
compiled).  Shapes that are views of others (Reshape and friends) cost nothing.
"""
from __future__ import annotations

import dataclasses
import threading
from dataclasses import dataclass
from typing import Callable, Dict, List, Optional, Sequence, Tuple

import numpy as np

from ...backends.aligned_memory import aligned_empty, aligned_size
from ...backends.llvm.call_list_runner import call_list_runner
from ...backends.runtime import clear_error_slot
from ...backends.timing import per_call_medians
from ...errors import ArgumentError, InternalError
from ...target import resolve_target
from .archive import ArchiveReader, ArchiveWriter, MetaChecker
from . import call_list, symbolic as S
from .kernel_cache import kernel_entry, kernel_module
from .pending_kernels import Deferred, build_deferred
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
    ``at_most``: the same arguments and size vars as the call's general ``module`` (a ``Deferred`` one
    until a binding picks it)."""

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


@dataclass(frozen=True)
class BoundCalls:
    """A run at one binding: its call table, ``fresh`` the (shape, dtype) of each output the kernels
    write into a new array per run (the table takes those arrays' pointers after the feed's), and
    ``made`` how each output is made where not every one is such: ("fresh", k), ("copy", an arena
    view or a constant) or ("feed", input position, its shape or None: an input given back)."""

    table: call_list.CallTable
    fresh: tuple
    made: Optional[tuple]


def _made(how: tuple, feed: List[np.ndarray], fresh: List[np.ndarray]) -> np.ndarray:
    """The output ``how`` says (``BoundCalls.made``), a new array."""
    if how[0] == "fresh":
        return fresh[how[1]]
    if how[0] == "copy":
        return np.array(how[1])
    source = feed[how[1]]
    return np.array(source if how[2] is None else source.reshape(how[2]))


@dataclass
class View:
    """``name`` is ``source`` read with another shape (a Reshape of contiguous data)."""

    name: str
    source: str
    shape: tuple


def _in_one_block(constants: Dict[str, np.ndarray]) -> Dict[str, np.ndarray]:
    """The constants as contiguous views of one buffer, each starting on 64 bytes, as the static
    executable's weights lie.  numpy puts a large array 16 bytes into its pages: a kernel streaming a
    weight in 64-byte vectors then touches two cache lines per load (the few-rows dense kernels ran at
    ~0.6x of the static ones).  And numpy asks huge pages for an allocation from 4 MB, which arrays of
    their own (a layer's weight, up to 1 MB in the zoo encoder) are not: a one-token encoder run, which
    streams all its weights once, took 2-9 % longer with them on 4 KB pages (one thread, under load)."""
    offsets, total = {}, 0
    for name, a in constants.items():
        offsets[name] = total
        total += aligned_size(a.nbytes)
    block = aligned_empty(total)
    placed = {}
    for name, a in constants.items():
        view = block[offsets[name]:offsets[name] + a.nbytes].view(a.dtype).reshape(a.shape)
        view[...] = a
        placed[name] = view
    return placed


class PolymorphicExecutable:
    def __init__(self, signature: SymbolicSignature, calls: Sequence[KernelCall], views: Sequence[View],
                 plan: SymbolicPlan, constants: Dict[str, np.ndarray], outputs: Sequence[str], name: str = "graph",
                 kernels: Dict[str, object] = None, model_bytes: bytes = b"", opset: int = 0, target=None,
                 tables: Dict[str, BindingTable] = None):
        self.signature, self.calls, self.plan = signature, list(calls), plan
        self.tables = dict(tables or {})
        self.views = list(views)
        self.constants = _in_one_block(constants)
        self.output_names = list(outputs)
        self.name = name
        self.kernels = dict(kernels or {})      # structural key (text) -> Module: what save writes
        self.model_bytes, self.opset, self.target = model_bytes, opset, target
        self.tuned_kernels = 0                  # distinct kernels scheduled from a tuning record (not saved)
        self._view_shapes: Dict[tuple, list] = {}
        self.runner_object, self._runner = b"", None
        # input shapes -> the calls bound there: a binding that ran, so passed its checks; cleared when
        # the arena moves
        self._tables: Dict[tuple, BoundCalls] = {}
        self._tables_arena = -1
        self._plain_inputs = tuple((n, np.dtype(dt)) for n, _, dt in signature.inputs)
        self._sources = {v.name: v.source for v in self.views}
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
            bound, arrays = self._recent(feed) or self._checked(feed)
            fresh = [np.empty(shape, dtype) for shape, dtype in bound.fresh]
            if bound.table.run(self._runner, arrays + fresh):
                self._raise_index_error(bound.table)
            if bound.made is None:
                return fresh
            return [_made(how, arrays, fresh) for how in bound.made]

    def _recent(self, feed) -> Optional[Tuple["BoundCalls", List[np.ndarray]]]:
        """(the calls bound at its shapes, the feed's arrays in input order) when ``feed`` is plain (a
        dict of exactly the inputs, C-contiguous arrays of the right dtypes) at shapes whose binding ran
        (so passed its checks) since the arena last moved, else None (``_checked``): one dict lookup by
        the shapes, no sympy."""
        if type(feed) is not dict or len(feed) != len(self._plain_inputs):
            return None
        arrays, shapes = [], []
        for name, dtype in self._plain_inputs:
            a = feed.get(name)
            if type(a) is not np.ndarray or a.dtype != dtype or not a.flags.c_contiguous:
                return None
            arrays.append(a)
            shapes.append(a.shape)
        bound = self._tables.get(tuple(shapes))
        return None if bound is None else (bound, arrays)

    def _checked(self, feed) -> Tuple["BoundCalls", List[np.ndarray]]:
        """``_recent``'s pair for any feed: its names, dtypes, shapes and the graph's run-time checks
        checked (an ``ArgumentError`` names what is wrong), its arrays made contiguous, and the calls
        bound at its binding where they were not."""
        feed = check_names_and_dtypes(self.signature.inputs, feed)
        binding = self.bind(feed)
        arrays = [np.ascontiguousarray(feed[n]) for n, _ in self._plain_inputs]
        planned = self._planned(binding)
        key = tuple(a.shape for a in arrays)
        bound = self._tables.get(key)
        if bound is None:
            if len(self._tables) >= 8:
                self._tables.pop(next(iter(self._tables)))
            bound = self._tables[key] = self._bind_calls(binding, planned)
        return bound, arrays

    def _bind_calls(self, binding, planned: Dict[str, np.ndarray]) -> "BoundCalls":
        """The call table at ``binding`` and how each output is made.  An output that is all of a
        kernel's result, and the only output in that memory, is written by the kernels into a new
        array per run (every argument in that memory points into it), as the static executable's
        are; the others are copied out of the arena, the constants or the feed."""
        arrays = dict(self.constants)
        arrays.update(planned)
        tables = {n: t.at(binding) for n, t in self.tables.items()}
        arrays.update(tables)
        position = {n: k for k, (n, _) in enumerate(self._plain_inputs)}
        roots = [self._root(n) for n in self.output_names]
        fresh, made, written = [], [], {}
        for name, root in zip(self.output_names, roots):
            if (root in planned and roots.count(root) == 1 and planned[name].nbytes == planned[root].nbytes
                    and planned[name].ctypes.data == planned[root].ctypes.data):
                written[root] = len(position) + len(fresh)
                made.append(("fresh", len(fresh)))
                fresh.append((planned[name].shape, planned[name].dtype))
            elif root in position:              # an input (or a view of one) given back
                made.append(("feed", position[root], None if name == root else self._shape_at(name, binding)))
            else:
                made.append(("copy", planned[name] if name in planned else self._constant_output(name, binding)))
        patched = {}
        for call in self.calls:
            for name in call.args:
                root = self._root(name)
                if root in position:
                    patched[name] = (position[root], 0)
                elif root in written:
                    patched[name] = (written[root], arrays[name].ctypes.data - arrays[root].ctypes.data)
        table = call_list.CallTable([(m, c.args, c.sizes) for m, c in zip(self._modules_at(binding), self.calls)],
                                    arrays, binding, patched, keep=tables.values())
        return BoundCalls(table, tuple(fresh), None if len(fresh) == len(made) else tuple(made))

    def _modules_at(self, binding) -> list:
        """The kernel each call runs at ``binding``, the deferred ones among them built first (in one
        ``build_many``: the first run at a binding that picks them pays their compile)."""
        modules = [c.module_at(binding) for c in self.calls]
        return [c.module_at(binding) for c in self.calls] if self._build_deferred(modules) else modules

    def build_variants(self) -> None:
        """Build every variant still deferred, so that no run compiles (``save`` and ``export_library``
        write them all)."""
        with self._lock:
            self._build_deferred(v.module for c in self.calls for v in c.variants)

    def _build_deferred(self, modules) -> bool:
        """Build the ``Deferred`` kernels among ``modules`` in one ``build_many`` and put them in place
        of those in the calls and the kernel table (the caller holds the lock); whether there were any."""
        deferred = {id(m): m for m in modules if isinstance(m, Deferred)}
        if not deferred:
            return False
        built = build_deferred(deferred.values(), self.target)
        for call in self.calls:
            call.variants = tuple(dataclasses.replace(v, module=built.get(id(v.module), v.module))
                                  for v in call.variants)
        self.kernels = {key: built.get(id(m), m) for key, m in self.kernels.items()}
        return True

    def _constant_output(self, name: str, binding) -> np.ndarray:
        """Output ``name`` where it is a constant (or a view of one): a network that gives back a weight."""
        root = self._root(name)
        return self.constants[root] if root == name else self.constants[root].reshape(self._shape_at(name, binding))

    def _planned(self, binding) -> Dict[str, np.ndarray]:
        """The arena views at ``binding``; where the arena had to move, the call tables (which point
        into the old one) are dropped."""
        planned = self.plan.arrays(binding)
        if self._tables_arena != self.plan.grown:
            self._tables.clear()
            self._tables_arena = self.plan.grown
        return planned

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

    def _root(self, name: str) -> str:
        """The value whose memory ``name`` is (through views)."""
        while name in self._sources:
            name = self._sources[name]
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
        for call, module in zip(self.calls, self._modules_at(binding)):
            try:
                module(*(arrays[a] for a in call.args))
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
        bound, arrays = self._checked(feed)
        fresh = [np.empty(shape, dtype) for shape, dtype in bound.fresh]
        bound.table.patch(arrays + fresh)                 # (alive until the calls are timed)
        table = bound.table
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
        self.build_variants()
        return export_polymorphic_library(self, path, prefix, params, cc, levels)

    def save(self, path) -> None:
        """A checksummed zip (``archive.py``): meta.json, model.onnx and each distinct kernel's object
        code with its structural key; ``lw.load`` rebuilds the calls and the plan from the model (no
        lowering, no LLVM) and loads the objects."""
        self.build_variants()
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
