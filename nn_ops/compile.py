"""``lw.compile`` and ``lw.load``: the front door for whole networks.

It sits above both the network compiler (``network/``) and the ONNX importer
(``onnx_import/``): a static Graph compiles to an Executable (CPU) or a CudaExecutable,
a DynamicGraph (shapes known only at run time, kept as its ONNX model) to a
PolymorphicExecutable compiled once for every binding, or (where that path does not reach) a
DynamicExecutable that compiles one static specialisation per input binding.  With
``pipeline="graph"`` a DynamicGraph goes through the one Graph pipeline over symbolic sizes
instead of the compile-once walk.
"""
from __future__ import annotations

import dataclasses
import io
import warnings
from typing import Optional

from ..errors import (ArgumentError, BuildError, DamagedFileError, InternalError, LoopweaveError, OnnxImportError,
                      PerShapeCompileWarning)
from ..autoschedule.network import ModelPicks, tune_network
from ..autoschedule.records import check_exists
from ..lowering.lower import check_checks_argument
from ..target import resolve_target
from .ops.cuda.matmul_tensor_cores import TENSOR_CORE_PRECISIONS
from .network.archive import ArchiveReader, MetaChecker
from .network.dynamic_executable import FORMAT as DYNAMIC_FORMAT, DynamicExecutable, check_dynamic_meta, load_dynamic
from .network.executable import compile_graph, load_static_from
from .network.graph import Graph
from .network.signature import fixed_shapes_hint
from .network.tasks import extract_tasks
from .network.polymorphic_executable import FORMAT as POLYMORPHIC_FORMAT, load_polymorphic_kernels
from .network.saved_levels import FORMAT as LEVELS_FORMAT, chosen_level
from .network.symbolic_compile import compile_symbolic
from .onnx_import.dynamic import DynamicGraph
from .onnx_import.symbolic_graph import symbolic_graph
from .compile_once import build_polymorphic


