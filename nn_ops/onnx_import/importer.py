"""``from_onnx(model)``: an ONNX model (path or ModelProto) to a loopweave Graph (or DynamicGraph).

Order of work: read and check the file, bring the default-domain opset to >= 13,
run ONNX shape inference, then walk the nodes once: constant subgraphs (including
``Shape`` of statically shaped values) are evaluated in numpy, everything else goes
through the converter table.  Every node that cannot be converted is collected, and
one :class:`OnnxImportError` lists them all before anything is compiled.
"""
from __future__ import annotations

import os
from typing import Dict, Optional, Sequence

import numpy as np

from ...extras import install_hint
from ...errors import InternalError, LoopweaveError, OnnxImportError
from ..network.graph import Graph
from . import converters as _converters  # noqa: F401 - importing it registers every converter
from .context import CONVERTERS, ImportContext, NeedsConstant, Unsupported, check_size, find_converter
from .converters.qoperator import domain_op
from .fold import FOLDERS, try_fold
from .qdq import qdq_to_qlinear
from .validate import check_attributes

MIN_OPSET = 13


def _require_onnx():
    try:
        import onnx  # noqa: F401
    except ImportError as exc:
        raise OnnxImportError(f"from_onnx needs the optional package 'onnx', which is not installed: "
                              f"{install_hint('onnx')}") from exc


def load_model(model):
    _require_onnx()
    import onnx
    if isinstance(model, onnx.ModelProto):
        return model
    if isinstance(model, (str, os.PathLike)):
        path = os.fspath(model)
        if not os.path.exists(path):
            raise OnnxImportError(f"ONNX model file {path!r} does not exist")
        try:
            return onnx.load(path)
        except Exception as exc:  # protobuf's DecodeError and friends
            raise OnnxImportError(f"{path!r} is not a valid ONNX model (cannot parse it: {exc})") from exc
    raise OnnxImportError(f"from_onnx takes a file path or an onnx.ModelProto, got {type(model).__name__}")


def model_opset(model) -> int:
    for imp in model.opset_import:
        if imp.domain in ("", "ai.onnx"):
            return int(imp.version)
    return 0


def np_dtype(elem_type: int) -> str:
    from onnx import helper
    try:
        return str(np.dtype(helper.tensor_dtype_to_np_dtype(elem_type)))
    except Exception:  # noqa: BLE001 - onnx raises KeyError for an element type it does not know
        raise OnnxImportError(f"ONNX element type {elem_type} is not a type loopweave knows") from None


def _tensor_dtype(vi, what: str) -> str:
    """The loopweave dtype of a graph input/output, or a clear error for what it cannot hold."""
    from onnx import TensorProto
    from ...dsl.dtypes import ALL_DTYPES
    if not vi.type.HasField("tensor_type"):
        kind = vi.type.WhichOneof("value") or "no type"
        raise OnnxImportError(f"{what} {vi.name!r} is of ONNX type {kind!r}; loopweave imports tensors only "
                              f"(no sequences, maps or optionals)")
    elem = vi.type.tensor_type.elem_type
    name = TensorProto.DataType.Name(elem) if elem in TensorProto.DataType.values() else str(elem)
    try:
        dtype = np_dtype(elem)
    except Exception:  # noqa: BLE001 - onnx raises KeyError/ValueError for types numpy lacks
        dtype = None
    if dtype not in ALL_DTYPES:
        raise OnnxImportError(f"{what} {vi.name!r} has element type {name}; loopweave supports "
                              f"{', '.join(ALL_DTYPES)}")
    return dtype


SHAPE_LIKE_LIMIT = 4096


def _data_prop_is_cheap(model) -> bool:
    """ONNX's data propagation walks every element of a 1-D input that reaches a shape-like operand
    or arithmetic on one (a declared length of 2^31 took minutes); no shape has more than a few
    thousand entries, so a longer 1-D input turns it off (it only ever helps shape computations)."""
    for inp in model.graph.input:
        dims = inp.type.tensor_type.shape.dim
        if len(dims) == 1 and dims[0].dim_value > SHAPE_LIKE_LIMIT:
            return False
    return True


