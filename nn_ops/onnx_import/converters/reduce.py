"""Converters for reductions (ReduceMean/Sum/Max/Min, ArgMax/ArgMin, Hardmax, CumSum/CumProd), Slice, Split,
Erf, Pow (Cast is in math.py)."""
from __future__ import annotations

from ..context import ImportContext, Unsupported, converter

_REDUCE = {"ReduceMean": "mean", "ReduceSum": "sum", "ReduceMax": "max", "ReduceMin": "min"}


def reduce_axes(ctx: ImportContext, node):
    """The axes a Reduce* node reduces (from its input or attribute), or None when it is a no-op."""
    if len(node.input) > 1 and node.input[1]:
        axes = [int(a) for a in ctx.require_const(node, 1, "axes")]
    else:
        axes = list(ctx.attr(node, "axes", []))
    if not axes and ctx.attr(node, "noop_with_empty_axes", 0):
        return None
    return axes


def _reduce(kind):
    def convert(ctx: ImportContext, node):
        axes = reduce_axes(ctx, node)
        if axes is None:
            ctx.emit("identity", [node.input[0]], node.output[0], name=node.name)
            return
        attrs = {"axes": tuple(axes), "kind": kind, "keepdims": bool(ctx.attr(node, "keepdims", 1))}
        if ctx.dtype(node.input[0]) == "bool":      # max/min of bools: any/all, reduced as uint8
            if kind not in ("max", "min"):
                raise Unsupported(f"{node.op_type} of a bool tensor")
            wide = ctx.emit("cast", [node.input[0]], ctx.graph.fresh_name(node.output[0] + ".u8"), {"to": "uint8"})
            red = ctx.emit("reduce", [wide], ctx.graph.fresh_name(node.output[0] + ".red"), attrs)
            ctx.emit("cast", [red], node.output[0], {"to": "bool"}, name=node.name)
            return
        ctx.emit("reduce", [node.input[0]], node.output[0], attrs, name=node.name)
    return convert


for _onnx, _kind in _REDUCE.items():
    converter(_onnx, since=1)(_reduce(_kind))


def _static_slice(shape, starts, ends, axes, steps):
    begin, end, step = [0] * len(shape), list(shape), [1] * len(shape)
    for s, e, a, st in zip(starts, ends, axes, steps):
        a = int(a) + len(shape) if int(a) < 0 else int(a)
        r = range(shape[a])[slice(int(s), int(e), int(st))]
        begin[a], end[a], step[a] = r.start, r.stop, r.step
    return begin, end, step


@converter("Slice", since=10)
def slice_(ctx: ImportContext, node):
    shape = ctx.shape(node.input[0])
    starts = ctx.require_const(node, 1, "starts")
    ends = ctx.require_const(node, 2, "ends")
    axes = ctx.require_const(node, 3, "axes") if len(node.input) > 3 and node.input[3] else range(len(starts))
    steps = ctx.require_const(node, 4, "steps") if len(node.input) > 4 and node.input[4] else [1] * len(starts)
    if any(int(st) == 0 for st in steps):
        raise Unsupported(f"input 4 (steps) is {[int(st) for st in steps]}: a step of 0 is not allowed")
    if not len(starts) == len(ends) == len(axes) == len(steps):
        raise Unsupported(f"starts, ends, axes and steps have {len(starts)}, {len(ends)}, {len(axes)} and "
                          f"{len(steps)} values; they must have as many each")
    for a in axes:
        if not -len(shape) <= int(a) < len(shape):
            raise Unsupported(f"axes {[int(v) for v in axes]}: {int(a)} is out of range for rank {len(shape)}")
    begin, end, step = _static_slice(shape, starts, ends, axes, steps)
    ctx.emit("slice", [node.input[0]], node.output[0], {"begin": tuple(begin), "end": tuple(end), "step": tuple(step)},
             name=node.name)


@converter("Split", since=13)
def split(ctx: ImportContext, node):
    shape = ctx.shape(node.input[0])
    axis = int(ctx.attr(node, "axis", 0))
    axis = axis + len(shape) if axis < 0 else axis
    n = len(node.output)
    if len(node.input) > 1 and node.input[1]:
        sizes = [int(v) for v in ctx.require_const(node, 1, "split")]
    else:
        chunk = -(-shape[axis] // n)
        sizes = [min(chunk, shape[axis] - k * chunk) for k in range(n)]
    start = 0
    for out, size in zip(node.output, sizes):
        begin, end, step = [0] * len(shape), list(shape), [1] * len(shape)
        begin[axis], end[axis] = start, start + size
        start += size
        if out:
            ctx.emit("slice", [node.input[0]], out, {"begin": tuple(begin), "end": tuple(end), "step": tuple(step)},
                     name=f"{node.name}:{out}")


@converter("Erf", since=13)
def erf(ctx: ImportContext, node):
    ctx.emit("erf", [node.input[0]], node.output[0], name=node.name)


@converter("Pow", since=13)
def pow_(ctx: ImportContext, node):
    base, exp = node.input[0], node.input[1]
    dtype = ctx.dtype(base)
    exponent = ctx.const(exp)
    if exponent is not None and exponent.size == 1 and len(ctx.shape(base)) >= exponent.ndim \
            and dtype.startswith("float"):
        ctx.emit("pow_const", [base], node.output[0], {"exponent": float(exponent.reshape(()))}, name=node.name)
        return
    if ctx.dtype(exp) == "bool" or dtype == "bool":
        raise Unsupported("Pow of bool tensors")
    out = node.output[0]
    # integer powers go through float64 (exact while the result fits in 53 bits)
    work = dtype if dtype.startswith("float") else "float64"
    args = []
    for name in (base, exp):
        if ctx.dtype(name) != work:
            name = ctx.emit("cast", [name], ctx.graph.fresh_name(f"{out}.{work}"), {"to": work})
        args.append(name)
    if work == dtype:
        ctx.emit("pow", args, out, name=node.name)
        return
    raw = ctx.emit("pow", args, ctx.graph.fresh_name(out + ".pow"))
    ctx.emit("cast", [ctx.emit("round", [raw], ctx.graph.fresh_name(out + ".round"))], out, {"to": dtype},
             name=node.name)


def _arg(kind):
    def convert(ctx: ImportContext, node):
        if ctx.dtype(node.input[0]) == "bool":
            raise Unsupported(f"{node.op_type} of a bool tensor")
        attrs = {"axis": int(ctx.attr(node, "axis", 0)), "kind": kind, "keepdims": bool(ctx.attr(node, "keepdims", 1)),
                 "select_last": bool(ctx.attr(node, "select_last_index", 0))}
        ctx.emit("arg_reduce", [node.input[0]], node.output[0], attrs, name=node.name)
    return convert


converter("ArgMax", since=1)(_arg("max"))
converter("ArgMin", since=1)(_arg("min"))


@converter("Hardmax", since=13)
def hardmax(ctx: ImportContext, node):
    ctx.emit("hardmax", [node.input[0]], node.output[0], {"axis": int(ctx.attr(node, "axis", -1))}, name=node.name)


def _cumulative(kind):
    def convert(ctx: ImportContext, node):
        axis = int(ctx.require_const(node, 1, "axis").reshape(()))
        ctx.emit("cumsum", [node.input[0]], node.output[0],
                 {"axis": axis, "exclusive": bool(ctx.attr(node, "exclusive", 0)),
                  "reverse": bool(ctx.attr(node, "reverse", 0)), "kind": kind}, name=node.name)
    return convert


converter("CumSum", since=11)(_cumulative("sum"))
converter("CumProd", since=26)(_cumulative("prod"))