def compile(graph, target="llvm", progress: Optional[bool] = None, tuning_log=None,  # noqa: A001 - lw.compile
            checks: Optional[str] = None, polymorphic: Optional[bool] = None, precision: str = "fp32",
            pipeline: Optional[str] = None, schedules: Optional[str] = None):
    """Compile a network graph (from ``from_onnx``) into an executable.

    A DynamicGraph (symbolic input sizes) is compiled once for every binding of its sizes: a
    PolymorphicExecutable, kernels taking the sizes as arguments (``compile_once/builder.py``).
    A model with shape inputs (values that change the graph's structure) gives a DynamicExecutable
    that compiles one static specialisation per input binding on first use; so does one with ops
    the polymorphic path does not cover yet, with a ``PerShapeCompileWarning`` saying why.
    ``polymorphic=True`` insists (an error lists what is not covered); ``polymorphic=False`` asks for
    the per-shape executable.  ``target="cuda"``
    gives a CudaExecutable (kernels on the GPU; ``network/cuda_executable.py``).  ``tuning_log``
    (from ``autoschedule.tune_network`` or ``loopweave tune``): kernels with a record for this
    target use the best recorded schedule, the others their default schedule; a compile-once kernel
    takes the records of the static kernels it covers (``compile_once/tuned.py``).  Index checks of
    gathers and scatters are always on; ``checks="bounds"`` also checks every other load whose
    index depends on data (``lw.build``'s ``checks``).  ``precision="tf32"`` (target cuda, sm_80 or
    newer) lets matmuls, dense layers and convolutions whose shapes make whole warp tiles run on the
    tensor cores: inputs rounded to tf32 (10 mantissa bits), float32 accumulation; ``"fp16"`` rounds
    them to float16 (10 mantissa bits, 5 exponent bits: magnitudes over 65504 overflow), float32
    accumulation and storage; the default ``"fp32"`` is exact.

    ``pipeline="graph"`` compiles a DynamicGraph through the static compiler's pipeline instead of
    the compile-once walk: one Graph whose sizes are sympy expressions of the symbols
    (``onnx_import/symbolic_graph.py``), the same graph passes and fusion, kernels over ``lw.var``
    extents (``network/symbolic_compile.py``), the same PolymorphicExecutable (binding checks,
    save and load).  It covers the encoder family's ops for now; any other op is an error naming
    it.  For a static Graph it changes nothing (that is the static compiler).

    ``schedules="model"`` (a static graph, target llvm) gives each kernel the autoscheduler's cost
    model's pick where the model ranks it above the default schedule, nothing measured
    (``tune_network(..., trials=0)``), each pick checked against the kernel's untuned build first;
    unmeasured picks can be slower than the defaults (``docs/decisions.md``): tune to be sure.
    """
    check_checks_argument(checks, BuildError)
    if tuning_log is not None:
        check_exists(tuning_log, "compile")
    tgt = resolve_target(target)
    if tgt.kind not in ("llvm", "cuda"):
        raise BuildError(f"networks compile for targets 'llvm' and 'cuda', not {tgt.kind!r}")
    tgt = with_precision(tgt, precision)
    if schedules is not None:
        tuning_log = _model_picks(graph, tgt, schedules, tuning_log)
    if pipeline not in (None, "graph"):
        raise ArgumentError(f"pipeline={pipeline!r}: use 'graph' (one Graph pipeline over symbolic sizes) or "
                            f"leave it out")
    if isinstance(graph, DynamicGraph):
        if tgt.kind != "llvm":
            raise BuildError("models with dynamic shapes compile for target 'llvm' only for now; fix the input "
                             "shapes with from_onnx(..., input_shapes=...) to compile for cuda")
        if not tgt.runs_here():
            raise BuildError(f"a model with symbolic sizes compiles only for a CPU this machine runs, not for "
                             f"{tgt.triple or tgt.cpu} (cpu {tgt.cpu}): code for another CPU is for export_library, "
                             f"whose C API has fixed shapes; {fixed_shapes_hint(graph.inputs)}, then compile")
        if pipeline == "graph":
            if polymorphic is False or tuning_log is not None:
                raise BuildError("pipeline='graph' compiles once for every binding, without tuning_log yet: drop "
                                 "polymorphic=False and tuning_log=, or the pipeline= argument")
            return compile_graph_pipeline(graph, tgt, checks=checks)
        if polymorphic:
            return build_polymorphic(graph, tgt, checks=checks, tuning_log=tuning_log)
        if polymorphic is None and not graph.value_inputs:    # (shape inputs: per shape by design)
            try:
                return build_polymorphic(graph, tgt, checks=checks, tuning_log=tuning_log)
            except OnnxImportError as exc:
                why = str(exc)
            warnings.warn(f"{graph.name!r} compiles once per input shape (on first use), not once for all: "
                          f"{why}", PerShapeCompileWarning, stacklevel=2)
        return DynamicExecutable(graph, target, progress, tuning_log=tuning_log, checks=checks)
    if polymorphic:
        raise ArgumentError("polymorphic=True compiles a DynamicGraph (a model with symbolic input sizes); this "
                            "graph's shapes are static")
    if not isinstance(graph, Graph):
        raise ArgumentError(f"compile takes a loopweave Graph (from lw.from_onnx), got {type(graph).__name__}")
    try:
        return compile_graph(graph, tgt, progress, tuning_log=tuning_log, checks=checks)
    except (LoopweaveError, InternalError):
        raise
    except MemoryError as exc:
        raise BuildError(f"compiling network {graph.name!r} ran out of memory ({exc}): its tensors are too large "
                         f"for this machine") from None
    except Exception as exc:  # noqa: BLE001 - the promise: only loopweave's types escape
        raise InternalError(f"compiling network {graph.name!r} failed unexpectedly: "
                            f"{type(exc).__name__}: {exc}") from exc


def _model_picks(graph, tgt, schedules, tuning_log):
    """The cost model's picks for ``graph``'s kernels, which the compiler applies like a tuning log."""
    if schedules != "model":
        raise ArgumentError(f"compile: schedules takes 'model' (the cost model's picks, nothing measured) or None, "
                            f"got {schedules!r}")
    if tuning_log is not None:
        raise ArgumentError("compile: give tuning_log= (measured records) or schedules='model', not both")
    if not isinstance(graph, Graph) or tgt.kind != "llvm":
        raise ArgumentError("compile: schedules='model' takes a static graph (fixed input shapes) and an 'llvm' "
                            "target: the cost model ranks schedules of static CPU kernels")
    return ModelPicks(tune_network(extract_tasks(graph, tgt), trials=0))