def precheck(model, opset: int) -> None:
    """Attribute contracts checked before ONNX's shape inference sees the model: its C++ aborts the
    process on some of them (Split's num_outputs unequal to its outputs).  Only declared shapes are
    known here, so rules that need a node's input shape wait for the node walk."""
    from onnx import numpy_helper
    g = Graph("precheck")
    ctx = ImportContext(g, opset)
    for t in model.graph.initializer:       # the small ones: shape-like operands (Split sizes, Range bounds)
        if len(t.dims) <= 1 and (not t.dims or t.dims[0] <= SHAPE_LIKE_LIMIT):
            try:
                g.initializers[t.name] = numpy_helper.to_array(t)
            except Exception:  # noqa: BLE001 - a broken tensor is reported by the node walk
                pass
    problems = []
    for k, node in enumerate(model.graph.node):
        if node.domain in ("", "ai.onnx"):
            try:
                check_attributes(ctx, node)
            except Unsupported as exc:
                problems.append((node_label(k, node), node.op_type, opset, str(exc)))
    if problems:
        lines = "\n".join(f"  - node {n!r}: {op} (opset {v}): {why}" for n, op, v, why in problems)
        raise OnnxImportError(f"the ONNX model has {len(problems)} node(s) loopweave cannot import:\n{lines}",
                              problems)


def import_static(model, opset: int, name: str) -> Graph:
    """The import proper, for a model whose graph inputs all have static shapes (its QDQ patterns as
    integer operators: ``qdq.py``)."""
    import onnx
    model, qdq_outputs = qdq_to_qlinear(model)
    precheck(model, opset)
    try:
        typed = onnx.shape_inference.infer_shapes(_without_weight_data(model), strict_mode=False,
                                                  data_prop=_data_prop_is_cheap(model))
    except Exception as exc:
        raise OnnxImportError(f"ONNX shape inference failed on the model: {exc}") from exc
    return _convert(model, opset, name, typed, qdq_outputs)


# float initializers with more elements than this go to shape inference without their data
_WEIGHT_DATA_LEFT_OUT = 1024


def _without_weight_data(model):
    """The model as ONNX's shape inference needs it: large float initializers keep their name, type
    and dims but not their data.  Inference never reads a float weight's values, yet it serialises
    the whole model into C++ and back (GPT-2: 1.4 s of a 2.4 s import; 3 ms without the weights, the
    same inferred types for every zoo model).  Integer and small tensors keep their data: shape
    computations may read them."""
    import onnx
    from onnx import TensorProto

    def copy_fields(src, dst, skip):
        for field, value in src.ListFields():
            if field.name == skip:
                continue
            if hasattr(value, "extend"):
                getattr(dst, field.name).extend(value)
            elif hasattr(value, "CopyFrom"):
                getattr(dst, field.name).CopyFrom(value)
            else:
                setattr(dst, field.name, value)
    graph = onnx.GraphProto()
    copy_fields(model.graph, graph, "initializer")
    for t in model.graph.initializer:
        count = 1
        for d in t.dims:
            count *= d
        if t.data_type in (TensorProto.FLOAT, TensorProto.DOUBLE, TensorProto.FLOAT16, TensorProto.BFLOAT16) \
                and count > _WEIGHT_DATA_LEFT_OUT:
            slim = graph.initializer.add()
            slim.name, slim.data_type = t.name, t.data_type
            slim.dims.extend(t.dims)
        else:
            graph.initializer.append(t)
    result = onnx.ModelProto()
    copy_fields(model, result, "graph")
    result.graph.CopyFrom(graph)
    return result


def with_input_shapes(model, input_shapes):
    """The model with ``input_shapes`` applied to its inputs (checked: names, ranks, no empty tensors)."""
    init_names = {t.name for t in model.graph.initializer}
    known = {i.name for i in model.graph.input}
    for name in input_shapes:
        if name not in known:
            raise OnnxImportError(f"input_shapes names {name!r}, which is not an input of the model "
                                  f"(inputs: {', '.join(sorted(known - init_names))})")
    if input_shapes:
        import onnx
        model = onnx.ModelProto.FromString(model.SerializeToString())
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        _tensor_dtype(inp, "input")
        dims = inp.type.tensor_type.shape.dim
        if inp.name in input_shapes:
            shape = list(input_shapes[inp.name])
            if len(shape) != len(dims):
                raise OnnxImportError(f"input_shapes[{inp.name!r}] has rank {len(shape)}, the model's input has "
                                      f"rank {len(dims)}")
            for d, v in zip(dims, shape):
                d.ClearField("dim_param")
                d.dim_value = int(v)
            continue
        # an empty input is fine as long as no kernel reads it (axes, pads, CastLike's type source);
        # an op that would compute with it reports an empty result at import
    return model


