"""Tuning records applied to compile-once kernels (``compile_once/tuned.py``), and the tasks they
come from (``compile_once/tasks.py``, ``compile_once/instance.py``)."""
import warnings

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import loopweave as lw  # noqa: E402
from loopweave.autoschedule import records  # noqa: E402
from loopweave.autoschedule.task import Task  # noqa: E402
from loopweave.nn_ops.compile_once.builder import walker  # noqa: E402
from loopweave.nn_ops.compile_once.tasks import representative_sizes  # noqa: E402
from loopweave.nn_ops.compile_once.tuned import tuned_schedule  # noqa: E402
from loopweave.nn_ops.network.polymorphic_executable import PolymorphicExecutable  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import transformer_encoder  # noqa: E402
from loopweave.target import resolve_target  # noqa: E402


@pytest.fixture(scope="module")
def tiny():
    model = transformer_encoder(batch=None, seq=None, hidden=64, heads=2, layers=1, ffn=128)
    return model, lw.from_onnx(model)


def _split_schedule(task, rows: int, cols: int):
    """A schedule of ``task``'s output other than the default: its two axes split by ``rows`` and
    ``cols``, the inner column loop vectorized, the outer row loop parallel (producers inlined by
    lowering's defaults where they are)."""
    out = task.args[-1]
    s = lw.create_schedule([out])
    i, j = out.op.axis
    io, ii = s[out].split(i, factor=rows)
    jo, ji = s[out].split(j, factor=cols)
    s[out].reorder(io, jo, ii, ji)
    s[out].vectorize(ji)
    s[out].parallel(io)
    return s


def _record(log, task, s, seconds=1e-6):
    t = Task(task.args, task.target)
    records.append(str(log), [records.make_record(t.key, t.target, {}, s.trace.to_json(), seconds, None, 1,
                                                  names=t.names, shapes=t.shapes)])
    return t


def _dense_kernel(graph, variant=None):
    """The walk of ``graph`` (nothing built): the dense kernel of the q/k/v projections, or its
    variant number ``variant`` (recipe, symbolic arguments)."""
    builder = walker(graph, "llvm")
    builder.building = False
    builder.walk()
    call = builder.calls[0]
    module = call.module if variant is None else call.variants[variant].module
    return builder.recipes[id(module)], builder.jobs[module.index][1]


def test_extract_tasks_of_a_dynamic_graph_gives_the_compile_once_kernels_at_one_binding(tiny):
    model, g = tiny
    assert representative_sizes(g) == {"batch": 1, "seq": 64}
    tasks = lw.extract_tasks(g, "llvm")
    first = tasks[0]
    assert first.weight == 3          # q, k and v projections: one kernel
    assert [tuple(int(d.value) for d in a.shape) for a in first.args] == [(64, 64), (2, 64, 32), (64,), (64, 64)]
    builder = walker(g, "llvm")
    builder.building = False
    builder.walk()
    assert sum(t.weight for t in tasks) == len(builder.calls)
    at_few_rows = lw.extract_tasks(g, "llvm", sizes={"seq": 3})
    assert at_few_rows[0].args[-1].shape[0].value == 3
    with pytest.raises(lw.ArgumentError, match="names heads, which the model's inputs do not have"):
        lw.extract_tasks(g, sizes={"heads": 2})
    with pytest.raises(lw.ArgumentError, match=r"size seq=0 is not a whole number >= 1"):
        lw.extract_tasks(g, sizes={"seq": 0})
    with pytest.raises(lw.ArgumentError, match="static network graph or a DynamicGraph"):
        lw.extract_tasks(object())


