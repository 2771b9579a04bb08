"""Graph-level shape inference on symbolic dimensions (sympy), for models with dynamic inputs.

``infer_symbolic_shapes(model)`` walks an ONNX model whose inputs have symbolic dimensions
(``batch``, ``seq``) once and gives every value a shape of sizes from
``nn_ops/network/symbolic.py``: ``N``, ``N*seq``, ``(H - 1)//2 + 1`` after a 7x7/2 conv.
Small integer tensors (what ``Shape``, ``Gather``, ``Concat`` compute for a Reshape's target,
as torch exports head splits) are tracked *by value*, element by element, so a
``Shape -> Gather -> Unsqueeze -> Concat -> Reshape`` chain gives ``(N, seq, 4, 64)``.

Equalities the graph needs (a MatMul's inner sizes, a broadcast of ``seq`` against ``seq``
from another path, a Reshape that keeps the element count, Concat's other axes, a conv's
channels) are proven with sympy.  An equality that is false for every binding is an
``OnnxImportError`` naming the node and the sizes; one that depends on the binding (``seq``
against ``seq_k``) becomes a :class:`RuntimeCheck` that the executable evaluates before a run,
raising an ``ArgumentError`` naming the node and the sizes with their values.

Ops the inference does not know leave their outputs (and what follows) without a symbolic
shape (``SymbolicShapes.unknown`` lists them); the per-shape specialisation still compiles
such models.  Nothing here decides how the model is compiled.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np
import sympy

from ...errors import OnnxImportError
from ..network import symbolic as S
from ..network.signature import RuntimeCheck, SymbolicSignature

VALUE_LIMIT = 64          # integer tensors up to this many elements are tracked by value
INT_TYPES = ("int64", "int32")


class _Unknown(Exception):
    """The inference cannot give this node's outputs a symbolic shape (the reason is the message)."""


class SymbolicShapes:
    """The result: ``shapes`` {value: tuple of sizes}, ``values`` {value: object array of sizes} for
    tracked integer tensors, ``dtypes``, ``checks`` (run-time checks), ``unknown`` [(node, op, why)],
    and ``signature`` (inputs, outputs and checks: what an executable checks a feed against)."""

    def __init__(self, shapes, values, dtypes, checks, unknown, signature):
        self.shapes: Dict[str, tuple] = shapes
        self.values: Dict[str, np.ndarray] = values
        self.dtypes: Dict[str, str] = dtypes
        self.checks: List[RuntimeCheck] = checks
        self.unknown: List[Tuple[str, str, str]] = unknown
        self.signature: SymbolicSignature = signature

    def shape_at(self, name: str, binding) -> tuple:
        """The concrete shape of value ``name`` at ``binding`` ({symbol: int})."""
        return tuple(S.evaluate(d, binding) for d in self.shapes[name])

    def show(self, name: str) -> str:
        return "[" + ", ".join(S.show(d) for d in self.shapes[name]) + "]"


def infer_symbolic_shapes(model, label=None) -> SymbolicShapes:
    """Symbolic shapes of every value of ``model`` (an onnx.ModelProto whose inputs may have
    ``dim_param`` dimensions); ``label(k, node)`` names nodes in messages."""
    return _Inference(model, label).run()


