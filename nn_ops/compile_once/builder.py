"""``build_polymorphic(graph)``: a DynamicGraph compiled once, its kernels taking symbolic extents.

The compile-once executables (``lw.compile(graph, polymorphic=True)``).
It walks the ONNX model with the symbolic shapes of ``symbolic_shapes.py`` and builds each kernel
once with ``lw.build`` over placeholders whose symbolic sizes are ``lw.var`` s: one var per
distinct symbolic extent of the kernel's arguments, so a kernel over ``(batch*seq, 256)`` takes
one size (the call table passes its value; ``lw.build``'s runtime can also bind it from the
arrays).  Identical kernels (the same op, attributes and pattern of extents) are built once.
A MatMul/Gemm by a constant float32 weight on the CPU gets the weight packed in column panels
once (``_Builder.panels``, the static path's layout) and one register-blocked kernel for every
row count; elsewhere it also gets a few-rows variant (``FEW_ROWS``): the streaming
``matmul_small_m`` schedule with the same arguments, which the executable's call table picks at
bindings whose row count is that small (invisible to the user; saved and loaded like the others).

Covered: MatMul by a constant 2-d weight (a ``matmul`` over the flattened rows), MatMul of two
computed operands with equal batch axes (``batch_matmul``), Gemm by a constant, broadcasting
elementwise arithmetic, Cast and the common activations -- elementwise nodes right after a
MatMul/Gemm (or another elementwise node) join its kernel as an epilogue --, Softmax and
LayerNormalization (over (rows, n) views), Transpose, and the shape-only ops (Reshape, Flatten,
Squeeze, Unsqueeze as views; Shape/Gather/Concat chains on shape values computed at import); CNNs
in ``cnn.py``; layout and index ops, normalizations, quantization and Einsum in
``general_ops.py``; Attention, RotaryEmbedding and integer matmuls in
``transformer_ops.py``.  Everything else is listed in one ``OnnxImportError`` (compile without
``polymorphic=True`` to specialise per shape).
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

import numpy as np
import sympy

from ...backends import build_workers
from ...backends.llvm.call_list_runner import call_list_object
from ...dsl import intrinsics as lwi
from ...dsl.expr import binary, cast, const
from ...dsl.tensor import compute, placeholder
from ...errors import OnnxImportError
from ...target import resolve_target
from ..network import kernel_cache, symbolic as S
from ..network.op_table import SMALL_M
from ..network.signature import RuntimeCheck
from ..network.polymorphic_executable import BindingTable, KernelCall, PolymorphicExecutable, Variant, View
from ..network.symbolic_plan import SymbolicPlan
from ..network.pending_kernels import Deferred, Pending, build_pending
from ..ops.arg_reduce import arg_reduce
from ..ops.conv2d_transpose import conv2d_transpose
from ..ops.elementwise import broadcast_index
from ..ops.gemv import matmul_small_m
from ..ops.index import gather, gather_elements
from ..ops.matmul import batch_matmul, matmul, matmul_panels, pack_panels, panel_width
from ..ops.norm import layer_norm
from ..ops.registry import schedule
from ..ops.shape import concat, reduce, softmax, transpose
from ..ops.topk import topk_indices
from ..onnx_import.context import Unsupported, onnx_attrs
from ..onnx_import.converters.math import REDUCE_BETWEEN
from ..onnx_import.fold import FOLDERS, WINDOW_TERMS
from ..onnx_import.fold_size import check_folded_size
from ..onnx_import.importer import node_label
from .cnn import CnnWalk
from .instance import KernelRecipe
from .tuned import tuned_schedule
from ..network.conv_variants import KernelVariant, multiple_name
from .common import (BINARY, FLOAT_ONLY, INTEGER, PREDICATES, TERNARY, UNARY, VARIADIC, WITH_ATTRS,
                                 _apply, _attr, _elementwise, _same, _show, conv_transpose_attrs,
                                 node_params)
from .general_ops import OPS, pad_kernel
from .transformer_ops import OPS as TRANSFORMER_OPS


VIEWS = ("Reshape", "Flatten", "Squeeze", "Unsqueeze")
CNN_OPS = ("Conv", "MaxPool", "AveragePool", "GlobalAveragePool", "GlobalMaxPool")    # cnn.py (and below)
REDUCES = {"ReduceMean": (None, "mean", None), "ReduceSum": (None, "sum", None), "ReduceMax": (None, "max", None),
           "ReduceMin": (None, "min", None), **REDUCE_BETWEEN}
#: the steps around a reduction (``REDUCE_BETWEEN``'s names), per element
_REDUCE_STEPS = {"abs": lwi.abs, "square": lambda v: v * v, "sqrt": lwi.sqrt, "log": lwi.log}
COVERED = set(BINARY) | set(UNARY) | set(TERNARY) | set(WITH_ATTRS) | set(PREDICATES) | set(VARIADIC) | \
    set(INTEGER) | set(VIEWS) | set(CNN_OPS) | set(REDUCES) | set(OPS) | set(TRANSFORMER_OPS) | {
        "Clip", "Cast", "CastLike", "MatMul", "Gemm", "Transpose", "Softmax", "LogSoftmax", "LayerNormalization",
        "Constant", "Dropout", "Shape", "Gather", "Concat", "BatchNormalization", "Expand", "Range", "Slice",
        "ConvTranspose", "Resize", "ArgMax", "ArgMin", "TopK", "Pad"}
NO_KERNEL = "no shape-polymorphic kernel for this op yet"
# A dense layer (MatMul/Gemm by a constant) at this many rows or fewer runs its few-rows variant:
# ``matmul_small_m``'s streaming schedule, B read in place (no per-call packing of its panels, which
# for one row costs as much as the product).  The static path's threshold: whole-encoder runs (Zen 4,
# 1 thread) put the crossover near 14 rows (the blocked kernel ran 2x slower at 1-4 rows, 1.1x at 12,
# 0.9x at 16); kernels timed one by one with their weights in cache put it near 5, and 2 threads
# (on a loaded machine) near 7 -- measure both paths together before moving it.
FEW_ROWS = SMALL_M


class _Unsupported(Exception):
    pass


def build_polymorphic(graph, target="llvm", prebuilt: Optional[Dict[str, object]] = None,
                      runner_object: Optional[bytes] = None, checks: Optional[str] = None,
                      tuning_log=None) -> PolymorphicExecutable:
    """Compile ``graph`` (a DynamicGraph) once for every binding of its symbols.  ``prebuilt``
    ({structural key: Module}) and ``runner_object`` (from a saved executable) supply the kernels and
    the call-list runner instead of building them; ``checks``: ``lw.build``'s, for every kernel;
    ``tuning_log``: kernels with an applicable record take its schedule (``tuned.py``)."""
    builder = walker(graph, target)
    builder.checks, builder.tuning_log = checks, tuning_log
    builder.prebuilt = prebuilt
    exe = builder.build()
    exe.model_bytes, exe.opset = graph.model_bytes, graph.opset
    exe.tuned_kernels = len(builder.tuned_keys)
    exe.use_runner(runner_object if runner_object is not None else call_list_object(builder.target))
    return exe


def walker(graph, target="llvm") -> "_Builder":
    """The builder of ``graph`` (a DynamicGraph) for ``target``, before its walk."""
    import onnx
    if graph.value_inputs:
        raise OnnxImportError(f"{graph.name!r}: shape inputs ({', '.join(graph.value_inputs)}) change the graph's "
                              f"structure with their values; lw.compile(..., polymorphic=False) specialises per shape")
    model = onnx.ModelProto.FromString(graph.model_bytes)
    return _Builder(model, graph.shapes, resolve_target(target), graph.name)


class _Builder:
    def __init__(self, model, shapes, target, name, prebuilt=None):
        from onnx import numpy_helper
        self.model, self.shapes, self.target, self.name = model, shapes, target, name
        self.consts: Dict[str, np.ndarray] = {t.name: numpy_helper.to_array(t) for t in model.graph.initializer}
        self.inputs = {n for n, _, _ in shapes.signature.inputs}
        self.values: Dict[str, Tuple[tuple, str]] = {}        # arena values: (symbolic shape, dtype)
        self.views: List[View] = []
        self.calls: List[KernelCall] = []
        self.steps: List[Tuple[list, list]] = []
        self.kernels: Dict[str, object] = {}           # structural key (text) -> Module (or Pending)
        self.jobs: List[tuple] = []                     # (schedule, args, name) of the kernels to build
        self.prebuilt = prebuilt
        self.consumers: Dict[str, list] = {}
        for node in model.graph.node:
            for i in node.input:
                self.consumers.setdefault(i, []).append(node)
        self.done = set()
        self.local: Dict[str, tuple] = {}       # values this builder makes up: (shape, dtype[, "input"])
        self.tables: Dict[str, BindingTable] = {}   # kernel arguments computed per binding
        self.aliases: Dict[object, object] = {}  # sympy size -> the size it is checked equal to at run time
        self.checks: Optional[str] = None        # lw.build's checks= for every kernel
        self.tuning_log = None                   # records applied to the kernels (``tuned.py``)
        self.tuned_keys: set = set()             # their structural keys (kept out of the kernel cache)
        self.building = True                     # False: the walk only lists the kernels (``tasks.py``)
        self.recipes: Dict[int, KernelRecipe] = {}   # id of a Pending kernel -> how it was made
        # sizes a feed binds directly (``bind`` refuses 0 for them): the ones a kernel may specialise to 1
        self.fed_symbols = {d for _, dims, _ in shapes.signature.inputs for d in dims if getattr(d, "is_Symbol", False)}
        self.unsupported = _Unsupported          # what the walk's parts raise for "not covered"
        self.cnn = CnnWalk(self, _Unsupported)
        self._inferred: Optional[Dict[str, str]] = None       # inferred_dtypes()

    # ---------------------------------------------------------------- the walk
    def build(self) -> PolymorphicExecutable:
        outputs = self.walk()
        self._build_pending()
        view_sources = {v.name: v.source for v in self.views if v.source in self.values}
        plan = SymbolicPlan(self.values, self.steps, view_sources, keep=outputs)
        used = {a for c in self.calls for a in c.args} | set(outputs)
        consts = {n: a for n, a in self.consts.items() if n in used}     # not the weights repacked
        return PolymorphicExecutable(self.shapes.signature, self.calls, self.views, plan, consts, outputs,
                                     self.name, kernels=self.kernels, target=self.target,
                                     tables={n: t for n, t in self.tables.items() if n in used})

    def walk(self) -> List[str]:
        """Convert every node into kernel calls (the kernels still to build: ``Pending``); the
        graph's outputs."""
        problems = [(label, op, why) for label, op, why in self.shapes.unknown]
        poisoned = set()            # values after a node that could not be converted: not reported again
        for k, node in enumerate(self.model.graph.node):
            if id(node) in self.done:
                continue
            label = node_label(k, node)
            if node.output and node.output[0] and node.output[0] not in self.shapes.shapes:
                poisoned.update(node.output)        # its shape is unknown (said so, unless the rule gave none)
                if not any(u[0] == label for u in self.shapes.unknown):
                    problems.append((label, node.op_type, f"the shape of {node.output[0]!r} is not known symbolically"))
                continue
            if any(i in poisoned for i in node.input):
                poisoned.update(node.output)
                if node.op_type not in COVERED:
                    problems.append((label, node.op_type, NO_KERNEL))
                continue
            try:
                self.convert(k, node, label)
            except _Unsupported as exc:
                problems.append((label, node.op_type, str(exc)))
                poisoned.update(node.output)
        if problems:
            lines = "\n".join(f"  - node {n!r}: {op}: {why}" for n, op, why in problems)
            raise OnnxImportError(f"{self.name!r} cannot compile shape-polymorphically yet ({len(problems)} "
                                  f"node(s); lw.compile(..., polymorphic=False) specialises per shape):\n{lines}")
        outputs = [o.name for o in self.model.graph.output]
        for o in outputs:
            self.cnn.plain(o)
        self._check_outputs(outputs)
        return outputs

    def _check_outputs(self, outputs) -> None:
        """Every graph output must be computed by a kernel (planned) or be an input (or a view of one):
        the executable has nothing else to give back (a shape value computed at import, a constant)."""
        sources = {v.name: v.source for v in self.views}
        inputs = {i.name for i in self.model.graph.input}
        for name in outputs:
            root = name
            while root in sources:
                root = sources[root]
            if name not in self.values and root not in self.values and root not in inputs:
                raise OnnxImportError(f"{self.name!r} cannot compile shape-polymorphically yet: its output {name!r} "
                                      f"is computed at import (a shape value or a constant), not by a kernel; "
                                      f"lw.compile(..., polymorphic=False) specialises per shape")

    def _build_pending(self) -> None:
        """Build the walk's new kernels in one ``build_many`` and put them in their calls."""
        if not self.jobs:
            return
        remembers = self.remembers()
        self.kernels, real = build_pending(self.jobs, self.kernels, self.target, self.checks,
                                           lambda key: remembers and key not in self.tuned_keys)
        for call in self.calls:
            call.module = real(call.module)
            call.variants = tuple(dataclasses.replace(v, module=real(v.module)) for v in call.variants)

    def remembers(self) -> bool:
        """Whether kernels go through the disk's polymorphic kernel cache (``kernel_cache``): built
        here for this machine, without ``checks`` (whose kernels carry other code), and not for
        listing tasks (which needs every kernel's recipe).  The cache keys untuned kernels: one
        scheduled from a tuning record is neither looked up nor stored (``tuned_keys``)."""
        return (self.prebuilt is None and self.checks is None and self.building
                and self.target.kind == "llvm" and self.target.runs_here())

    def convert(self, k: int, node, label: str) -> None:
        op = node.op_type
        outs = [o for o in node.output if o]
        if all(o in self.shapes.values for o in outs) and op not in ("Identity",):
            for o in outs:                       # shape arithmetic: done at import, by value
                for user in self.consumers.get(o, []):
                    if not _reads_sizes(user, o) and \
                            not all(u in self.shapes.values for u in user.output if u):
                        raise _Unsupported(f"the shape value {o!r} is read as data by {user.op_type}")
            return
        if op == "Constant":
            from onnx import numpy_helper
            self.consts[node.output[0]] = numpy_helper.to_array(node.attribute[0].t)
            return
        if op == "CastLike" and node.input[0] in self.consts:       # a constant in a value's type
            self.consts[node.output[0]] = self.consts[node.input[0]].astype(self.dtype(node.input[1]))
            return
        if op in FOLDERS and all(i in self.consts for i in node.input if i):
            # constants in, constants out (a position table read at constant ids): evaluated here, its
            # size checked against the memory limit first
            values = [self.consts[i] if i else None for i in node.input]
            try:
                check_folded_size(op, values, onnx_attrs(node), node.output[0])
            except Unsupported as exc:
                raise _Unsupported(str(exc)) from None
            for name, value in zip(node.output, FOLDERS[op](values, onnx_attrs(node))):
                self.consts[name] = np.asarray(value)
            return
        if op == "Resize":
            return self.cnn.resize(node, label)
        if op == "ConvTranspose" and self.cnn.is_up_convolution(node):
            return self.cnn.up_convolution(k, node, label)
        if op in CNN_OPS:
            return self.cnn.conv(k, node, label) if op == "Conv" else self.cnn.pool(node, label)
        if op == "BatchNormalization" or (op == "Concat" and self.cnn.channel_concat(node)) or \
                (op == "InstanceNormalization" and node.input[0] in self.cnn.blocked):
            return self.cnn.standalone(k, node, label)
        if op == "Pad":             # (a blocked map stays blocked)
            return pad_kernel(self, node, label)
        scaled = self.cnn.channel_scale(node)
        if scaled is not None:      # a squeeze-and-excitation gate: the map stays blocked
            return self.cnn.scale_channels(k, node, label, *scaled)
        for i in node.input:
            self.cnn.plain(i)       # a value kept blocked, read here as NCHW
        if op in VIEWS or (op == "Dropout" and len(outs) == 1):
            return self.view(node.input[0], node.output[0])
        if op in ("MatMul", "Gemm") or _elementwise(node):
            return self.group(k, node, label)
        if op in REDUCES:
            return self.reduce(node, label)
        if op in ("ArgMax", "ArgMin"):
            return self.arg_reduce(node, label)
        if op == "TopK":
            return self.top_k(node, label)
        if op == "Gather" and node.input[0] in self.consts and node.input[1] not in self.consts:
            axis = int(_attr(node, "axis", 0))          # an embedding table read at computed indices
            return self.kernel(label, ("gather", axis), [node.input[0], node.input[1]], node.output[0],
                               lambda table, indices, extent: gather(table, indices, axis, name="gather"))
        if op == "Gather" and node.input[1] in self.consts and self.consts[node.input[1]].ndim == 0:
            return self.take(node, label)
        if op == "Gather":          # computed data at computed (or constant) indices, each checked as read
            axis = int(_attr(node, "axis", 0))
            return self.kernel(label, ("gather_data", axis), [node.input[0], node.input[1]], node.output[0],
                               lambda data, indices, extent: gather(data, indices, axis, name="gather"))
        if op == "ConvTranspose":
            return self.conv_transpose(node, label)
        if op == "Range":
            return self.range(node, label)
        if op == "Slice":
            return self.slice(node, label)
        if op == "Expand":          # to a shape computed from sizes (a class token to the batch)
            out_shape = self.shapes.shapes[node.output[0]]
            return self.kernel(label, ("expand", len(out_shape)), [node.input[0]], node.output[0],
                               lambda x, extent: compute(tuple(extent(d) for d in out_shape),
                                                         lambda *i: broadcast_index(x, len(out_shape), i),
                                                         name="expand", tag="injective"))
        if op == "Concat":          # not of blocked channels (a class token before the patches)
            axis = int(_attr(node, "axis", 0))
            inputs = [i for i in node.input if i]
            return self.kernel(label, ("concat", axis, len(inputs)), inputs, node.output[0],
                               lambda *parts, extent: concat(parts, axis, name="concat"))
        if op == "Transpose":
            perm = list(node.attribute[0].ints) if node.attribute else list(range(len(self.shape(node.input[0]))))[::-1]
            def make(x, extent):
                return transpose(x, perm, name="transpose")
            return self.kernel(label, ("transpose", tuple(perm)), [node.input[0]], node.output[0], make,
                               variants=self.unit_variants(self.shapes.shapes[node.output[0]], make))
        if op in ("Softmax", "LogSoftmax"):
            axis, log = _attr(node, "axis", -1), op == "LogSoftmax"
            x, y = self.as_rows(node.input[0], node.output[0], axis)
            def make(t, extent):
                return softmax(t, -1, name="softmax", log=log)
            return self.kernel(label, ("softmax", log), [x], y, make, out_shape=self.shape(x),
                               then_view=node.output[0], variants=self.unit_variants(self.shape(x), make))
        if op in OPS:
            return OPS[op](self, node, label)
        if op in TRANSFORMER_OPS:
            return TRANSFORMER_OPS[op](self, node, label)
        if op == "LayerNormalization":
            if len(outs) > 1:
                raise _Unsupported("LayerNormalization's mean/inv_std outputs")
            axis, eps = _attr(node, "axis", -1), _attr(node, "epsilon", 1e-5)
            x, y = self.as_rows(node.input[0], node.output[0], axis)
            params = [self.flat_const(i) for i in node.input[1:] if i]
            return self.kernel(label, ("layer_norm", eps, len(params)), [x] + params, y,
                               lambda t, s, b=None, extent=None: layer_norm(t, s, b, -1, eps, name="layer_norm"),
                               out_shape=self.shape(x), then_view=node.output[0])
        raise _Unsupported(NO_KERNEL)

    # ---------------------------------------------------------------- pieces
    def shape(self, name: str) -> tuple:
        if name in self.consts:
            return tuple(S.dim(int(d)) for d in self.consts[name].shape)
        if name in self.tables:
            return self.tables[name].shape
        if name in self.local:
            return self.local[name][0]
        return self.shapes.shapes[name]

    def dtype(self, name: str) -> str:
        if name in self.consts:
            return str(self.consts[name].dtype)
        if name in self.tables:
            return self.tables[name].dtype
        if name in self.local:
            return self.local[name][1]
        known = self.shapes.dtypes.get(name) or (self.values[name][1] if name in self.values else None)
        return known or self.inferred_dtypes().get(name) or "unknown"

    def inferred_dtypes(self) -> Dict[str, str]:
        """The element types ONNX's shape inference gives the model's values (a value inside a group
        of elementwise nodes, before its kernel is built), computed once when first asked."""
        if self._inferred is None:
            from ..onnx_import.importer import inferred_types
            self._inferred = inferred_types(self.model)
        return self._inferred

    def view(self, src: str, dst: str, shape: Optional[tuple] = None) -> None:
        shape = self.shapes.shapes[dst] if shape is None else shape
        if src in self.consts:
            self.consts[dst] = self.consts[src].reshape([int(d) for d in shape])
            return
        self.local[dst] = (shape, self.dtype(src))
        if src not in self.inputs and not (src in self.local and self.local[src][2:] == ("input",)):
            self.values[dst] = (shape, self.dtype(src))
        else:
            self.local[dst] = (shape, self.dtype(src), "input")
        self.views.append(View(dst, src, shape))

    def kernel(self, label, key, inputs: List[str], output: str, make, out_shape=None, then_view=None,
               variants=(), derived_output: bool = False, own_inputs: int = 0) -> None:
        """Build (or reuse) the kernel ``make(*placeholders, extent=f)`` (``f`` maps a sympy size to the
        kernel's int or ``lw.var``) and call it on ``inputs`` -> ``output`` (then viewed as ``then_view``).
        ``variants`` (``KernelVariant`` s): more kernels of the same arguments; the call runs the first
        whose condition holds at a binding (a dense layer's kernel for few rows; a convolution's row
        block that divides the width; Winograd over whole tiles).
        ``derived_output``: the output's symbolic sizes not among the inputs' (a convolution's
        ``(H - 1)//2 + 1``) are the kernel's own expressions of its inputs' sizes, proven equal to the
        graph's; else every distinct symbolic size is a size argument of its own.  ``own_inputs``
        (with ``derived_output``): the last inputs are shaped like the output, and ``make`` creates
        their placeholders in the kernel's own sizes and returns ``(output, [those placeholders])``
        (a convolution's residual operand: bound inference then knows it has the output's extent;
        any ``make`` may return that pair, with an empty list)."""
        out_shape = self.shapes.shapes[output] if out_shape is None else out_shape
        arg_shapes = [self.aliased(self.shape(i)) for i in inputs] + [out_shape]
        variables: Dict[object, int] = {}      # sympy size -> the number of its size var
        pattern = []
        own = len(inputs) - own_inputs         # inputs from here on: placeholders made by ``make``
        for k, shape in enumerate(arg_shapes):
            for d in shape:
                if S.is_static(d):
                    pattern.append(int(d))
                elif d in variables:
                    pattern.append(f"v{variables[d]}")
                elif k >= own and derived_output:
                    pattern.append("derived")      # computed by the kernel from its inputs' sizes
                else:
                    variables[d] = len(variables)
                    pattern.append(f"v{variables[d]}")
        full_key = repr(key + (tuple(pattern), tuple(len(s) for s in arg_shapes),
                               tuple(self.dtype(i) for i in inputs)))

        def built(full_key, make, name, multiples=None, units=(), condition=None, deferred=False):
            module = self.kernels.get(full_key)
            if module is None and self.prebuilt is not None:
                module = self.prebuilt.get(full_key)
                if module is None:
                    raise OnnxImportError(f"the saved executable has no kernel for node {label!r} (saved by another "
                                          f"loopweave?); compile the model again")
                self.kernels[full_key] = module
            if module is None and self.remembers() and self.tuning_log is None:
                module = kernel_cache.lookup_polymorphic(full_key, self.target)
                if module is not None:
                    self.kernels[full_key] = module
            if module is None:
                def tensors() -> list:
                    """The kernel's placeholders and ``make``'s output, checked against the graph's shapes."""
                    names = S.dsl_variables([f"v{k}" for k in range(len(variables))])
                    var_of = {d: names[f"v{k}"] for d, k in variables.items()}
                    graph_size = {S.from_dsl(v): d for d, v in var_of.items()}
                    for d, (k, r) in (multiples or {}).items():    # a size known to be k * (a size var) + r
                        var_name = multiple_name(variables[d], k, r)
                        whole = S.dsl_variables([var_name])[var_name]
                        var_of[d] = whole * k + r
                        graph_size[S.from_dsl(whole)] = (d - r) / k
                    for d in units:             # a size that is 1 wherever this kernel runs
                        var_of[d] = 1

                    def extent(d):
                        return int(d) if S.is_static(d) else var_of[d]
                    holders = [placeholder(tuple(extent(d) for d in shape), name=f"in{k}", dtype=self.dtype(i))
                               for k, (i, shape) in enumerate(zip(inputs[:own], arg_shapes))]
                    out = make(*holders, extent=extent)
                    if isinstance(out, tuple):
                        out, made = out
                        holders = holders + list(made)
                    for tensor, graph_shape in zip(holders[own:] + [out], arg_shapes[own:]):
                        self._check_kernel_shape(tensor, graph_shape, var_of, graph_size,
                                                 derived_output or bool(multiples))
                    return holders + [out]
                recipe = KernelRecipe(name, make, tuple(arg_shapes), tuple(self.dtype(i) for i in inputs[:own]), own,
                                      derived_output, tuple(variables),
                                      tuple((d, k, r) for d, (k, r) in (multiples or {}).items()), tuple(units),
                                      condition)
                if deferred and self.building and self.tuning_log is None:
                    # made, scheduled and built by the executable where a binding picks it
                    def job():
                        args = tensors()
                        return schedule([args[-1]], self.target), args, name
                    module = Deferred(full_key, name, job, self.checks, self.remembers())
                    self.recipes[id(module)] = recipe
                    self.kernels[full_key] = module
                    return module
                args = tensors()
                tuned = None if self.tuning_log is None else \
                    tuned_schedule(self.tuning_log, self.target, recipe, args)
                if tuned is None and self.tuning_log is not None and self.remembers():
                    cached = kernel_cache.lookup_polymorphic(full_key, self.target)   # no record: the untuned one
                    if cached is not None:
                        self.kernels[full_key] = cached
                        return cached
                if tuned is not None:
                    self.tuned_keys.add(full_key)
                # built after the walk, all together (build_many: on every core)
                if not self.jobs and self.building:
                    build_workers.prestart()
                module = Pending(len(self.jobs), args[-1].dtype)
                self.jobs.append((tuned or schedule([args[-1]], self.target), args, name))
                self.recipes[id(module)] = recipe
                self.kernels[full_key] = module
            return module
        module = built(full_key, make, f"poly_{key[0]}")
        sizes = {f"v{k}": d for d, k in variables.items()}      # this call's value of each size var
        specials = []
        for v in variants:
            # the sizes it specialises, by position (a symbol's name means nothing to another model)
            fixed = [f"v{variables[d]}=1" if d in variables else f"{S.show(d)}=1" for d in v.units] + \
                [f"v{variables[d]}*{k}" + (f"+{r}" if r else "") for d, (k, r) in (v.multiples or {}).items()]
            module_of_variant = built(" ".join([full_key, v.key] + fixed), v.make, f"poly_{key[0]}_{v.what}",
                                      v.multiples, v.units, (v.size, v.at_most), v.deferred)
            specials.append(Variant(module_of_variant, v.size, v.at_most))
            for d, (k, r) in (v.multiples or {}).items():
                sizes[multiple_name(variables[d], k, r)] = S.floordiv(d - r, k, evaluate=False)
        variants = tuple(specials)
        if output not in self.values:       # the kernel's own output dtype (a Cast changes it)
            dtype = module.dtype if isinstance(module, Pending) else module.params[-1].dtype
            self.values[output] = (out_shape, dtype)
            self.local[output] = self.values[output]
        self.calls.append(KernelCall(label, module, tuple(inputs) + (output,), sizes, variants))
        self.steps.append(([i for i in inputs if i in self.values], [output]))
        if then_view is not None:
            self.view(output, then_view)

    @staticmethod
    def _check_kernel_shape(tensor, graph_shape, var_of, graph_size, derived: bool) -> None:
        """That a kernel's ``tensor`` has the graph's shape: its sizes are the size vars of the
        graph's (``var_of``: sympy size -> var), or (``derived``) expressions of them proven equal
        (``graph_size``: each var's symbol -> its sympy size)."""
        got = tuple(S.from_dsl(e) if not hasattr(e, "value") else int(e.value) for e in tensor.shape)
        if derived:
            got = tuple(g if isinstance(g, int) else S.simplify(g.subs(graph_size)) for g in got)
            want = tuple(int(d) if S.is_static(d) else d for d in graph_shape)
        else:
            want = tuple(int(d) if S.is_static(d) else var_of[d] if isinstance(var_of[d], int) else S.from_dsl(var_of[d])
                         for d in graph_shape)
        if len(got) != len(want) or not all(
                (g == w) if isinstance(g, int) or isinstance(w, int) else S.equal(g, w) is True
                for g, w in zip(got, want)):
            raise _Unsupported(f"the kernel computes shape {got}, the graph says {want}")

    def conv_transpose(self, node, label: str) -> None:
        """ConvTranspose (a U-Net's 2x2/2 up-sampling) of an NCHW value by a constant weight, its bias
        added in the same kernel; the kernel computes its output sizes, ``(H - 1)*s + ...``."""
        if len(self.shape(node.input[0])) != 4:
            raise _Unsupported("a ConvTranspose that is not 2-d")
        attrs = conv_transpose_attrs(node)
        if attrs is None:
            raise _Unsupported("ConvTranspose with output_shape or auto_pad")
        if node.input[1] not in self.consts or (len(node.input) > 2 and node.input[2] and
                                                node.input[2] not in self.consts):
            raise _Unsupported("a ConvTranspose whose weight or bias is computed")
        stride, dilation, pads, extra, groups = attrs
        inputs = [i for i in node.input if i]
        if len(inputs) == 3:
            inputs[2] = self.flat_const(inputs[2])

        def make(x, w, b=None, extent=None):
            y = conv2d_transpose(x, w, stride, pads, extra, dilation, groups, name="conv_transpose")
            if b is None:
                return y
            return compute(y.shape, lambda n, o, yy, xx: y[n, o, yy, xx] + b[o], name="conv_transpose.bias",
                           tag="elemwise")
        return self.kernel(label, ("conv_transpose", stride, dilation, pads, extra, groups), inputs, node.output[0],
                           make, derived_output=True)

    def range(self, node, label: str) -> None:
        """Range to a computed length (GPT-2's position ids, ``arange(seq)``): start and step constants."""
        start, limit, delta = (self.size_value(i) for i in node.input[:3])
        if not (S.is_static(start) and S.is_static(delta)):
            raise _Unsupported("a Range whose start or step is not a constant")
        start, delta = int(start), int(delta)
        # the type of its operands (sizes computed from shapes are int64)
        dtype = str(self.consts[node.input[0]].dtype) if node.input[0] in self.consts else "int64"
        (n,) = self.shapes.shapes[node.output[0]]
        return self.kernel(label, ("range", start, delta, dtype), [], node.output[0],
                           lambda extent: compute((extent(n),), lambda i: cast(dtype, i * delta + start),
                                                  name="range", tag="injective"))

    def slice(self, node, label: str) -> None:
        """Slice of data to computed ends (a causal-mask buffer cut to the length): each sliced axis
        read from a constant start by a constant positive step; the graph's sizes (clamped by shape
        inference) bound the reads."""
        src = self.shape(node.input[0])
        starts = [S.dim(v) for v in self.size_values(node.input[1])]
        axes = [int(a) for a in self.size_values(node.input[3])] if len(node.input) > 3 and node.input[3] \
            else list(range(len(starts)))
        steps = [int(a) for a in self.size_values(node.input[4])] if len(node.input) > 4 and node.input[4] \
            else [1] * len(starts)
        first = {}
        for start, axis, step in zip(starts, axes, steps):
            axis += len(src) if axis < 0 else 0
            if not S.is_static(start) or step <= 0 or not S.is_static(src[axis]):
                raise _Unsupported("a Slice of data other than from a constant start by a positive step along "
                                   "an axis of static size")
            start, size = int(start), int(src[axis])
            first[axis] = (min(max(start + size if start < 0 else start, 0), size), step)     # (first index, step)
        out_shape = self.shapes.shapes[node.output[0]]
        plan = tuple(sorted(first.items()))

        def make(x, extent):
            def index(a, i):        # clamped: the kernel's size var does not know shape inference's bound
                if a not in first:
                    return i
                return binary("min", i * first[a][1] + first[a][0], const(int(src[a]) - 1, i.dtype))
            return compute(tuple(extent(d) for d in out_shape),
                           lambda *i: x[tuple(index(a, v) for a, v in enumerate(i))], name="slice", tag="injective")
        return self.kernel(label, ("slice", plan), [node.input[0]], node.output[0], make)

    def aliased(self, shape: tuple) -> tuple:
        """``shape`` with each size that ``assume_equal`` checks equal to another as that other."""
        return tuple(self.aliases.get(d, d) for d in shape)

    def size_values(self, name: str) -> list:
        """The elements of a value known at import (a constant, or sizes computed from the shapes)."""
        if name in self.consts:
            return list(self.consts[name].reshape(-1))
        if name in self.shapes.values:
            return list(self.shapes.values[name].reshape(-1))
        raise _Unsupported(f"{name!r} is computed at run time; a constant or a size is needed")

    def size_value(self, name: str):
        return S.dim(self.size_values(name)[0])

    def take(self, node, label: str) -> None:
        """Gather at one constant index (q, k and v taken from a stacked projection; -1, a decoder's
        last token): a copy of that slab, the axis dropped (a symbolic axis is checked to hold the
        index before a run: the shape rule's check)."""
        shape = self.shape(node.input[0])
        axis = int(_attr(node, "axis", 0))
        axis += len(shape) if axis < 0 else 0
        index = int(self.consts[node.input[1]])
        if S.is_static(shape[axis]):
            size = int(shape[axis])
            if not -size <= index < size:
                raise _Unsupported(f"index {index} is out of range for axis {axis} of size {size}")
            index %= size
        return self.kernel(label, ("take", axis, index), [node.input[0]], node.output[0],
                           lambda x, extent: gather(x, index, axis, name="take"))

    def reduce(self, node, label: str) -> None:
        """ReduceMean/Sum/Max/Min, and L1/L2/SumSquare/LogSum/Prod with their steps around the reduction
        (``REDUCE_BETWEEN``, the static path's), over constant axes (an attribute, or a constant input
        from opset 18)."""
        axes = self.reduction_axes(node)
        keepdims, (pre, kind, post) = bool(_attr(node, "keepdims", 1)), REDUCES[node.op_type]

        def make(x, extent):
            if pre is not None:
                x = compute(x.shape, lambda *i: _REDUCE_STEPS[pre](x[i]), name="reduce.pre", tag="elemwise")
            r = reduce(x, list(axes or ()), kind, keepdims, name="reduce")
            if post is None:
                return r
            return compute(r.shape, lambda *i: _REDUCE_STEPS[post](r[i]), name="reduce.post", tag="elemwise")
        steps = (pre, post) if pre or post else ()        # (a plain reduction keeps the key saved files name)
        self.kernel(label, ("reduce", kind, axes, keepdims) + steps, [node.input[0]], node.output[0], make)

    def reduction_axes(self, node) -> Optional[tuple]:
        """A Reduce* node's constant axes (an attribute, or an input from opset 18); None: all of them."""
        axes = _attr(node, "axes", None)
        if axes is None and len(node.input) > 1 and node.input[1]:
            if node.input[1] not in self.consts:
                raise _Unsupported("reduction axes computed at run time")
            axes = [int(a) for a in self.consts[node.input[1]].reshape(-1)]
        if not axes and int(_attr(node, "noop_with_empty_axes", 0)):
            raise _Unsupported("an empty reduction (noop_with_empty_axes)")
        return tuple(int(a) for a in axes) if axes else None

    def arg_reduce(self, node, label: str) -> None:
        """ArgMax/ArgMin along one axis (a classifier's label, a token's id), of any size."""
        if self.dtype(node.input[0]) == "bool":
            raise _Unsupported(f"{node.op_type} of a bool tensor")
        axis = int(_attr(node, "axis", 0))
        kind = "max" if node.op_type == "ArgMax" else "min"
        keepdims, last = bool(_attr(node, "keepdims", 1)), bool(_attr(node, "select_last_index", 0))
        self.kernel(label, ("arg_reduce", kind, axis, keepdims, last), [node.input[0]], node.output[0],
                    lambda x, extent: arg_reduce(x, axis, kind, keepdims, last, name="arg_reduce"))

    def top_k(self, node, label: str) -> None:
        """TopK of a K that is a constant or computed from sizes (the k best classes of each row of a
        batch; ``min(boxes, 1000)`` of a detector's boxes): the indices by ranking (``ops/topk.py``),
        then the values gathered at them; an axis of symbolic size is checked to hold K before a run
        (the shape rule's check)."""
        shape = self.shape(node.input[0])
        axis = int(_attr(node, "axis", -1)) % len(shape)
        k, largest = S.dim(self.size_value(node.input[1])), bool(_attr(node, "largest", 1))
        out_shape = shape[:axis] + (k,) + shape[axis + 1:]
        values = node.output[0]
        indices = node.output[1] if len(node.output) > 1 and node.output[1] else self.fresh(values + ".indices")
        self.kernel(label, ("topk_indices", axis, int(k) if S.is_static(k) else "K", largest), [node.input[0]],
                    indices, lambda x, extent: topk_indices(x, extent(k), axis, largest, name="topk"),
                    out_shape=out_shape)
        if values:
            self.kernel(label + ".values", ("gather_elements", axis), [node.input[0], indices], values,
                        lambda x, idx, extent: gather_elements(x, idx, axis, name="topk_values"),
                        out_shape=out_shape)

    def as_rows(self, src: str, dst: str, axis: int):
        """Views of ``src`` and of the result ``dst`` as (rows, n) where n spans the axes from ``axis``
        on: a row kernel then has one row axis, so bound inference never sees a fused index of
        symbolic extents (a div/mod that is not affine, where it falls back to whole tensors)."""
        shape = self.shape(src)
        axis = axis + len(shape) if axis < 0 else axis
        rows, n = S.simplify(S.product(shape[:axis])), S.simplify(S.product(shape[axis:]))
        if not S.is_static(n) and axis != len(shape) - 1:
            raise _Unsupported(f"normalising over several axes of symbolic sizes {_show(shape[axis:])}")
        x, y = self.fresh(src + ".2d"), self.fresh(dst + ".2d")
        self.view(src, x, (rows, n))
        return x, y

    def flat_const(self, name: str) -> str:
        """A LayerNormalization scale/bias as one vector (over the flattened normalised axes)."""
        if name not in self.consts:
            raise _Unsupported(f"a computed LayerNormalization parameter {name!r}")
        flat = self.fresh(name + ".flat")
        self.consts[flat] = np.ascontiguousarray(self.consts[name].reshape(-1))
        return flat

    # ---------------------------------------------------------------- fused groups
    def group(self, k: int, node, label: str) -> None:
        """A MatMul (``dense`` over the flattened rows, or ``batch_matmul``) or an elementwise node,
        with the elementwise nodes right after it that read only its results, constants and values of
        its shape: one kernel whose epilogue computes them all on the register tile."""
        G = self.shapes.shapes[node.output[0]]
        anchor = node if node.op_type in ("MatMul", "Gemm") else None
        columns = 0
        if anchor is not None:
            kind, space, anchor_inputs = self.anchor(anchor)
            members, internal = [], {anchor.output[0]}
            if kind in ("dense", "dense+bias"):
                anchor_inputs, columns = self.panels(anchor_inputs)
        else:
            kind, space, anchor_inputs = None, G, []
            members, internal = [node], {node.output[0]}
            if not self.computes(node):
                raise _Unsupported(f"{node.op_type} of {self.dtype(node.input[0])} values")
            for i in filter(None, node.input):
                if self.operand_mode(i, G, space) is None:
                    raise _Unsupported(f"operand {i!r} {_show(self.shape(i))} does not broadcast to "
                                       f"{_show(G)} along equal sizes")
        nodes = self.model.graph.node
        for cand in list(nodes)[k + 1:]:
            if not _elementwise(cand) or id(cand) in self.done:
                break
            if not any(i in internal for i in cand.input) or cand.output[0] not in self.shapes.shapes:
                break
            if not _same(self.shapes.shapes[cand.output[0]], G) or not self.computes(cand):
                break
            if not all(i in internal or self.operand_mode(i, G, space) is not None for i in filter(None, cand.input)):
                break
            members.append(cand)
            internal.add(cand.output[0])
        while len(members) > (0 if anchor is not None else 1) and not self.escapes_only_last(anchor, members):
            members.pop()
        if anchor is not None and not self.escapes_only_last(anchor, members):
            members = []
        final = members[-1].output[0] if members else anchor.output[0]
        for m in members:
            self.done.add(id(m))
        internal = ({anchor.output[0]} if anchor is not None else set()) | {m.output[0] for m in members}
        # the kernel's operands past the anchor's: full-shape ones seen in the anchor's space
        externals, modes = [], []
        for m in members:
            for i in m.input:
                if not i or i in internal or self.is_scalar(i) or i in externals:
                    continue
                externals.append(i)
        ext_names = []
        for i in externals:
            mode = self.operand_mode(i, G, space)
            if mode == "full" and anchor is not None:
                view = self.fresh(i + ".space")
                self.view(i, view, space)
                ext_names.append(view)
            else:
                ext_names.append(i)
            modes.append(mode)
        order = ([anchor.output[0]] if anchor is not None else []) + [m.output[0] for m in members]
        structure = tuple((m.op_type, node_params(m), tuple(("int", order.index(i)) if i in internal
                                            else ("c", self.scalar(i)) if self.is_scalar(i)
                                            else ("ext", externals.index(i)) if i else ("none",)
                                            for i in m.input)) for m in members)
        shapes = {i: self.shape(i) for i in externals}

        def make(*holders, extent, few_rows=False, row_block=None):
            anchor_holders, ext_holders = holders[:len(anchor_inputs)], holders[len(anchor_inputs):]
            if kind in ("dense", "dense+bias"):
                if columns:     # the weight packed in column panels here, once
                    base = matmul_panels(anchor_holders[0], anchor_holders[1], columns, name="dense",
                                         row_block=row_block)
                else:           # few rows: B streamed once, no per-call packing of its panels
                    product = matmul_small_m if few_rows else matmul
                    base = product(anchor_holders[0], anchor_holders[1], name="dense")
                if kind == "dense+bias":
                    y, bias = base, anchor_holders[2]
                    base = compute(y.shape, lambda i, j: y[i, j] + bias[j], name="dense.bias", tag="elemwise")
            elif kind == "bmm":
                base = batch_matmul(anchor_holders[0], anchor_holders[1], name="bmm")
            else:
                base = None
            if not members:
                return base

            def body(*idx):
                env = {anchor.output[0]: base[idx]} if anchor is not None else {}
                for m in members:
                    vals = {}
                    for pos, i in enumerate(m.input):
                        if i in env:
                            vals[pos] = env[i]
                        elif i and not self.is_scalar(i):
                            q = externals.index(i)
                            vals[pos] = ext_holders[q][_operand_index(modes[q], shapes[i], idx)]
                    # a scalar takes its tensor operand's dtype (a value's, not a Where's condition;
                    # where no operand is a value, the node's result type)
                    dtype = next((v.dtype for v in vals.values() if v.dtype != "bool"), self.dtype(m.output[0]))
                    args = [vals[pos] if pos in vals else const(self.scalar(i), dtype) if i else None
                            for pos, i in enumerate(m.input)]
                    env[m.output[0]] = _apply(m, args)
                return env[final]
            return compute(tuple(extent(d) for d in space), body, name="epilogue", tag="elemwise")
        result = final if anchor is None else self.fresh(final + ".space")
        variants = []
        if kind in ("dense", "dense+bias") and not columns and self.dtype(anchor_inputs[0]) in ("float32", "float64") \
                and not S.is_static(space[0]):
            variants = [KernelVariant(space[0], FEW_ROWS, lambda *holders, extent: make(*holders, extent=extent,
                                                                                         few_rows=True),
                                      f"rows<={FEW_ROWS}", "few_rows")]
        elif kind == "bmm":
            variants = self.unit_variants(space, make)
        elif columns and not S.is_static(space[0]):
            # one row (a CNN's classifier at batch 1, an encoder at 1 x 1): a register tile of that row
            # (the general kernel's only tile would be partial, its accumulators in memory: MobileNetV2's
            # classifier took 0.31 ms, 0.03 so).  At 4 and 7 rows, a row at a time ran the encoder 0.35-0.39x
            # the static compile: those keep the general kernel.
            variants = [KernelVariant(space[0], 1, lambda *holders, extent: make(*holders, extent=extent, row_block=1),
                                      "rows<=1 row_block=1", "one_row")]
        self.kernel(label, ("group", kind, structure, tuple(modes)), anchor_inputs + ext_names, result, make,
                    out_shape=space, variants=variants)
        if anchor is not None:
            self.view(result, final, G)

    def unit_variants(self, shape: tuple, make) -> list:
        """A kernel of constant extents for where an input's size symbol among ``shape``'s last two
        sizes (not its first: the outer, parallel axis) is 1: a one-token step of a transformer, its
        attention products, softmax and head transposes (feeds are checked to have sizes >= 1, so
        "at most 1" is "is 1").  The general kernel's register tiles are partial there, with run-time
        extents: the 1 x 1 attention score ran ~2.5x its static compile, the zoo encoder at 4 x 1
        0.83-0.88x the static one (0.96x with these)."""
        units = []
        for d in shape[max(1, len(shape) - 2):]:
            if d in self.fed_symbols and d not in units:
                units.append(d)
        return [KernelVariant(d, 1, make, "size one", f"{d}_1", units=(d,)) for d in units]

    def anchor(self, node):
        """(kind, the kernel's output space, its inputs) for a MatMul or Gemm; views flatten the operands."""
        if node.op_type == "Gemm":
            return self.gemm_anchor(node)
        a, b = node.input[0], node.input[1]
        sa, sb = self.shape(a), self.shape(b)
        if b in self.consts and len(sb) == 2 and len(sa) >= 2 and a not in self.consts:
            rows = S.simplify(S.product(sa[:-1]))
            flat = self.fresh(a + ".rows")
            self.view(a, flat, (rows, sa[-1]))
            return "dense", (rows, sb[1]), [flat, b]       # the [K, N] weight as given: matmul's panels
        if a in self.consts or b in self.consts or len(sa) < 3 or len(sa) != len(sb):
            raise _Unsupported("MatMul other than by a constant 2-d weight or of two computed operands of equal rank")
        if not all(S.equal(x, y) is True for x, y in zip(sa[:-2], sb[:-2])):
            raise _Unsupported(f"MatMul whose batch axes {_show(sa[:-2])} and {_show(sb[:-2])} may differ")
        batch = S.simplify(S.product(sa[:-2]))
        a3, b3 = self.fresh(a + ".b3"), self.fresh(b + ".b3")
        self.view(a, a3, (batch,) + sa[-2:])
        self.view(b, b3, (batch,) + sb[-2:])
        return "bmm", (batch, sa[-2], sb[-1]), [a3, b3]

    def panels(self, anchor_inputs: list) -> Tuple[list, int]:
        """A dense layer's inputs with its [K, N] float32 weight packed in column panels [ceil(N/nr),
        K, nr] (on the CPU, N >= nr), and N; else the inputs as given and 0.  The static path's
        layout (``choose_dense_layout``), for every row count: one kernel (no few-rows variant) that
        reads each panel contiguously and keeps a register tile; at sequence 7 of the zoo encoder the
        static panels ran 2.75x the streaming kernel."""
        weight = anchor_inputs[1]
        if self.target.kind != "llvm" or self.dtype(weight) != "float32":
            return anchor_inputs, 0
        w = self.consts[weight]
        nr = panel_width(self.target.lanes("float32"))
        if w.shape[1] < nr:
            return anchor_inputs, 0
        packed = self.fresh(weight + ".panels")
        self.consts[packed] = pack_panels(w, nr)
        return [anchor_inputs[0], packed] + anchor_inputs[2:], int(w.shape[1])

    def gemm_anchor(self, node):
        """Gemm by a constant B (any transB, alpha folded in) with an optional constant C of [N] or
        [1, N] (beta folded in): "dense" with a bias, computed before the epilogue."""
        a, b = node.input[0], node.input[1]
        c = node.input[2] if len(node.input) > 2 and node.input[2] else None
        if b not in self.consts or a in self.consts or int(_attr(node, "transA", 0)):
            raise _Unsupported("Gemm other than of a computed A (not transposed) by a constant B")
        alpha, beta = float(_attr(node, "alpha", 1.0)), float(_attr(node, "beta", 1.0))
        w = self.consts[b].T if int(_attr(node, "transB", 0)) else self.consts[b]
        weight = self.fresh(b + ".kn")
        self.consts[weight] = np.ascontiguousarray(w * np.asarray(alpha, w.dtype)) if alpha != 1.0 \
            else np.ascontiguousarray(w)
        n = w.shape[1]
        inputs = [a, weight]
        if c is not None:
            if c not in self.consts or self.consts[c].size not in (1, n) or self.consts[c].ndim > 2 \
                    or (self.consts[c].ndim == 2 and self.consts[c].shape[0] != 1):
                raise _Unsupported("Gemm's C other than a constant [N], [1, N] or scalar")
            bias = self.fresh(c + ".vec")
            vec = np.broadcast_to(self.consts[c].reshape(-1), (n,)) * np.asarray(beta, self.consts[c].dtype)
            self.consts[bias] = np.ascontiguousarray(vec.astype(self.consts[c].dtype))
            inputs.append(bias)
        return "dense+bias" if c is not None else "dense", (self.shape(a)[0], S.dim(n)), inputs

    def operand_mode(self, name: str, G: tuple, space: tuple):
        """How an epilogue operand is read in ``space`` (the kernel's output, ``G`` in the graph):
        "full" (its shape is G: seen as space), ("suffix", r) (its last r axes, leading 1s dropped, fit
        trailing axes that G and space share; 1s broadcast), "scalar", or None (cannot be fused)."""
        if self.is_scalar(name):
            return "scalar"
        if name in self.shapes.values and name not in self.consts:
            return None
        shape = self.shape(name)
        if _same(shape, G):
            return "full"
        stripped = list(shape)
        while stripped and stripped[0] == 1:
            stripped.pop(0)
        shared = 0
        while shared < min(len(G), len(space)) and S.equal(G[-1 - shared], space[-1 - shared]) is True:
            shared += 1
        r = len(stripped)
        if r > shared or r > len(G):
            return None
        if all(d == 1 or self.assume_equal(d, G[len(G) - r + q], name) for q, d in enumerate(stripped)):
            return ("suffix", r)
        return None

    def assume_equal(self, d, g, operand: str) -> bool:
        """Whether size ``d`` of an operand can be read as size ``g`` of the kernel's space: proven
        equal, or an equality that shape inference could only check at run time (a U-Net's skip
        ``H`` against its up-sampled ``2*(H//2)``), or (GPT-2's mask, ``min(1024, seq)`` against
        ``seq``) such a broadcast, now checked as an equality (a size 1 against a larger one, which
        the broadcast would allow, is refused by name instead of read out of bounds)."""
        answer = S.equal(d, g)
        if answer is not None:
            return answer is True
        condition = sympy.Eq(d, g)
        checked = [sympy.Or(sympy.Eq(a, b), sympy.Eq(a, 1), sympy.Eq(b, 1)) for a, b in ((d, g), (g, d))] + \
            [condition, sympy.Eq(g, d)]
        if not any(c.condition == cond for c in self.shapes.signature.checks for cond in checked):
            return False
        self.aliases[d] = g
        if all(c.condition != condition for c in self.shapes.signature.checks):
            self.shapes.signature.checks.append(RuntimeCheck(
                operand, "compiled once", condition,
                f"sizes {S.show(d)} and {S.show(g)} must be equal: the compile-once kernel reading {operand!r} "
                f"takes them as one size (lw.compile(..., polymorphic=False) compiles per shape)"))
        return True

    def escapes_only_last(self, anchor, members) -> bool:
        """Whether, of the group's values, only the last one is read outside it (or is a graph output)."""
        group = ([anchor] if anchor is not None else []) + list(members)
        ids = {id(n) for n in group}
        outputs = {o.name for o in self.model.graph.output}
        final = group[-1].output[0]
        for n in group:
            name = n.output[0]
            if name == final:
                continue
            if name in outputs or any(id(u) not in ids for u in self.consumers.get(name, [])):
                return False
        return True

    def computes(self, node) -> bool:
        """Whether an elementwise ``node`` can be computed on its operands' type (a float-only op on
        floats, a bitwise one on integers; a CastLike to the type of a value, not of a scalar)."""
        op = node.op_type
        if op == "CastLike":      # the target type read from a value (a scalar takes another's)
            return not self.is_scalar(node.input[1])
        if op in INTEGER or op == "BitShift":
            return self.dtype(node.input[0]).startswith(("int", "uint"))
        # (the type asked only where it matters: a value inside a group has it from ONNX's inference)
        return op not in FLOAT_ONLY or self.dtype(node.input[0]).startswith("float")

    def is_scalar(self, name: str) -> bool:
        return name in self.consts and self.consts[name].size == 1 and self.consts[name].dtype.kind == "f"

    def scalar(self, name: str) -> float:
        return float(self.consts[name].reshape(-1)[0])

    def fresh(self, base: str) -> str:
        name, k = base, 0
        while name in self.consts or name in self.values or name in self.shapes.shapes or name in self.local:
            k += 1
            name = f"{base}.{k}"
        return name


def _reads_sizes(user, name: str) -> bool:
    """Whether ``user`` reads the shape value ``name`` as sizes (a target shape, Range's bounds,
    Slice's starts/ends/axes/steps, Resize's sizes, Pad's pads, ...), not as data."""
    at = list(user.input).index(name)
    return ((user.op_type in VIEWS or user.op_type in ("Expand", "Tile", "Split", "Trilu", "CenterCropPad",
                                                       "AffineGrid")) and at == 1) \
        or user.op_type in ("Range", "ConstantOfShape") + tuple(WINDOW_TERMS) \
        or (user.op_type in ("Slice", "Pad") and at >= 1) or (user.op_type == "Resize" and at == 3) \
        or (user.op_type == "TopK" and at == 1)


def _operand_index(mode, shape, idx) -> tuple:
    """An epilogue operand of ``shape`` read at the kernel's output index ``idx`` (``mode`` from
    ``operand_mode``): all of idx, or its last axes (1s read at 0, leading 1s at 0)."""
    if mode == "full":
        return tuple(idx)
    r = mode[1]
    lead = len(shape) - r
    tail = idx[len(idx) - r:] if r else ()
    return (0,) * lead + tuple(0 if d == 1 else i for d, i in zip(shape[lead:], tail))
