"""``compile_symbolic(graph, signature, target)``: a Graph whose sizes may be symbolic, compiled once.

The static compiler's pipeline (``executable.plan_kernel_groups``: the graph passes, fusion into
kernels) runs on the graph as it is; then each kernel is built over ``lw.var`` extents where its
sizes are symbolic: one size var per distinct symbolic size among its values up to a constant factor
(a kernel over ``(batch*seq, 256)`` takes one size, one over ``batch`` and ``4*batch`` one), constants
elsewhere, so identical layers share one kernel.  A reshape reading a parameter is the parameter
taken with that shape; other symbolic reshapes take their indices apart by constants
(``symbolic_reshape.py``).
The memory plan is ``symbolic_plan.py``'s (a concat its parts' kernels write in place holds them as
views at their offsets, as a slice of one contiguous block is a view of its source), the runner the call list (``call_list.py``), the result a
``PolymorphicExecutable`` checking each feed against ``signature`` (an output that is a constant is
given back from its constants).

Where the rows may be few, a kernel also gets the variants the compile-once path measured to pay
(the executable picks one per binding): a dense layer's streaming product for at most ``SMALL_M``
rows (or, packed in panels, a one-row register tile), and the batched products, softmaxes and
transposes of constant extents where a fed symbol among their last two sizes is 1 (one token).
A CNN's blocked convs on maps of symbolic size get the compile-once path's too: Winograd's in
blocks of tiles where it may pay (the graph passes keep the direct weight beside the transformed one)
and register blocks of pixels that divide the row.  A conv computes its output's sizes from its
input's (``(h + 2 - 3) // 1 + 1``), proven equal to the graph's; a residual operand takes them.
"""
from __future__ import annotations

import dataclasses
from typing import Dict, List, Optional, Tuple

from ...backends import build_workers
from ...backends.llvm.call_list_runner import call_list_object
from ...dsl.expr import checked_index
from ...dsl.tensor import compute, placeholder
from ...errors import BuildError
from .conv_variants import WINOGRAD_TILE_BLOCKS, is_projection, multiple_name, row_block_variants, winograd_variants
from ..ops.registry import schedule
from . import kernel_cache, symbolic as S
from .pending_kernels import Pending, build_pending
from .executable import group_signature, kernel_name, plan_kernel_groups
from .graph import Graph
from .op_table import OPS, SMALL_M, scalar_constants
from .polymorphic_executable import KernelCall, PolymorphicExecutable, Variant, View
from .symbolic_plan import SymbolicPlan
from .symbolic_reshape import reshape_over_sizes, reshape_runs

#: the ops of an imported graph this pipeline builds over symbolic sizes (the encoder's, the
#: elementwise ops of a dense stack, a CNN's convs and pools in the blocked layout the graph passes
#: choose: each is tested so; another op's kernel may refuse ``lw.var`` extents)
SYMBOLIC_OPS = frozenset({
    "dense_kn", "dense", "matmul", "add", "sub", "mul", "div", "max", "min", "pow_const", "relu", "sigmoid",
    "tanh", "exp", "sqrt", "neg", "erf", "gelu", "softmax", "layer_norm", "transpose", "reshape", "identity",
    "concat", "slice", "conv2d", "max_pool2d", "avg_pool2d", "global_avg_pool", "global_max_pool", "clip", "reduce",
    "pad_index", "resize", "gather", "where", "equal", "less", "greater", "less_equal", "greater_equal",
    "abs", "atan", "ceil", "celu", "cos", "elu", "floor", "hard_sigmoid", "hard_swish", "leaky_relu", "log", "mish",
    "pow", "prelu", "reciprocal", "round", "selu", "shrink", "sign", "sin", "softplus", "softsign",
    "thresholded_relu", "conv2d_transpose", "lrn", "expand"})
#: ops whose kernels get a variant of constant extents where a fed symbol among their last two sizes is 1
UNIT_VARIANT_OPS = ("matmul", "softmax", "transpose")