def test_a_model_compiled_per_shape_gives_the_tasks_of_its_specialisation():
    """Compress along a symbolic axis compiles per shape: its tasks are the static kernels at the binding."""
    from loopweave.nn_ops.testing.model_zoo import OnnxBuilder
    b = OnnxBuilder()
    model = b.model(("N", 4), b.node("Compress", ["input", b.init("keep", np.array([True]))], axis=0), (1, 4))
    tasks = lw.extract_tasks(lw.from_onnx(model), sizes={"N": 5})
    assert tasks and not any(t.signature.startswith("poly_") for t in tasks)       # the static compiler's
    assert [tuple(int(d.value) for d in a.shape) for a in tasks[0].args][0] == (5, 4)


def test_a_record_binds_the_sizes_the_kernel_covers_and_no_other(tiny):
    recipe, _ = _dense_kernel(tiny[1])
    (rows,) = recipe.variables
    assert recipe.binding_of([[48, 64], [2, 64, 32], [64], [48, 64]]) == {rows: 48}
    assert recipe.binding_of([[48, 64], [2, 64, 32], [64], [47, 64]]) is None       # one size, two values
    assert recipe.binding_of([[48, 32], [2, 64, 32], [64], [48, 64]]) is None       # another constant
    assert recipe.binding_of([[48, 64], [2, 64, 32], [64]]) is None                 # another argument list
    assert recipe.binding_of([[48, 64, 1], [2, 64, 32], [64], [48, 64]]) is None    # another rank
    one_row, _ = _dense_kernel(tiny[1], variant=0)         # runs where rows <= 1 only
    assert one_row.binding_of([[1, 64], [2, 64, 32], [64], [1, 64]]) == {rows: 1}
    assert one_row.binding_of([[48, 64], [2, 64, 32], [64], [48, 64]]) is None


def test_tuning_log_changes_the_compile_once_kernels_and_not_their_results(tiny, tmp_path, monkeypatch):
    """The bar: a record of the encoder's dense task (here written by hand through the records API, a
    schedule other than the default) changes that compile-once kernel; the outputs still equal
    onnxruntime's at two bindings, and the kernels without a record keep their default schedule."""
    monkeypatch.setenv("LOOPWEAVE_CACHE_DIR", str(tmp_path / "cache"))    # kernels with their sources
    model, g = tiny
    dense = lw.extract_tasks(g, "llvm")[0]
    log = tmp_path / "tune.jsonl"
    _record(log, dense, _split_schedule(dense, 8, 16))
    assert next(records.read(str(log)))["shapes"] == [[64, 64], [2, 64, 32], [64], [64, 64]]
    untuned = lw.compile(g)
    with warnings.catch_warnings():
        warnings.simplefilter("error")          # compiled once: no per-shape fallback, no record refused
        tuned = lw.compile(g, tuning_log=str(log))
    assert isinstance(tuned, PolymorphicExecutable)
    assert tuned.tuned_kernels == 1 and "(1 from tuning records)" in repr(tuned)
    changed = [k for k, (a, b) in enumerate(zip(tuned.calls, untuned.calls)) if a.module.symbol != b.module.symbol]
    assert changed == [k for k, c in enumerate(tuned.calls) if c.node in dense.groups]
    k = changed[0]
    assert tuned.calls[k].module.get_source("lowered") != untuned.calls[k].module.get_source("lowered")
    with pytest.raises(lw.ArgumentError, match="has no source"):     # the others: the untuned, from the cache
        tuned.calls[1].module.get_source("lowered")
    for batch, seq in ((1, 37), (3, 8)):
        x = np.random.default_rng(seq).standard_normal((batch, seq, 64)).astype(np.float32)
        want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(
            None, {"input": x})
        np.testing.assert_allclose(tuned.run({"input": x})[0], want, rtol=1e-4, atol=1e-4)


def test_of_several_tuned_bindings_the_largest_wins(tiny, tmp_path):
    g = tiny[1]
    log = tmp_path / "tune.jsonl"
    small = lw.extract_tasks(g, "llvm", sizes={"seq": 32})[0]
    large = lw.extract_tasks(g, "llvm", sizes={"seq": 96})[0]
    _record(log, large, _split_schedule(large, 4, 16), seconds=2e-6)
    _record(log, small, _split_schedule(small, 8, 16), seconds=1e-6)
    recipe, args = _dense_kernel(g)
    s = tuned_schedule(str(log), resolve_target("llvm"), recipe, args)
    assert "factor=4" in str(s.trace) and "factor=8" not in str(s.trace)