def load(path):
    """Load an executable written by ``save`` (an Executable, a DynamicExecutable or a
    PolymorphicExecutable); nothing is compiled.

    Every member is checked against the sha256 recorded at save before it reaches numpy,
    onnx or LLVM; a damaged file raises ``DamagedFileError`` (an ``ArgumentError``) naming
    the member.  Checksums guard against damage, not malice: a ``.lwx`` holds native code
    that runs when it is loaded, so load only files you trust."""
    with ArchiveReader(path) as reader:
        if reader.meta.get("format") == LEVELS_FORMAT:
            data, where = chosen_level(reader)
            with ArchiveReader(io.BytesIO(data), where) as level:
                return load_static_from(level)
        if reader.meta.get("format") == POLYMORPHIC_FORMAT:
            return _load_polymorphic(reader)
        if reader.meta.get("format") != DYNAMIC_FORMAT:
            return load_static_from(reader)
        check_dynamic_meta(reader)
        meta = reader.meta
        model_bytes = reader.read("model.onnx")
        import onnx
        try:
            model = onnx.ModelProto.FromString(model_bytes)
            graph = DynamicGraph(model, meta["opset"], meta["name"], meta["value_inputs"], check=False)
        except LoopweaveError:
            raise
        except Exception as exc:  # noqa: BLE001 - the verified model is still not one we wrote
            raise DamagedFileError(f"{reader.where}: member 'model.onnx' is not a model this loopweave can load "
                                   f"({type(exc).__name__}: {exc})", "model.onnx") from None
        return load_dynamic(reader, graph)


def _load_polymorphic(reader):
    """A PolymorphicExecutable: its kernels loaded from the archive, the calls and the memory plan
    rebuilt from the saved model (symbolic inference and graph walk only: nothing is compiled)."""
    import onnx
    kernels = load_polymorphic_kernels(reader)
    meta, check = reader.meta, MetaChecker(reader.where)
    model_bytes = reader.read("model.onnx")
    try:
        model = onnx.ModelProto.FromString(model_bytes)
        graph = DynamicGraph(model, check.get(meta, "opset", int), check.get(meta, "name", str), (), check=False)
    except LoopweaveError:
        raise
    except Exception as exc:  # noqa: BLE001 - the verified model is still not one we wrote
        raise DamagedFileError(f"{reader.where}: member 'model.onnx' is not a model this loopweave can load "
                               f"({type(exc).__name__}: {exc})", "model.onnx") from None
    if any(p.key == PIPELINE_KEY and p.value == "graph" for p in model.metadata_props):
        return compile_graph_pipeline(graph, resolve_target("llvm"), prebuilt=kernels,
                                      runner_object=reader.read("runner.o"))
    return build_polymorphic(graph, "llvm", prebuilt=kernels, runner_object=reader.read("runner.o"))


#: the saved model's metadata key that says which compiler made a PolymorphicExecutable (so load rebuilds it)
PIPELINE_KEY = "loopweave.pipeline"


def compile_graph_pipeline(graph: DynamicGraph, tgt, checks=None, prebuilt=None, runner_object=None):
    """A DynamicGraph through the one Graph pipeline: its symbolic Graph, the graph passes, kernels
    over size vars; the saved model says so (``PIPELINE_KEY``), so ``lw.load`` takes this path too."""
    import onnx
    exe = compile_symbolic(symbolic_graph(graph), graph.signature, tgt, checks=checks, prebuilt=prebuilt,
                           runner_object=runner_object)
    model = onnx.ModelProto.FromString(graph.model_bytes)
    if not any(p.key == PIPELINE_KEY for p in model.metadata_props):
        model.metadata_props.add(key=PIPELINE_KEY, value="graph")
    exe.model_bytes, exe.opset = model.SerializeToString(), graph.opset
    return exe


PRECISIONS = ("fp32",) + TENSOR_CORE_PRECISIONS


def with_precision(tgt, precision):
    """``tgt`` allowed ``precision`` for its float32 matmuls; an error where it cannot have it."""
    if precision not in PRECISIONS:
        raise ArgumentError(f"precision={precision!r}: use 'fp32' (exact, the default), 'tf32' or 'fp16' (tensor "
                            f"cores, target cuda)")
    if precision == "fp32":
        return tgt
    if tgt.kind != "cuda":
        raise BuildError(f"precision={precision!r} is for target 'cuda' (the tensor cores); the CPU computes "
                         f"float32 exactly: drop precision= or compile with target='cuda'")
    from ..backends.cuda.build import check_tensor_core_arch, cuda_arch
    check_tensor_core_arch(cuda_arch(tgt), f"precision={precision!r}")
    return dataclasses.replace(tgt, precision=precision)