# ============================================================================== the walk
class _Inference:
    def __init__(self, model, label):
        self.model = model
        self.label = label or (lambda k, node: node.name or f"#{k} ({node.output[0] if node.output else node.op_type})")
        self.shapes: Dict[str, tuple] = {}
        self.values: Dict[str, np.ndarray] = {}
        self.dtypes: Dict[str, str] = {}
        self.checks: List[RuntimeCheck] = []
        self.unknown: List[Tuple[str, str, str]] = []
        self.node_label, self.op = "", ""

    def run(self) -> SymbolicShapes:
        from onnx import numpy_helper
        from .importer import np_dtype
        graph = self.model.graph
        inits = {t.name for t in graph.initializer}
        for t in graph.initializer:
            self.shapes[t.name] = tuple(S.dim(int(d)) for d in t.dims)
            self.dtypes[t.name] = _dtype_or_none(np_dtype, t.data_type)
            if self.dtypes[t.name] in INT_TYPES and int(np.prod(t.dims)) <= VALUE_LIMIT:
                self.values[t.name] = _object_array(numpy_helper.to_array(t))
        inputs = []
        for inp in graph.input:
            if inp.name in inits:
                continue
            tt = inp.type.tensor_type
            dims = tuple(S.dim(d.dim_value) if d.HasField("dim_value") and d.dim_value >= 0
                         else S.symbol(d.dim_param or f"{inp.name}.{k}") for k, d in enumerate(tt.shape.dim))
            self.shapes[inp.name] = dims
            self.dtypes[inp.name] = _dtype_or_none(np_dtype, tt.elem_type)
            inputs.append((inp.name, dims, self.dtypes[inp.name]))
        for k, node in enumerate(graph.node):
            self.node_label, self.op = self.label(k, node), node.op_type
            rule = RULES.get(node.op_type) if node.domain in ("", "ai.onnx") else None
            try:
                if rule is None:
                    raise _Unknown("no symbolic shape rule for this op")
                outs = rule(self, node)
            except _Unknown as exc:
                self.unknown.append((self.node_label, node.op_type, str(exc)))
                continue
            except (OnnxImportError, RecursionError):
                raise
            except Exception as exc:  # noqa: BLE001 - a rule that breaks on an odd node leaves it unknown, visibly
                self.unknown.append((self.node_label, node.op_type,
                                     f"the symbolic shape rule failed ({type(exc).__name__}: {exc})"))
                continue
            for name, shape in zip(node.output, outs):
                if name and shape is not None:
                    self.shapes[name] = tuple(S.simplify(d) for d in shape)
        outputs = [(o.name, self.shapes.get(o.name), self.dtypes.get(o.name) or _dtype_or_none(
            np_dtype, o.type.tensor_type.elem_type)) for o in graph.output]
        signature = SymbolicSignature(inputs, outputs, self.checks)
        return SymbolicShapes(self.shapes, self.values, self.dtypes, self.checks, self.unknown, signature)

    # ---------------------------------------------------------------- reading
    def shape(self, name: str) -> tuple:
        if name not in self.shapes:
            raise _Unknown(f"the shape of {name!r} is not known symbolically")
        return self.shapes[name]

    def value(self, name: str) -> np.ndarray:
        if name not in self.values:
            raise _Unknown(f"the value of {name!r} is not known at import")
        return self.values[name]

    def has_value(self, name: str) -> bool:
        return bool(name) and name in self.values

    def ints(self, name: str) -> List[int]:
        """A tracked value whose elements are all plain integers (axes, pads, steps)."""
        out = []
        for v in self.value(name).reshape(-1):
            i = S.as_int(v)
            if i is None:
                raise _Unknown(f"{name!r} holds the symbolic {S.show(v)} where an integer is needed")
            out.append(i)
        return out

    def attr(self, node, name: str, default=None):
        """Attribute ``name`` of ``node`` (a string one as ``str``), else ``default``."""
        from onnx import helper
        for a in node.attribute:
            if a.name == name:
                value = helper.get_attribute_value(a)
                return value.decode() if isinstance(value, bytes) else value
        return default

    def set_value(self, name: str, array) -> None:
        if not isinstance(array, np.ndarray):       # numpy gives a lone element for a 0-d result
            element, array = array, np.empty((), object)
            array[()] = element
        if array.size <= VALUE_LIMIT:
            out = np.empty(array.shape, object)
            for idx in np.ndindex(array.shape):
                out[idx] = _canon(array[idx])
            self.values[name] = out

    # ---------------------------------------------------------------- proofs
    def fail(self, message: str):
        raise OnnxImportError(f"node {self.node_label!r} ({self.op}): {message}")

    def require(self, condition, message: str) -> None:
        """Prove ``condition``; a refutation is an import error, an open question a run-time check."""
        answer = S.prove(condition)
        if answer is True:
            return
        if answer is False:
            self.fail(message)
        self.checks.append(RuntimeCheck(self.node_label, self.op, condition, message))

    def require_equal(self, a, b, what: str) -> None:
        answer = S.equal(a, b)
        if answer is True:
            return
        message = f"{what}: {S.show(a)} and {S.show(b)} must be equal"
        if answer is False:
            self.fail(message)
        self.checks.append(RuntimeCheck(self.node_label, self.op, sympy.Eq(S.dim(a), S.dim(b)), message))

    def broadcast(self, *shapes) -> tuple:
        rank = max(len(s) for s in shapes)
        out = []
        for k in range(rank):
            dims = [s[len(s) - rank + k] for s in shapes if len(s) - rank + k >= 0]
            out.append(self.broadcast_dim(dims, rank - k))
        return tuple(out)

    def broadcast_dim(self, dims, from_end: int):
        result = S.dim(1)
        for d in dims:
            d = S.dim(d)
            if S.equal(d, result) or d == 1:
                continue
            if result == 1:
                result = d
                continue
            condition = sympy.Or(sympy.Eq(result, d), sympy.Eq(result, 1), sympy.Eq(d, 1))
            message = (f"sizes {S.show(result)} and {S.show(d)} (axis -{from_end}) do not broadcast: they must be "
                       f"equal, or one of them 1")
            answer = S.prove(condition)
            if answer is False:
                self.fail(message)
            if answer is None:
                self.checks.append(RuntimeCheck(self.node_label, self.op, condition, message))
            result = sympy.Max(result, d)
        return result


def _dtype_or_none(np_dtype, elem_type) -> Optional[str]:
    try:
        return np_dtype(elem_type)
    except Exception:  # noqa: BLE001 - a type numpy lacks: no values tracked for it
        return None


def _canon(v):
    if isinstance(v, sympy.Basic):
        return S.simplify(v)
    return S.dim(int(v))


def _object_array(array: np.ndarray) -> np.ndarray:
    out = np.empty(array.shape, object)
    for idx in np.ndindex(array.shape):
        out[idx] = S.dim(int(array[idx]))
    return out


def _vector(items) -> np.ndarray:
    out = np.empty(len(items), object)
    for k, item in enumerate(items):
        out[k] = item
    return out


def _axis(axis: int, rank: int) -> int:
    return axis + rank if axis < 0 else axis


# ============================================================================== the rules
RULES = {}


def rule(*ops):
    def register(fn):
        for op in ops:
            RULES[op] = fn
        return fn
    return register


@rule("Relu", "Sigmoid", "Tanh", "Erf", "Exp", "Log", "Sqrt", "Abs", "Neg", "Clip", "LeakyRelu", "Elu", "Selu",
      "Gelu", "HardSigmoid", "HardSwish", "Softplus", "Softsign", "Not", "Identity", "Floor", "Ceil", "Round",
      "Reciprocal", "Sign", "Sin", "Cos", "Tan", "Asin", "Acos", "Atan", "Sinh", "Cosh", "Asinh", "Acosh", "Atanh",
      "IsNaN", "IsInf", "Softmax", "LogSoftmax", "Hardmax", "Mish", "Celu", "ThresholdedRelu", "Shrink", "Trilu",
      "CumSum", "BatchNormalization", "InstanceNormalization", "LpNormalization", "MeanVarianceNormalization",
      "LRN", "BitwiseNot", "Cast", "CastLike", "Dropout", "CumProd", "Swish", "DequantizeLinear", "QuantizeLinear",
      "GroupNormalization", "RMSNormalization")
def _same_shape(ctx: _Inference, node):
    shape = ctx.shape(node.input[0])
    if node.op_type in ("Identity", "Cast", "CastLike") and ctx.has_value(node.input[0]):
        ctx.set_value(node.output[0], ctx.value(node.input[0]))
    outs = [shape]
    if node.op_type == "Dropout" and len(node.output) > 1:
        outs.append(shape)                   # the mask
    return outs


@rule("Add", "Sub", "Mul", "Div", "Pow", "Max", "Min", "Sum", "Mean", "Mod", "Equal", "Less", "Greater",
      "LessOrEqual", "GreaterOrEqual", "And", "Or", "Xor", "Where", "PRelu", "BitwiseAnd", "BitwiseOr", "BitwiseXor",
      "BitShift")