def symbolic_dims(model) -> Dict[str, list]:
    """Graph inputs with dimensions still unknown: {input name: [size or symbol name per dim]}."""
    init_names = {t.name for t in model.graph.initializer}
    found = {}
    for inp in model.graph.input:
        if inp.name in init_names:
            continue
        dims = inp.type.tensor_type.shape.dim
        shape = [d.dim_value if d.HasField("dim_value") and d.dim_value >= 0 else (d.dim_param or f"{inp.name}.{k}")
                 for k, d in enumerate(dims)]
        if any(isinstance(d, str) for d in shape):
            found[inp.name] = shape
    return found


def node_label(k: int, node) -> str:
    return node.name or f"#{k} ({node.output[0] if node.output else node.op_type})"


def shape_inputs_behind(model, exc: OnnxImportError) -> list:
    """Graph inputs that operands which must be constant (shapes, axes, pads...) are computed from.

    Only when every problem is such an operand: then the model is importable once those
    inputs' values are known, i.e. at run time."""
    needed = getattr(exc, "needs_constant", None)
    if not exc.unsupported or not needed or len(needed) < len(exc.unsupported):
        return []
    producer = {o: n for n in model.graph.node for o in n.output}
    inits = {t.name for t in model.graph.initializer}
    graph_inputs = {i.name for i in model.graph.input if i.name not in inits}
    found, stack, seen = [], [name for names in needed for name in names], set()
    while stack:
        name = stack.pop()
        if name in seen:
            continue
        seen.add(name)
        if name in graph_inputs:
            found.append(name)
        elif name in producer:
            stack.extend(i for i in producer[name].input if i)
    return sorted(found)


def typed_values(model):
    """(value info, dtype) of each value shape inference typed in ``model`` (its value infos and
    outputs), leaving out element types numpy lacks."""
    for vi in list(model.graph.value_info) + list(model.graph.output):
        try:
            yield vi, np_dtype(vi.type.tensor_type.elem_type)
        except Exception:  # noqa: BLE001 - an element type numpy lacks: no size or type to trust
            continue


def inferred_types(model) -> Dict[str, str]:
    """{value: dtype} as ONNX's shape inference types ``model`` (run on it without its weight data),
    or {} where inference fails."""
    import onnx
    try:
        typed = onnx.shape_inference.infer_shapes(_without_weight_data(model), strict_mode=False)
    except Exception:  # noqa: BLE001 - then nothing is typed: callers read such values as unknown
        return {}
    return {vi.name: dtype for vi, dtype in typed_values(typed)}


def _value_info_shapes(model) -> Dict[str, tuple]:
    out = {}
    for vi, dtype in typed_values(model):
        tt = vi.type.tensor_type
        if tt.HasField("shape") and all(d.HasField("dim_value") for d in tt.shape.dim):
            out[vi.name] = (tuple(d.dim_value for d in tt.shape.dim), dtype)
    return out