def compile_symbolic(graph: Graph, signature, target, checks: Optional[str] = None,
                     prebuilt: Optional[Dict[str, object]] = None,
                     runner_object: Optional[bytes] = None) -> PolymorphicExecutable:
    """``graph`` (sizes ints or sympy expressions of ``signature``'s symbols) compiled once for every
    binding.  ``prebuilt`` ({key: Module}) and ``runner_object`` (from a saved executable) supply the
    kernels and the call-list runner instead of building them."""
    unsupported = sorted({(n.name, n.op_type) for n in graph.nodes if n.op_type not in SYMBOLIC_OPS})
    if unsupported:
        lines = "\n".join(f"  - node {name!r}: {op}" for name, op in unsupported)
        raise BuildError(f"{graph.name!r}: the graph pipeline builds no kernel over symbolic sizes for these ops yet "
                         f"(compile without pipeline='graph' for the compile-once path):\n{lines}")
    g, groups, alias_of, slice_of = plan_kernel_groups(graph, target.kind, copy_outputs=False)
    builder = _Builder(g, target, checks, prebuilt, {d for _, shape, _ in signature.inputs for d in shape
                                                    if not S.is_static(d)})
    calls = [builder.call(grp) for grp in groups]
    builder.build_pending(calls)
    alias_of = dict(alias_of, **builder.param_views)
    # a concat computed in place is its parts' memory, a slice read in place its source's: views at offsets
    alias_of.update({part: whole for part, (whole, _) in slice_of.items()})
    planned = {grp.output for grp in groups} | {whole for whole, _ in slice_of.values()}
    views = [View(out, src, _sizes(g, out)) for out, src in alias_of.items()]
    # the kernels' outputs, and the views of them (in their slot); views of inputs are the feed's memory
    values = {name: (_sizes(g, name), g.values[name].dtype) for name in
              planned | {v.name for v in views if _root(v.source, alias_of) in planned}}
    steps = [([i for i in grp.inputs if i in values], [grp.output]) for grp in groups]
    plan = SymbolicPlan(values, steps, {v.name: v.source for v in views if v.name in values}, keep=g.outputs,
                        offsets={part: offset for part, (_, offset) in slice_of.items() if offset != 0})
    used = {a for c in calls for a in c.args} | {_root(out, alias_of) for out in g.outputs}   # outputs may be constants
    consts = {n: a for n, a in g.initializers.items() if n in used}
    exe = PolymorphicExecutable(signature, calls, views, plan, consts, g.outputs, g.name,
                                kernels=builder.kernels, target=target, tables=graph.binding_tables)
    exe.use_runner(runner_object if runner_object is not None else call_list_object(target))
    return exe


def _sizes(g: Graph, name: str) -> tuple:
    return tuple(S.dim(d) for d in g.values[name].shape)


def _root(name: str, alias_of: Dict[str, str]) -> str:
    while name in alias_of:
        name = alias_of[name]
    return name