def _broadcasting(ctx: _Inference, node):
    inputs = [i for i in node.input if i]
    shape = ctx.broadcast(*(ctx.shape(i) for i in inputs))
    if all(ctx.has_value(i) for i in inputs):
        try:
            _value_arithmetic(ctx, node, inputs)
        except _Unknown:
            pass                              # the shape is still known
    return [shape]


def _value_arithmetic(ctx: _Inference, node, inputs) -> None:
    """Elementwise arithmetic on tracked integer values (torch computes head sizes like this)."""
    vals = [ctx.value(i) for i in inputs]

    def combine(f):
        arrays = np.broadcast_arrays(*vals)
        out = np.empty(arrays[0].shape, object)
        for idx in np.ndindex(out.shape):
            out[idx] = f(*(a[idx] for a in arrays))
        ctx.set_value(node.output[0], out)

    def decide(cond):
        answer = S.prove(cond)
        if answer is None:
            raise _Unknown(f"{cond} depends on the binding")
        return answer

    op = node.op_type
    if op in ("Add", "Sum"):
        combine(lambda *a: sum(a[1:], a[0]))
    elif op == "Sub":
        combine(lambda a, b: a - b)
    elif op == "Mul":
        combine(lambda a, b: a * b)
    elif op == "Div":        # integer Div truncates; sizes are positive, so floor
        combine(lambda a, b: S.dim(int(a) // int(b) if (a < 0) == (b < 0) else -(-int(a) // int(b)))
                if S.is_static(a) and S.is_static(b) else S.floordiv(a, b))
    elif op == "Max":
        combine(lambda *a: sympy.Max(*a))
    elif op == "Min":
        combine(lambda *a: sympy.Min(*a))
    elif op == "Equal":
        combine(lambda a, b: S.dim(int(decide(sympy.Eq(a, b)))))
    elif op == "Where":
        combine(lambda c, a, b: a if decide(sympy.Ne(c, 0)) else b)
    else:
        raise _Unknown(f"no value rule for {op}")


@rule("Constant")
def _constant(ctx: _Inference, node):
    from onnx import numpy_helper
    for a in node.attribute:
        if a.name == "value":
            array = numpy_helper.to_array(a.t)
        elif a.name in ("value_int", "value_ints"):
            array = np.array(ctx.attr(node, a.name), np.int64)
        elif a.name in ("value_float", "value_floats"):
            array = np.array(ctx.attr(node, a.name), np.float32)
        else:
            raise _Unknown(f"Constant with {a.name!r}")
        ctx.dtypes[node.output[0]] = str(array.dtype)
        if str(array.dtype) in INT_TYPES:
            ctx.set_value(node.output[0], _object_array(array))
        return [tuple(S.dim(d) for d in array.shape)]
    raise _Unknown("Constant without a value")


@rule("Shape")
def _shape(ctx: _Inference, node):
    shape = ctx.shape(node.input[0])
    rank = len(shape)
    start = max(0, min(rank, _axis(int(ctx.attr(node, "start", 0)), rank)))
    end = ctx.attr(node, "end", None)
    end = rank if end is None else max(0, min(rank, _axis(int(end), rank)))
    dims = shape[start:end]
    ctx.set_value(node.output[0], _vector(dims))
    return [(S.dim(len(dims)),)]


@rule("Size")
def _size(ctx: _Inference, node):
    size = np.empty((), object)
    size[()] = S.product(ctx.shape(node.input[0]))
    ctx.set_value(node.output[0], size)
    return [()]


@rule("Gather")
def _gather(ctx: _Inference, node):
    data, indices = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    axis = _axis(int(ctx.attr(node, "axis", 0)), len(data))
    if ctx.has_value(node.input[0]) and ctx.has_value(node.input[1]):
        idx = np.array(ctx.ints(node.input[1]), np.int64).reshape(ctx.value(node.input[1]).shape)
        src = ctx.value(node.input[0])
        ctx.set_value(node.output[0], np.take(src, np.where(idx < 0, idx + src.shape[axis], idx), axis=axis))
    elif ctx.has_value(node.input[1]) and not S.is_static(data[axis]):     # constant indices: -1, the last
        for k in {int(k) for k in ctx.value(node.input[1]).reshape(-1) if S.is_static(k)}:
            ctx.require(sympy.Ge(data[axis], k + 1 if k >= 0 else -k),
                        f"index {k} needs axis {axis} of at least {k + 1 if k >= 0 else -k}, got {S.show(data[axis])}")
    return [data[:axis] + indices + data[axis + 1:]]


@rule("GatherElements")
def _gather_elements(ctx: _Inference, node):
    return [ctx.shape(node.input[1])]


@rule("GatherND")
def _gather_nd(ctx: _Inference, node):
    data, indices = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    batch_dims, depth = int(ctx.attr(node, "batch_dims", 0)), S.as_int(indices[-1])
    if depth is None:
        raise _Unknown(f"GatherND coordinates of the symbolic depth {S.show(indices[-1])}")
    if batch_dims + depth > len(data):
        ctx.fail(f"coordinates of depth {depth} after {batch_dims} batch axes index data of rank {len(data)}")
    for k in range(batch_dims):
        ctx.require_equal(data[k], indices[k], f"batch axis {k} of the data and the indices")
    return [indices[:-1] + data[batch_dims + depth:]]


@rule("ScatterND", "ScatterElements")
def _scatter(ctx: _Inference, node):
    data, indices, updates = (ctx.shape(i) for i in node.input[:3])
    if node.op_type == "ScatterND":
        depth = S.as_int(indices[-1])
        if depth is None:
            raise _Unknown(f"ScatterND coordinates of the symbolic depth {S.show(indices[-1])}")
        expected = indices[:-1] + data[depth:]
    else:
        expected = indices
    if len(updates) != len(expected):
        ctx.fail(f"updates {_show_list(updates)} for the expected shape {_show_list(expected)}")
    for k, (u, e) in enumerate(zip(updates, expected)):
        ctx.require_equal(u, e, f"axis {k} of the updates and of the indices")
    return [data]


@rule("ReverseSequence")
def _reverse_sequence(ctx: _Inference, node):
    x = ctx.shape(node.input[0])
    ctx.require_equal(ctx.shape(node.input[1])[0], x[int(ctx.attr(node, "batch_axis", 1))],
                      "the sequence lengths and the batch axis")
    return [x]


@rule("EyeLike")
def _eye_like(ctx: _Inference, node):
    return [ctx.shape(node.input[0])]


@rule("CenterCropPad")
def _center_crop_pad(ctx: _Inference, node):
    out = list(ctx.shape(node.input[0]))
    axes = ctx.attr(node, "axes", None) or range(len(out))
    for a, t in zip(axes, ctx.ints(node.input[1])):
        out[_axis(a, len(out))] = S.dim(t)
    return [tuple(out)]


@rule("HannWindow", "HammingWindow", "BlackmanWindow")
def _window(ctx: _Inference, node):
    return [(S.dim(ctx.value(node.input[0]).reshape(-1)[0]),)]


@rule("Compress")
def _compress(ctx: _Inference, node):
    """The positions a constant condition keeps (one computed at run time would make the size its
    values'), along an axis of static size (else the count would depend on the binding)."""
    src, axis = ctx.shape(node.input[0]), ctx.attr(node, "axis", None)
    condition = _float_constant(ctx, node.input[1])
    if condition is None:
        raise _Unknown("a Compress by a condition computed at run time (the output size is its values')")
    length = S.product(src) if axis is None else src[_axis(int(axis), len(src))]
    if not S.is_static(length):
        raise _Unknown(f"a Compress {'without an axis' if axis is None else f'along the axis {axis}'} of symbolic "
                       f"size {S.show(length)} (the output size would depend on the binding)")
    kept = S.dim(int(np.count_nonzero(condition.reshape(-1)[:int(length)])))
    if axis is None:
        return [(kept,)]
    axis = _axis(int(axis), len(src))
    return [src[:axis] + (kept,) + src[axis + 1:]]


@rule("GridSample")
def _grid_sample(ctx: _Inference, node):
    x, grid = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    ctx.require_equal(x[0], grid[0], "the batch of the input and of the grid")
    return [x[:2] + grid[1:-1]]


@rule("AffineGrid")
def _affine_grid(ctx: _Inference, node):
    theta, size = ctx.shape(node.input[0]), [S.dim(d) for d in ctx.value(node.input[1]).reshape(-1)]
    ctx.require_equal(theta[0], size[0], "the batch of theta and of the size")
    return [(size[0],) + tuple(size[2:]) + (S.dim(len(size) - 2),)]


@rule("NegativeLogLikelihoodLoss", "SoftmaxCrossEntropyLoss")
def _loss(ctx: _Inference, node):
    """The loss per element (reduction none, the target's shape) or its sum or mean; the log-softmax
    (SoftmaxCrossEntropyLoss' second output) of the input's shape."""
    x, target = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    if len(target) != len(x) - 1:
        ctx.fail(f"a target {_show_list(target)} for the input {_show_list(x)}")
    for k, (t, d) in enumerate(zip(target, x[:1] + x[2:])):
        ctx.require_equal(t, d, f"axis {k} of the target and the input without its classes")
    if len(node.input) > 2 and node.input[2]:
        ctx.require_equal(ctx.shape(node.input[2])[0], x[1], "the class weights and the classes")
    loss = target if ctx.attr(node, "reduction", "mean") == "none" else ()
    return [loss, x][:len(node.output)]


@rule("Unsqueeze")
def _unsqueeze(ctx: _Inference, node):
    shape = list(ctx.shape(node.input[0]))
    axes = ctx.ints(node.input[1]) if len(node.input) > 1 and node.input[1] else list(ctx.attr(node, "axes", []))
    rank = len(shape) + len(axes)
    for a in sorted(_axis(a, rank) for a in axes):
        shape.insert(a, S.dim(1))
    if ctx.has_value(node.input[0]):
        ctx.set_value(node.output[0], ctx.value(node.input[0]).reshape([int(d) for d in shape]))
    return [tuple(shape)]


@rule("Squeeze")
def _squeeze(ctx: _Inference, node):
    shape = ctx.shape(node.input[0])
    axes = ctx.ints(node.input[1]) if len(node.input) > 1 and node.input[1] else list(ctx.attr(node, "axes", []))
    axes = [_axis(a, len(shape)) for a in axes]
    if not axes:
        for k, d in enumerate(shape):
            if d == 1:
                axes.append(k)
            elif not S.is_static(d):
                raise _Unknown(f"Squeeze without axes over the symbolic size {S.show(d)} (is it 1?)")
    for a in axes:
        ctx.require_equal(shape[a], 1, f"squeezed axis {a}")
    out = tuple(d for k, d in enumerate(shape) if k not in axes)
    if ctx.has_value(node.input[0]):
        ctx.set_value(node.output[0], ctx.value(node.input[0]).reshape([int(d) for d in out]))
    return [out]


@rule("Concat")
def _concat(ctx: _Inference, node):
    inputs = [i for i in node.input if i]
    shapes = [ctx.shape(i) for i in inputs]
    rank = len(shapes[0])
    axis = _axis(int(ctx.attr(node, "axis", 0)), rank)
    for i, s in zip(inputs[1:], shapes[1:]):
        if len(s) != rank:
            ctx.fail(f"input {i!r} has rank {len(s)}, the first input rank {rank}")
        for k in range(rank):
            if k != axis:
                ctx.require_equal(shapes[0][k], s[k], f"axis {k} of {inputs[0]!r} and {i!r}")
    if all(ctx.has_value(i) for i in inputs):
        ctx.set_value(node.output[0], np.concatenate([ctx.value(i) for i in inputs], axis=axis))
    return [shapes[0][:axis] + (sum((s[axis] for s in shapes), S.dim(0)),) + shapes[0][axis + 1:]]


@rule("Reshape")
def _reshape(ctx: _Inference, node):
    src = ctx.shape(node.input[0])
    target = list(ctx.value(node.input[1]).reshape(-1))
    allowzero = int(ctx.attr(node, "allowzero", 0))
    out = []
    for k, d in enumerate(target):
        if d == 0 and not allowzero:
            if k >= len(src):
                ctx.fail(f"target {_show_list(target)} copies axis {k} (a 0) of the rank-{len(src)} input")
            out.append(src[k])
        else:
            out.append(d)
    total = S.product(src)
    if sum(1 for d in out if d == -1) > 1:
        ctx.fail(f"target {_show_list(target)} has more than one -1")
    if any(S.is_static(d) and int(d) < -1 for d in out):
        ctx.fail(f"target {_show_list(target)} has a negative size")
    if -1 in out:
        known = S.product(d for d in out if d != -1)
        ctx.require(sympy.Eq(sympy.Mod(total, known), 0),
                    f"the input's {S.show(total)} elements do not split into rows of {S.show(known)} "
                    f"(target {_show_list(target)})")
        out[out.index(-1)] = sympy.cancel(total / known)
    else:
        ctx.require_equal(total, S.product(out), f"element counts of the input {_show_list(src)} and the target "
                                                 f"{_show_list(out)}")
    if ctx.has_value(node.input[0]):
        ctx.set_value(node.output[0], ctx.value(node.input[0]).reshape([int(d) for d in out]))
    return [tuple(out)]


def _show_list(dims) -> str:
    return "[" + ", ".join(S.show(d) for d in dims) + "]"


@rule("Flatten")
def _flatten(ctx: _Inference, node):
    src = ctx.shape(node.input[0])
    axis = _axis(int(ctx.attr(node, "axis", 1)), len(src))
    return [(S.product(src[:axis]), S.product(src[axis:]))]


@rule("Transpose")
def _transpose(ctx: _Inference, node):
    src = ctx.shape(node.input[0])
    perm = ctx.attr(node, "perm", None) or list(range(len(src)))[::-1]
    return [tuple(src[p] for p in perm)]


@rule("Expand")
def _expand(ctx: _Inference, node):
    return [ctx.broadcast(ctx.shape(node.input[0]), tuple(ctx.value(node.input[1]).reshape(-1)))]


@rule("ConstantOfShape")
def _constant_of_shape(ctx: _Inference, node):
    return [tuple(ctx.value(node.input[0]).reshape(-1))]


@rule("OneHot")
def _one_hot(ctx: _Inference, node):
    shape = ctx.shape(node.input[0])
    depth = ctx.value(node.input[1]).reshape(-1)[0]
    axis = int(ctx.attr(node, "axis", -1))
    axis = axis + len(shape) + 1 if axis < 0 else axis
    return [shape[:axis] + (S.dim(depth),) + shape[axis:]]


@rule("Einsum")
def _einsum(ctx: _Inference, node):
    from ..ops.einsum import parse
    shapes = [ctx.shape(i) for i in node.input]
    subs, out = parse(str(ctx.attr(node, "equation", "")), [len(s) for s in shapes])
    size = {}
    for sub, shape in zip(subs, shapes):
        for c, d in zip(sub, shape):
            if d == 1:
                size.setdefault(c, d)
            elif c in size and size[c] != 1:
                ctx.require_equal(size[c], d, f"the sizes of einsum letter {c!r}")
            else:
                size[c] = d
    return [tuple(size[c] for c in out)]


@rule("Tile")
def _tile(ctx: _Inference, node):
    return [tuple(d * r for d, r in zip(ctx.shape(node.input[0]), ctx.value(node.input[1]).reshape(-1)))]


@rule("Range")
def _range(ctx: _Inference, node):
    start, limit, delta = (ctx.value(i).reshape(-1)[0] for i in node.input[:3])
    n = sympy.Max(S.ceildiv(limit - start, delta), 0) if S.is_static(delta) else None
    if n is None:
        raise _Unknown("Range with a symbolic step")
    return [(n,)]


@rule("Slice")
def _slice(ctx: _Inference, node):
    src = list(ctx.shape(node.input[0]))
    starts = list(ctx.value(node.input[1]).reshape(-1))
    ends = list(ctx.value(node.input[2]).reshape(-1))
    axes = ctx.ints(node.input[3]) if len(node.input) > 3 and node.input[3] else list(range(len(starts)))
    steps = ctx.ints(node.input[4]) if len(node.input) > 4 and node.input[4] else [1] * len(starts)
    out = list(src)
    for start, end, axis, step in zip(starts, ends, axes, steps):
        axis = _axis(axis, len(src))
        out[axis] = _slice_extent(src[axis], S.dim(start), S.dim(end), step)
    if ctx.has_value(node.input[0]) and all(S.is_static(v) for v in starts + ends):
        index = [slice(None)] * len(src)
        for start, end, axis, step in zip(starts, ends, axes, steps):
            index[_axis(axis, len(src))] = slice(int(start), int(end), step)
        ctx.set_value(node.output[0], ctx.value(node.input[0])[tuple(index)])
    return [tuple(out)]


BIG = 2 ** 30          # an end at or past this is "to the end" (exports use INT64_MAX)


def _position(p, d, lo, hi):
    """A Slice bound ``p`` on an axis of size ``d``, made non-negative and clamped to [lo, d + hi]."""
    if S.is_static(p):
        p = int(p)
        if p >= BIG:
            return d + hi
        if p <= -BIG:
            return S.dim(lo)
        p = S.dim(p) if p >= 0 else d + p
    elif not (p.is_nonnegative or (p - d).is_nonnegative is not None):
        raise _Unknown(f"a Slice bound {S.show(p)} of unknown sign")
    return sympy.Max(lo, sympy.Min(p, d + hi))


def _slice_extent(d, start, end, step: int):
    if step == 0:
        raise _Unknown("Slice with step 0")
    if step > 0:
        s, e = _position(start, d, 0, 0), _position(end, d, 0, 0)
        return sympy.Max(0, S.ceildiv(e - s, step))
    s, e = _position(start, d, 0, -1), _position(end, d, -1, -1)
    return sympy.Max(0, S.ceildiv(s - e, -step))


@rule("Split")
def _split(ctx: _Inference, node):
    src = ctx.shape(node.input[0])
    axis = _axis(int(ctx.attr(node, "axis", 0)), len(src))
    n = len(node.output)
    if len(node.input) > 1 and node.input[1]:
        sizes = list(ctx.value(node.input[1]).reshape(-1))
    elif ctx.attr(node, "split", None):
        sizes = [S.dim(s) for s in ctx.attr(node, "split")]
    else:
        d = src[axis]
        if ctx.attr(node, "num_outputs", None) is None:
            ctx.require(sympy.Eq(sympy.Mod(d, n), 0), f"axis {axis} of size {S.show(d)} does not split into {n}")
            sizes = [S.floordiv(d, n)] * n
        else:
            piece = S.ceildiv(d, n)
            sizes = [piece] * (n - 1) + [d - piece * (n - 1)]
    ctx.require_equal(sum(sizes, S.dim(0)), src[axis], f"the split sizes' sum and axis {axis}")
    return [src[:axis] + (s,) + src[axis + 1:] for s in sizes]


@rule("DepthToSpace", "SpaceToDepth")
def _space_depth(ctx: _Inference, node):
    n, c, h, w = ctx.shape(node.input[0])
    b = int(ctx.attr(node, "blocksize", 1))
    if node.op_type == "SpaceToDepth":
        for d in (h, w):
            ctx.require(sympy.Eq(sympy.Mod(d, b), 0), f"size {S.show(d)} is not a multiple of blocksize {b}")
        return [(n, c * b * b, S.floordiv(h, b), S.floordiv(w, b))]
    ctx.require(sympy.Eq(sympy.Mod(c, b * b), 0), f"{S.show(c)} channels are not a multiple of blocksize^2 = {b * b}")
    return [(n, S.floordiv(c, b * b), h * b, w * b)]


@rule("Pad")
def _pad(ctx: _Inference, node):
    src = list(ctx.shape(node.input[0]))
    pads = ctx.ints(node.input[1]) if len(node.input) > 1 and node.input[1] else list(ctx.attr(node, "pads", []))
    axes = ctx.ints(node.input[3]) if len(node.input) > 3 and node.input[3] else list(range(len(src)))
    half = len(pads) // 2
    reflect = ctx.attr(node, "mode", "constant") == "reflect"
    for k, a in enumerate(axes):
        a = _axis(a, len(src))
        if reflect and max(pads[k], pads[k + half]) > 0:     # mirrored without the edge: needs more
            ctx.require(sympy.Ge(src[a], max(pads[k], pads[k + half]) + 1),
                        f"reflect padding by {max(pads[k], pads[k + half])} needs axis {a} larger than that, got "
                        f"{S.show(src[a])}")
        src[a] = src[a] + pads[k] + pads[k + half]
    return [tuple(src)]


REDUCTIONS = ("ReduceSum", "ReduceMean", "ReduceMax", "ReduceMin", "ReduceProd", "ReduceL1", "ReduceL2",
              "ReduceLogSum", "ReduceLogSumExp", "ReduceSumSquare")


@rule(*REDUCTIONS)
def _reduce(ctx: _Inference, node):
    src = ctx.shape(node.input[0])
    if len(node.input) > 1 and node.input[1]:
        axes = ctx.ints(node.input[1])
    else:
        axes = list(ctx.attr(node, "axes", []) or [])
    if not axes:
        if int(ctx.attr(node, "noop_with_empty_axes", 0)):
            return [src]
        axes = list(range(len(src)))
    axes = {_axis(a, len(src)) for a in axes}
    if int(ctx.attr(node, "keepdims", 1)):
        return [tuple(S.dim(1) if k in axes else d for k, d in enumerate(src))]
    return [tuple(d for k, d in enumerate(src) if k not in axes)]


@rule("ArgMax", "ArgMin")
def _arg_reduce(ctx: _Inference, node):
    src = ctx.shape(node.input[0])
    axis = _axis(int(ctx.attr(node, "axis", 0)), len(src))
    if int(ctx.attr(node, "keepdims", 1)):
        return [src[:axis] + (S.dim(1),) + src[axis + 1:]]
    return [src[:axis] + src[axis + 1:]]


@rule("TopK")
def _top_k(ctx: _Inference, node):
    """Values and indices: the input's shape with ``K`` (a constant, or a size computed from shapes)
    along the axis, which must hold at least ``K`` (checked at run time where it is symbolic)."""
    src = ctx.shape(node.input[0])
    axis = _axis(int(ctx.attr(node, "axis", -1)), len(src))
    k = S.dim(ctx.value(node.input[1]).reshape(-1)[0])
    ctx.require(sympy.Ge(src[axis], k), f"TopK of K = {S.show(k)} needs axis {axis} at least that long, got "
                                        f"{S.show(src[axis])}")
    if not S.is_static(k):
        ctx.require(sympy.Ge(k, 1), f"TopK of K = {S.show(k)} needs K of at least 1")
    out = src[:axis] + (k,) + src[axis + 1:]
    return [out, out]


@rule("LayerNormalization")
def _layer_norm(ctx: _Inference, node):
    src = ctx.shape(node.input[0])
    axis = _axis(int(ctx.attr(node, "axis", -1)), len(src))
    ctx.broadcast(src[axis:], ctx.shape(node.input[1]))     # the scale must broadcast to the normalised axes
    stats = src[:axis] + (S.dim(1),) * (len(src) - axis)
    return [src, stats, stats][:len(node.output)]


@rule("Attention")
def _attention(ctx: _Inference, node):
    """Y, present_key, present_value and the scores' output of 4-d ``[B, H, S, D]`` inputs, or of
    3-d ``[B, S, H*D]`` ones with the head counts; the keys are the past's and the new ones."""
    inputs = list(node.input) + [""] * 7
    q, k, v = (ctx.shape(i) for i in inputs[:3])
    if len(q) == 3:
        hq, hkv = (int(ctx.attr(node, a, 0) or 0) for a in ("q_num_heads", "kv_num_heads"))
        if not hq or not hkv:
            raise _Unknown("3-d inputs without q_num_heads and kv_num_heads")
        for x, h in ((q, hq), (k, hkv), (v, hkv)):
            ctx.require(sympy.Eq(sympy.Mod(x[2], h), 0), f"hidden size {S.show(x[2])} is not a multiple of {h} heads")
        q, k, v = ((x[0], h, x[1], S.floordiv(x[2], h)) for x, h in ((q, hq), (k, hkv), (v, hkv)))
    b, hq, sq, _ = q
    _, hkv, skv, dk = k
    ctx.require_equal(skv, v[2], "the key and value lengths")
    total = ctx.shape(inputs[4])[2] + skv if inputs[4] else skv
    if inputs[3]:
        mask = ctx.shape(inputs[3])
        ctx.broadcast(mask[:-1], (b, hq, sq))
        ctx.require(sympy.Le(mask[-1], total), f"attn_mask's last axis ({S.show(mask[-1])}) is longer than the "
                                               f"{S.show(total)} keys")
    y = (b, hq, sq, v[3]) if len(ctx.shape(inputs[0])) == 4 else (b, sq, hq * v[3])
    return [y, (b, hkv, total, dk), (b, hkv, total, v[3]), (b, hq, sq, total)][:len(node.output)]


@rule("RotaryEmbedding")
def _rotary_embedding(ctx: _Inference, node):
    """The input's shape; the position ids (without them, the caches' leading axes) are read at the
    input's batch and sequence index."""
    x = ctx.shape(node.input[0])
    ids = node.input[3] if len(node.input) > 3 and node.input[3] else None
    lead = ctx.shape(ids) if ids else ctx.shape(node.input[1])[:-1]
    if len(lead) != 2 or len(x) not in (3, 4):
        ctx.fail(f"position ids (or caches) of leading shape {_show_list(lead)} for an input of shape {_show_list(x)}")
    for d, size, what in zip(lead, (x[0], x[-2]), ("batch", "sequence")):
        ctx.require_equal(d, size, f"the position ids' (or caches') {what} size and the input's")
    return [x]


@rule("SwiGLU")
def _swiglu(ctx: _Inference, node):
    """Gate and value of one shape (no broadcast)."""
    gate, value = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    if len(gate) != len(value):
        ctx.fail(f"gate {_show_list(gate)} and value {_show_list(value)} of different ranks")
    for a, b in zip(gate, value):
        ctx.require_equal(a, b, "the gate's and the value's sizes")
    return [gate]


@rule("MatMulInteger", "QLinearMatMul")
def _integer_matmul(ctx: _Inference, node):
    from onnx import helper
    b = node.input[3] if node.op_type == "QLinearMatMul" else node.input[1]
    return _matmul(ctx, helper.make_node("MatMul", [node.input[0], b], node.output[:1]))


@rule("DynamicQuantizeLinear")
def _dynamic_quantize(ctx: _Inference, node):
    """The quantized input, and its scale and zero point (scalars)."""
    return [ctx.shape(node.input[0]), (), ()]


@rule("MatMul")
def _matmul(ctx: _Inference, node):
    a, b = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    a2 = a if len(a) > 1 else (S.dim(1),) + a
    b2 = b if len(b) > 1 else b + (S.dim(1),)
    ctx.require_equal(a2[-1], b2[-2], f"the inner sizes of {_show_list(a)} @ {_show_list(b)}")
    batch = ctx.broadcast(a2[:-2], b2[:-2]) if len(a2) > 2 or len(b2) > 2 else ()
    out = batch + (a2[-2], b2[-1])
    if len(a) == 1:
        out = out[:-2] + out[-1:]
    if len(b) == 1:
        out = out[:-1]
    return [out]


@rule("Gemm")
def _gemm(ctx: _Inference, node):
    a, b = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    if int(ctx.attr(node, "transA", 0)):
        a = a[::-1]
    if int(ctx.attr(node, "transB", 0)):
        b = b[::-1]
    ctx.require_equal(a[1], b[0], "Gemm's inner sizes")
    out = (a[0], b[1])
    if len(node.input) > 2 and node.input[2]:
        ctx.broadcast(out, ctx.shape(node.input[2]))
    return [out]


def _window_attrs(ctx: _Inference, node, spatial: int, kernel):
    strides = list(ctx.attr(node, "strides", None) or [1] * spatial)
    dilations = list(ctx.attr(node, "dilations", None) or [1] * spatial)
    pads = list(ctx.attr(node, "pads", None) or [0] * (2 * spatial))
    auto_pad = ctx.attr(node, "auto_pad", "NOTSET")
    return strides, dilations, pads, auto_pad


def _window_out(ctx: _Inference, size, k, s, d, pb, pe, auto_pad: str, ceil_mode: bool):
    if auto_pad in ("SAME_UPPER", "SAME_LOWER"):
        out = S.ceildiv(size, s)
    else:
        if auto_pad == "VALID":
            pb = pe = 0
        span = size + pb + pe - d * (k - 1) - 1
        if ceil_mode:
            if pb or pe or k < s:
                raise _Unknown("ceil_mode with padding (the last window's start rule) over a symbolic size")
            out = S.ceildiv(span, s) + 1
        else:
            out = S.floordiv(span, s) + 1
    if auto_pad not in ("SAME_UPPER", "SAME_LOWER"):
        need = d * (k - 1) + 1 - pb - pe          # the padded input must hold one window
        low = max(S.lower_bound(size) or 1, 1)    # every size is >= 1 (earlier checks see to it)
        if need > low:
            ctx.require(sympy.Ge(size, need), f"an input of size {S.show(size)} is smaller than the window "
                                              f"(kernel {k}, dilation {d}, pads {pb}+{pe}): it needs "
                                              f"{S.show(size)} >= {need}")
    return out


@rule("Conv", "ConvInteger")
def _conv(ctx: _Inference, node):
    x, w = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    spatial = len(x) - 2
    kernel = list(ctx.attr(node, "kernel_shape", None) or w[2:])
    group = int(ctx.attr(node, "group", 1))
    ctx.require_equal(x[1], w[1] * group, f"input channels and weight channels x group ({group})")
    strides, dilations, pads, auto_pad = _window_attrs(ctx, node, spatial, kernel)
    out = [_window_out(ctx, x[2 + i], int(kernel[i]), strides[i], dilations[i], pads[i], pads[i + spatial],
                       auto_pad, False) for i in range(spatial)]
    return [(x[0], w[0]) + tuple(out)]


@rule("QLinearConv")
def _qlinear_conv(ctx: _Inference, node):
    """Conv's rule over x and w (inputs 0 and 3; the others are scales and zero points)."""
    from onnx import helper
    conv = helper.make_node("Conv", [node.input[0], node.input[3]], node.output[:1])
    conv.attribute.extend(node.attribute)
    return _conv(ctx, conv)


@rule("ConvTranspose")
def _conv_transpose(ctx: _Inference, node):
    x, w = ctx.shape(node.input[0]), ctx.shape(node.input[1])
    spatial = len(x) - 2
    if ctx.attr(node, "output_shape", None):
        raise _Unknown("ConvTranspose with output_shape")
    kernel = list(ctx.attr(node, "kernel_shape", None) or w[2:])
    group = int(ctx.attr(node, "group", 1))
    strides, dilations, pads, auto_pad = _window_attrs(ctx, node, spatial, kernel)
    if auto_pad not in ("NOTSET", "VALID"):
        raise _Unknown(f"ConvTranspose with auto_pad {auto_pad}")
    extra = list(ctx.attr(node, "output_padding", None) or [0] * spatial)
    out = [strides[i] * (x[2 + i] - 1) + extra[i] + (int(kernel[i]) - 1) * dilations[i] + 1 - pads[i]
           - pads[i + spatial] for i in range(spatial)]
    return [(x[0], w[1] * group) + tuple(out)]


@rule("Resize", "Upsample")
def _resize(ctx: _Inference, node):
    """Sizes given (a constant or computed from shapes), or ``floor(size * scale)`` for constant
    scales (ONNX: the output size is the input size times the scale, rounded down)."""
    x = ctx.shape(node.input[0])
    names = list(node.input)
    scales_name = names[1] if node.op_type == "Upsample" else (names[2] if len(names) > 2 else "")
    sizes_name = names[3] if node.op_type == "Resize" and len(names) > 3 else ""
    if sizes_name:
        sizes = list(ctx.value(sizes_name).reshape(-1))
        if len(sizes) != len(x):
            raise _Unknown("Resize with sizes for some axes only")
        out = tuple(S.dim(v) for v in sizes)
        for k, d in enumerate(out):
            ctx.require(sympy.Ge(d, 1), f"the output size {S.show(d)} along axis {k} must be at least 1")
        return [out]
    scales = _float_constant(ctx, scales_name) if scales_name else None
    if scales is None:
        raise _Unknown("Resize without constant scales or sizes")
    scales = [sympy.nsimplify(float(v)) for v in scales.reshape(-1)]
    if len(scales) != len(x):
        raise _Unknown("Resize with scales for some axes only")
    out = tuple(d if sc == 1 else sympy.floor(d * sc) for d, sc in zip(x, scales))
    for k, (d, sc) in enumerate(zip(out, scales)):
        if sc < 1:      # a down-scaling: a small input leaves nothing (the import tries the smallest size that works)
            ctx.require(sympy.Ge(d, 1), f"an input of size {S.show(x[k])} scaled by {sc} leaves no output "
                                        f"along axis {k}: it needs {S.show(x[k])} >= {int(sympy.ceiling(1 / sc))}")
    return [out]


def _float_constant(ctx: _Inference, name: str):
    """The value of a float initializer or Constant node (not tracked as sizes), or None."""
    from onnx import numpy_helper
    for t in ctx.model.graph.initializer:
        if t.name == name:
            return numpy_helper.to_array(t)
    for n in ctx.model.graph.node:
        if n.op_type == "Constant" and n.output[0] == name and n.attribute and n.attribute[0].name == "value":
            return numpy_helper.to_array(n.attribute[0].t)
    return None


@rule("MaxPool", "AveragePool", "LpPool")
def _pool(ctx: _Inference, node):
    x = ctx.shape(node.input[0])
    spatial = len(x) - 2
    kernel = list(ctx.attr(node, "kernel_shape"))
    strides, dilations, pads, auto_pad = _window_attrs(ctx, node, spatial, kernel)
    ceil_mode = bool(int(ctx.attr(node, "ceil_mode", 0)))
    out = x[:2] + tuple(_window_out(ctx, x[2 + i], int(kernel[i]), strides[i], dilations[i], pads[i],
                                    pads[i + spatial], auto_pad, ceil_mode) for i in range(spatial))
    return [out] * len([o for o in node.output])


@rule("GlobalAveragePool", "GlobalMaxPool", "GlobalLpPool")
def _global_pool(ctx: _Inference, node):
    x = ctx.shape(node.input[0])
    return [x[:2] + (S.dim(1),) * (len(x) - 2)]


@rule("LSTM", "GRU", "RNN")
def _recurrent(ctx: _Inference, node):
    """Y [seq, directions, batch, hidden] and the final states [directions, batch, hidden] (batch first
    with ``layout=1``).  The layer itself compiles per shape (unrolled over its sequence)."""
    x = ctx.shape(node.input[0])
    if len(x) != 3:
        raise _Unknown(f"{node.op_type} of an input of rank {len(x)} (3 expected)")
    layout = int(ctx.attr(node, "layout", 0))
    seq, batch = (x[1], x[0]) if layout else (x[0], x[1])
    directions = 2 if ctx.attr(node, "direction", "forward") == "bidirectional" else 1
    hidden = ctx.attr(node, "hidden_size")
    if hidden is None:
        r = _float_constant(ctx, node.input[2]) if len(node.input) > 2 else None
        if r is None or r.ndim != 3:
            raise _Unknown(f"{node.op_type} without hidden_size and with no constant R to read it from")
        hidden = r.shape[-1]
    d, h = S.dim(directions), S.dim(int(hidden))
    y = (batch, seq, d, h) if layout else (seq, d, batch, h)
    state = (batch, d, h) if layout else (d, batch, h)
    return [y] + [state] * (len(node.output) - 1)