def test_a_record_that_does_not_carry_over_to_symbolic_sizes_is_refused_with_a_warning(tiny, tmp_path):
    """A vectorized loop of static extent (the 64 rows of one binding) would stay serial over a
    symbolic one: the record is refused and the kernel keeps its default schedule."""
    g = tiny[1]
    dense = lw.extract_tasks(g, "llvm")[0]
    out = dense.args[-1]
    s = lw.create_schedule([out])
    i, j = out.op.axis
    s[out].reorder(j, i)
    s[out].vectorize(i)
    log = tmp_path / "tune.jsonl"
    _record(log, dense, s)
    recipe, args = _dense_kernel(g)
    with pytest.warns(records.RecordWarning, match=r"skipped 1 tuning record\(s\) .*1 do not carry over .*"
                                                   r"poly_group over symbolic sizes: vectorize"):
        assert tuned_schedule(str(log), resolve_target("llvm"), recipe, args) is None


def test_a_record_fusing_loops_of_symbolic_extent_is_passed_over_for_the_next_one(tiny, tmp_path):
    """A fused loop of symbolic extent makes bound inference take whole tensors below it (a tuned
    dense layer's product computed whole in every iteration): the next record of the ranking is used."""
    g = tiny[1]
    dense = lw.extract_tasks(g, "llvm")[0]
    out = dense.args[-1]
    s = lw.create_schedule([out])
    i, j = out.op.axis
    io, ii = s[out].split(i, factor=8)
    jo, ji = s[out].split(j, factor=16)
    s[out].reorder(io, jo, ii, ji)
    s[out].parallel(s[out].fuse(io, jo))
    log = tmp_path / "tune.jsonl"
    _record(log, dense, s, seconds=1e-6)                            # the fastest, fused
    _record(log, dense, _split_schedule(dense, 4, 16), seconds=2e-6)
    recipe, args = _dense_kernel(g)
    with pytest.warns(records.RecordWarning, match=r"fuses 'ax0.outer' and 'ax1.outer' into a loop of symbolic extent"):
        picked = tuned_schedule(str(log), resolve_target("llvm"), recipe, args)
    assert "factor=4" in str(picked.trace) and "fuse" not in str(picked.trace)


def test_cli_tunes_a_dynamic_model_at_one_binding_then_compiles_it_once_with_the_log(tiny, tmp_path, capsys):
    pytest.importorskip("lightgbm")
    from loopweave import cli
    model, log, out = str(tmp_path / "enc.onnx"), str(tmp_path / "t.jsonl"), str(tmp_path / "m.lwx")
    onnx.save(tiny[0], model)
    assert cli.main(["tune", model, "--trials", "3", "--size", "seq=16", "--log", log, "-q"]) == 0
    assert "NetworkTuneResult" in capsys.readouterr().out
    assert cli.main(["compile", model, "-o", out, "--tuning-log", log, "-q"]) == 0
    printed = capsys.readouterr().out
    assert "PolymorphicExecutable" in printed and "from tuning records" in printed, printed
    x = np.random.default_rng(0).standard_normal((2, 5, 64)).astype(np.float32)
    want, = ort.InferenceSession(tiny[0].SerializeToString(), providers=["CPUExecutionProvider"]).run(
        None, {"input": x})
    np.testing.assert_allclose(lw.load(out).run({"input": x})[0], want, rtol=1e-4, atol=1e-4)
    assert cli.main(["tune", model, "--trials", "3", "--size", "seq=many", "--log", log, "-q"]) == 2
    assert "--size takes SYMBOL=N" in capsys.readouterr().err