class _Builder:
    def __init__(self, g: Graph, target, checks, prebuilt, fed_sizes):
        self.g, self.target, self.checks, self.prebuilt = g, target, checks, prebuilt
        self.fed_sizes = fed_sizes             # sizes a feed binds directly (so at least 1): a variant may fix one
        self.kernels: Dict[str, object] = {}   # key -> Module (or Pending until built)
        self.jobs: List[tuple] = []
        self.param_views: Dict[str, str] = {}  # a reshape a kernel takes instead of its parameter -> the parameter

    def call(self, grp) -> KernelCall:
        signature, params = group_signature(self.g, grp)
        views = _param_views(self.g, grp, params)
        shapes = [self.g.values[views.get(p, p)].shape for p in params] + [self.g.values[grp.output].shape]
        variables: Dict[object, int] = {}       # sympy size / its constant factor -> the number of its size var
        for shape in shapes + [self.g.values[n.outputs[0]].shape for n in grp.nodes]:
            for d in shape:
                if not S.is_static(d) and _factored(d)[1] not in variables:
                    variables[_factored(d)[1]] = len(variables)

        def show(d):
            if S.is_static(d):
                return int(d)
            c, m = _factored(d)
            return f"{c}*v{variables[m]}" if c != 1 else f"v{variables[m]}"
        key = f"graph|{signature}|{tuple(tuple(show(d) for d in s) for s in shapes)}"
        module = self.kernel(key, grp, params, variables, self.general_attrs(grp), kernel_name(grp))
        sizes = {f"v{k}": d for d, k in variables.items()}
        variants = []
        for rows, at_most, attrs, units, multiples, what in self.variants(grp, variables):
            whole = _whole_multiples(multiples or {})
            if whole is None:
                continue
            fixed = "".join(f"|v{variables[m]}*{k}+{r}" for m, (k, r) in whole.items())
            variants.append(Variant(self.kernel(f"{key}|{what}{fixed}", grp, params, variables, attrs,
                                                f"{kernel_name(grp)}_{what}", units, whole), rows, at_most))
            sizes.update({multiple_name(variables[m], k, r): S.floordiv(m - r, k) for m, (k, r) in whole.items()})
        self.param_views.update({view: p for p, view in views.items()})
        return KernelCall(grp.nodes[-1].name, module, tuple(views.get(p, p) for p in params) + (grp.output,), sizes,
                          tuple(variants))

    def general_attrs(self, grp) -> dict:
        """Attributes of the anchor of a group's general kernel: a Winograd conv over symbolic sizes
        takes the (tile row, tile column) form, in register blocks of ``WINOGRAD_TILE_BLOCKS`` tiles
        that divide a constant row (else the last, with a partial block at the row's end)."""
        anchor = _anchor(grp)
        if anchor.op_type != "conv2d_winograd_blocked" or anchor.attrs.get("direct_weight") or \
                all(S.is_static(d) for d in self.g.shape(anchor.inputs[0])):
            return {}
        width = self.g.shape(anchor.outputs[0])[3]
        if S.is_static(width):
            tiles = (int(width) + 1) // 2
            for tb in WINOGRAD_TILE_BLOCKS:
                if tiles % tb == 0:
                    return {"tile_block": tb, "whole_blocks": True}
        return {"tile_block": WINOGRAD_TILE_BLOCKS[-1]}

    def variants(self, grp, variables) -> list:
        """(rows, at most, attributes of the anchor, sizes fixed to 1, sizes built as ``k * var + r``
        ({size: (k, r)}, or None), name) of each variant."""
        anchor = _anchor(grp)
        if anchor.op_type == "dense_kn":
            rows = self.g.values[anchor.inputs[0]].shape[0]
            if S.is_static(rows):
                return []
            if anchor.attrs.get("panels"):       # one row: a register tile of that row
                return [(rows, 1, {"row_block": 1}, (), None, "one_row")]
            return [(rows, SMALL_M, {"few_rows": True}, (), None, "few_rows")]
        if anchor.op_type in ("conv2d_blocked", "depthwise_blocked", "conv2d_winograd_blocked"):
            return self.conv_variants(anchor)
        if anchor.op_type not in UNIT_VARIANT_OPS:
            return []
        shape = self.g.values[grp.output].shape
        units = []
        for d in shape[max(1, len(shape) - 2):]:
            if d in self.fed_sizes and d in variables and d not in units:
                units.append(d)
        return [(d, 1, {}, (d,), None, f"{S.show(d)}_1") for d in units]

    def conv_variants(self, anchor) -> list:
        """The compile-once path's variants of a blocked conv on a map of symbolic size: Winograd's
        where it may pay (a ``direct_weight`` conv: ``conv_variants.winograd_variants``, which reads only
        the target of its builder), then register blocks of pixels that divide the output row
        (``conv_variants.row_block_variants``; none for a residual projection, ``is_projection``); each
        built over the sizes it divides as whole multiples where compile-once builds it so (no code
        for a partial block, less compile time)."""
        x, out = self.g.shape(anchor.inputs[0]), self.g.shape(anchor.outputs[0])

        def attrs_of(*holders, extent=None, **attrs):
            return attrs
        found = []
        if anchor.op_type == "conv2d_winograd_blocked":
            if not anchor.attrs.get("direct_weight"):
                return []
            found += winograd_variants(self.target, x, out, anchor.attrs["padding"][0], attrs_of)
            weight = self.g.initializers[anchor.inputs[2]].shape
        else:
            weight = None if anchor.op_type == "depthwise_blocked" else self.g.initializers[anchor.inputs[1]].shape
        # (a packed weight: [OC blocks, C blocks, KH, KW, ...])
        if weight is None or not is_projection(weight[:4], tuple(anchor.attrs.get("stride", (1, 1)))):
            found += row_block_variants(out[3], attrs_of, weight, len(x) == 5, x[3])
        return [(v.size, v.at_most, v.make(extent=None), (), v.multiples, v.what) for v in found]

    def kernel(self, key: str, grp, params, variables, anchor_attrs, name, units=(), whole=None):
        module = self.kernels.get(key)
        if module is None and self.prebuilt is not None:
            module = self.prebuilt.get(key)
            if module is None:
                raise BuildError(f"the saved executable has no kernel for {grp.nodes[-1].name!r} (saved by another "
                                 f"loopweave?); compile the model again")
        if module is None and self.remembers():
            module = kernel_cache.lookup_polymorphic(key, self.target)
        if module is None:
            whole = whole or {}
            var_of, size_of = {}, {}           # sympy size -> extent; a var's symbol -> the size it stands for
            for d, k in variables.items():
                if d in units:
                    var_of[d] = 1
                    continue
                steps, r = whole.get(d, (1, 0))
                v = S.dsl_variables([multiple_name(k, steps, r) if d in whole else f"v{k}"]).popitem()[1]
                var_of[d] = v * steps + r if d in whole else v
                size_of[S.from_dsl(v)] = (d - r) / steps
            holders, out = self.computation(grp, params, var_of, size_of, anchor_attrs)
            if not self.jobs:
                build_workers.prestart()
            module = Pending(len(self.jobs))
            self.jobs.append((schedule([out], self.target), holders + [out], name))
        self.kernels[key] = module
        return module

    def computation(self, grp, params, var_of, size_of, anchor_attrs) -> Tuple[list, object]:
        """The group's placeholders and output over extents ``var_of`` (sympy size -> var, ``k * var + r``
        or 1), checked against the graph's shapes (``size_of``: each var's symbol -> the size it stands
        for).  A parameter that a node reads beside a computed value of its graph shape (a conv's
        residual operand) takes that value's extents, which the kernel computes (``(h + 2 - 3) + 1``):
        bound inference then knows they are one size."""
        def extent(d):
            if S.is_static(d):
                return int(d)
            c, m = _factored(d)
            v = var_of[m]
            return v if c == 1 else c * v
        tensors: Dict[str, object] = {}
        views = _param_views(self.g, grp, params)
        taken = [views.get(name, name) for name in params]     # each parameter, or the reshape of it taken

        def make(k, shape=None):
            v = self.g.values[taken[k]]
            tensors[taken[k]] = placeholder(shape or tuple(extent(d) for d in v.shape), name=f"in{k}", dtype=v.dtype)
        for k, name in enumerate(params):
            if taken[k] != name:
                make(k)
        anchor = _anchor(grp)
        for node in grp.nodes:
            if node.outputs[0] in tensors:      # a view of a parameter: the parameter itself
                continue
            for i in node.inputs:
                if i in taken and i not in tensors:
                    like = [tensors[j] for j in node.inputs if j in tensors and j not in taken
                            and self.g.shape(j) == self.g.shape(i)]
                    make(taken.index(i), like[0].shape if like else None)
            scalars = scalar_constants(self.g, node.op_type, node.inputs)
            args = [scalars[pos] if pos in scalars else tensors[i] for pos, i in enumerate(node.inputs)]
            attrs = dict(node.attrs, **anchor_attrs) if node is anchor else node.attrs
            try:
                if node.op_type == "reshape" and not all(S.is_static(d) for d in node.attrs["shape"]):
                    t = self.reshape(node, args[0], extent)
                elif node.op_type == "slice" and not all(S.is_static(d) for d in self.g.shape(node.inputs[0]) +
                                                         self.g.shape(node.outputs[0])):
                    t = self.slice(node, args[0], extent)
                elif node.op_type == "expand":      # its target's sizes as the kernel's extents
                    t = OPS["expand"].build(args, dict(attrs, shape=tuple(extent(d) for d in attrs["shape"])))
                else:
                    t = OPS[node.op_type].build(args, attrs)
            except BuildError:
                raise
            except Exception as exc:    # noqa: BLE001 - an op that refuses symbolic extents
                raise BuildError(f"node {node.name!r} ({node.op_type}): no kernel over its symbolic sizes "
                                 f"({type(exc).__name__}: {exc}); compile without pipeline='graph'") from exc
            if not _same_extents(t.shape, self.g.values[node.outputs[0]].shape, var_of, size_of):
                raise BuildError(f"node {node.name!r} ({node.op_type}): its kernel computes shape {t.shape}, the "
                                 f"graph says {self.g.values[node.outputs[0]].shape}; compile without "
                                 f"pipeline='graph'")
            tensors[node.outputs[0]] = t
        for k, name in enumerate(taken):
            if name not in tensors:
                make(k)
        return [tensors[name] for name in taken], tensors[grp.output]

    def reshape(self, node, x, extent):
        src, dst = self.g.values[node.inputs[0]].shape, self.g.values[node.outputs[0]].shape
        if reshape_runs(src, dst) is None:
            raise BuildError(f"node {node.name!r} (reshape): no kernel reads {_show(src)} as {_show(dst)} without "
                             f"dividing by a run-time size; compile without pipeline='graph'")
        return reshape_over_sizes(x, src, dst, extent)

    def slice(self, node, x, extent):
        """``x[begin:end:step]`` where sizes (and bounds) are symbolic: the output's extents from the graph,
        each index ``i * step + begin``; checked at run time where an axis of symbolic length reads one of
        constant length (GPT-2's position rows ``wpe[:seq]``: a ``seq`` past the table is an error)."""
        begin, step = node.attrs["begin"], node.attrs["step"]
        try:
            starts = [extent(b) if not isinstance(b, int) else b for b in begin]
        except KeyError:
            raise BuildError(f"node {node.name!r} (slice): it begins at {list(begin)}, a size none of its kernel's "
                             f"values has; compile without pipeline='graph'") from None

        src, out = self.g.shape(node.inputs[0]), self.g.shape(node.outputs[0])
        checked = [S.is_static(a) and not S.is_static(o) for a, o in zip(src, out)]

        def index(i, b, s, k):
            term = i * s if s != 1 else i
            term = term if isinstance(b, int) and b == 0 else term + b
            return checked_index(term, int(src[k]), f"axis {k} of the constant sliced") if checked[k] else term
        return compute(tuple(extent(d) for d in out),
                       lambda *idx: x[tuple(index(i, b, s, k) for k, (i, b, s) in enumerate(zip(idx, starts, step)))],
                       name="slice", tag="injective")

    def remembers(self) -> bool:
        """Whether kernels go through the disk's kernel cache: built here, for this machine, without checks."""
        return self.prebuilt is None and self.checks is None and self.target.kind == "llvm" \
            and self.target.runs_here()

    def build_pending(self, calls: List[KernelCall]) -> None:
        """Build the kernels asked for in one ``build_many`` and put them in their calls."""
        if not self.jobs:
            return
        remembers = self.remembers()
        self.kernels, real = build_pending(self.jobs, self.kernels, self.target, self.checks, lambda key: remembers)
        for call in calls:
            call.module = real(call.module)
            call.variants = tuple(dataclasses.replace(v, module=real(v.module)) for v in call.variants)