def _convert(model, opset: int, name: str, typed=None, qdq_outputs=frozenset()) -> Graph:
    """The graph of ``model``; ``typed`` is the model as shape inference returned it (its value
    infos and outputs typed; ``model`` itself when None); ``qdq_outputs``: ``ImportContext``'s."""
    from onnx import numpy_helper
    typed = model if typed is None else typed
    g = Graph(name)
    ctx = ImportContext(g, opset, qdq_outputs)
    for t in model.graph.initializer:
        try:
            array = numpy_helper.to_array(t)
        except Exception as exc:  # noqa: BLE001 - onnx raises KeyError/ValueError for broken tensors
            raise OnnxImportError(f"initializer {t.name!r} cannot be read (element type {t.data_type}): "
                                  f"{type(exc).__name__}: {exc}") from None
        g.add_initializer(t.name, array)
    for inp in model.graph.input:
        if inp.name in g.initializers:
            continue
        tt = inp.type.tensor_type
        shape, dtype = [d.dim_value for d in tt.shape.dim], _tensor_dtype(inp, "input")
        try:
            check_size(shape, dtype, f"input {inp.name!r}")
        except Unsupported as exc:
            raise OnnxImportError(str(exc)) from None
        g.add_value(inp.name, shape, dtype)
        g.inputs.append(inp.name)
    inferred = _value_info_shapes(typed)
    problems = []
    needs_constant = []
    poisoned = set()
    for k, node in enumerate(model.graph.node):
        label = node_label(k, node)
        default_domain = node.domain in ("", "ai.onnx")
        op_key = node.op_type if default_domain else domain_op(node)
        if op_key is None or (not default_domain and find_converter(op_key, 1) is None):
            problems.append((label, f"{node.domain}.{node.op_type}", opset, "custom domain"))
            poisoned.update(node.output)
            continue
        if any(i in poisoned for i in node.input if i):
            if find_converter(node.op_type, opset) is None and node.op_type not in FOLDERS \
                    and node.op_type not in ("Constant", "Shape", "Size"):
                problems.append((label, node.op_type, opset, "no converter for this op"))
            _assume_outputs(g, node, inferred, poisoned)
            continue
        try:
            check_attributes(ctx, node)
            for out in node.output:         # ONNX's inferred sizes, before numpy or a kernel allocates them
                if out in inferred:
                    check_size(inferred[out][0], inferred[out][1], f"output {out!r}")
        except Unsupported as exc:
            problems.append((label, node.op_type, opset, str(exc)))
            _assume_outputs(g, node, inferred, poisoned)
            continue
        try:
            if default_domain and try_fold(ctx, node):
                continue
        except Unsupported as exc:
            problems.append((label, node.op_type, opset, str(exc)))
            poisoned.update(node.output)
            continue
        except Exception as exc:
            problems.append((label, node.op_type, opset, f"constant folding failed: {exc}"))
            poisoned.update(node.output)
            continue
        conv = find_converter(op_key, opset if default_domain else 1)
        if conv is None:
            reason = "no converter for this op" if node.op_type not in CONVERTERS else \
                f"no converter for opset {opset}"
            problems.append((label, node.op_type, opset, reason))
            _assume_outputs(g, node, inferred, poisoned)
            continue
        try:
            conv.fn(ctx, node)
        except Unsupported as exc:
            problems.append((label, node.op_type, opset, str(exc)))
            if isinstance(exc, NeedsConstant):
                needs_constant.append(exc.values)
            _assume_outputs(g, node, inferred, poisoned)
        except KeyError as exc:
            problems.append((label, node.op_type, opset, f"input {exc} has no known static shape"))
            _assume_outputs(g, node, inferred, poisoned)
        except LoopweaveError:
            raise
        except Exception as exc:  # noqa: BLE001 - a converter bug: say so, with the node
            raise InternalError(f"converting node {label!r} ({node.op_type}) failed: "
                                f"{type(exc).__name__}: {exc}") from exc
    if problems:
        lines = "\n".join(f"  - node {n!r}: {op} (opset {v}): {why}" for n, op, v, why in problems)
        error = OnnxImportError(f"the ONNX model has {len(problems)} node(s) loopweave cannot import:\n{lines}",
                                problems)
        error.needs_constant = needs_constant      # operands that a run-time specialisation would make constant
        raise error
    for out in typed.graph.output:
        if out.name not in g.values:
            raise OnnxImportError(f"graph output {out.name!r} is never computed")
        _tensor_dtype(out, "output")
        g.outputs.append(out.name)
    g.check()
    return g


def _assume_outputs(g: Graph, node, inferred, poisoned) -> None:
    """Keep converting after a failure: trust ONNX's inferred shapes for the outputs, or poison them."""
    for o in node.output:
        if o in inferred:
            shape, dtype = inferred[o]
            g.add_value(o, shape, dtype)
        poisoned.add(o)