def _factored(d) -> Tuple[int, object]:
    """``(c, m)`` with ``d = c * m``, ``c`` a positive integer: a kernel takes one size var per ``m``, so
    ``batch`` and ``4*batch`` (an attention head merge's) are one var and its index stays affine."""
    c, m = S.dim(d).as_coeff_Mul()
    return (int(c), m) if c.is_Integer and c > 0 else (1, S.dim(d))


def _whole_multiples(multiples: dict) -> Optional[dict]:
    """{m: (k, r)} for a variant's sizes ``c * m`` built as ``k * var + r`` ({size: (k, r)}): ``m`` as
    ``(k / c) * var + r / c``, or as a plain var where ``k`` divides ``c`` and ``r`` is 0 (a U-Net's
    ``8 * m`` is whole tiles as it is), or, for a size of at least ``r + 1`` (``k`` = 1), as a var plus
    the least ``s`` with ``c * (1 + s) > r``; None where none holds (the variant is not built)."""
    whole = {}
    for d, (k, r) in multiples.items():
        c, m = _factored(d)
        if r == 0 and c % k == 0:
            continue
        if k == 1 and c > 1:
            if -(-(r + 1) // c) > 1:
                whole[m] = (1, -(-(r + 1) // c) - 1)
            continue
        if k % c or r % c:
            return None
        whole[m] = (k // c, r // c)
    return whole


def _show(shape) -> str:
    return "[" + ", ".join(S.show(d) for d in shape) + "]"


def _anchor(grp):
    """The node a kernel's variants change: the first that is no reshape or transpose (a matmul after
    the head splits of its operands), else the first."""
    return next((n for n in grp.nodes if n.op_type not in ("reshape", "transpose")), grp.nodes[0])


def _param_views(g: Graph, grp, params) -> Dict[str, str]:
    """{parameter: the reshape of it that the kernel takes instead}: a reshape in the group reading a
    computed parameter that nothing else in the group reads (``fuse_operators`` ends a matmul's operand
    there when the reshape divides by a run-time size); the parameter's memory, contiguous, is that view."""
    readers: Dict[str, list] = {}
    for node in grp.nodes:
        for i in node.inputs:
            readers.setdefault(i, []).append(node)
    return {p: readers[p][0].outputs[0] for p in params
            if len(readers.get(p, ())) == 1 and readers[p][0].op_type == "reshape" and p not in g.initializers}


def _same_extents(got, want, var_of, size_of) -> bool:
    """The kernel's extents (DSL expressions of its size vars) are the graph's sizes ``want``:
    each var read as the size it stands for (``size_of``: its symbol -> a sympy size), so an extent
    the kernel computes itself (a convolved ``(h - 1) // 2 + 1``) is proven equal; ``var_of`` (sympy
    size / its constant factor -> extent) says which sizes the kernel fixes to 1."""
    if len(got) != len(want):
        return False
    for g, w in zip(got, want):
        g = S.from_dsl(g).subs(size_of, simultaneous=True)
        if not S.is_static(w) and isinstance(var_of.get(_factored(w)[1]), int):    # a size fixed to 1
            w = _factored(w)[0]
        if S.equal(g, w) is not True:
            return False
    return True
