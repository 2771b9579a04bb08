"""``lw.compile(graph, polymorphic=True)``: compiled once, run at any binding of the symbols
(``compile_once/builder.py``, ``network/polymorphic_executable.py``)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402
from loopweave.nn_ops.network.polymorphic_executable import PolymorphicExecutable  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder, transformer_encoder  # noqa: E402
from loopweave.target import resolve_target  # noqa: E402


def _ort(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    """Compiled with a kernel cache of its own: some tests read its kernels' lowered code, which a
    kernel found in the cache (an earlier test's: ``tests/test_benchmark_dynamic.py`` compiles the
    same encoder) does not keep."""
    model = transformer_encoder(batch=None, seq=None, hidden=64, heads=2, layers=2, ffn=128)
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("LOOPWEAVE_CACHE_DIR", str(tmp_path_factory.mktemp("encoder_kernels")))
        return model, lw.compile(lw.from_onnx(model), polymorphic=True)


def test_encoder_compiles_once_fuses_epilogues_and_shares_kernels_between_layers(encoder):
    model, exe = encoder
    assert isinstance(exe, PolymorphicExecutable)
    assert exe.inputs == [("input", ("batch", "seq", 64), "float32")]
    # bias adds, the attention scale, GELU and the residual adds run in their MatMul's epilogue
    op_of = {n.name: n.op_type for n in model.graph.node}
    assert {op_of[c.node] for c in exe.calls} == {"MatMul", "Transpose", "Softmax", "LayerNormalization"}
    per_layer = len(exe.calls) // 2
    assert [c.module for c in exe.calls[:per_layer]] == [c.module for c in exe.calls[per_layer:]]
    assert len({id(c.module) for c in exe.calls}) < per_layer     # q, k, v projections share one kernel too


@pytest.mark.parametrize("batch, seq", [(1, 1), (4, 1), (1, 7), (4, 7), (1, 64), (2, 200)])
def test_encoder_matches_onnxruntime_at_every_shape(encoder, batch, seq):
    model, exe = encoder
    x = np.random.default_rng(batch * 1000 + seq).standard_normal((batch, seq, 64)).astype(np.float32)
    got, = exe.run({"input": x})
    want, = _ort(model, {"input": x})
    assert got.shape == want.shape
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_no_compilation_at_run_time(encoder, forbid_compilation):
    """Runs at shapes never seen before touch neither lowering, nor LLVM, nor the object loader."""
    model, exe = encoder
    for batch, seq in ((3, 13), (1, 129), (5, 2), (2, 2), (1, 3)):      # the last two: few-rows variants
        x = np.random.default_rng(seq).standard_normal((batch, seq, 64)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-4, atol=1e-4)


def _dense_calls(model, exe):
    """The encoder's MatMul-by-a-constant calls (a weight of static shape)."""
    op_of = {n.name: n.op_type for n in model.graph.node}
    return [c for c in exe.calls
            if op_of[c.node] == "MatMul" and all(isinstance(d, int) for d in c.module.params[1].shape)]


def _check_bindings(model, exe, dense, few_rows):
    """Every binding (each symbol at 1 too) gives onnxruntime's results, through the native call list
    and through each kernel's own checks alike; each dense call runs its variant iff ``few_rows(rows)``."""
    for batch, seq in ((1, 1), (4, 1), (1, 7), (2, 8), (1, 16), (1, 17), (3, 7), (1, 64)):
        x = np.random.default_rng(batch * 100 + seq).standard_normal((batch, seq, 64)).astype(np.float32)
        got, = exe.run({"input": x})
        np.testing.assert_allclose(got, _ort(model, {"input": x})[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(got, exe.run_each({"input": x})[0])
        binding = {"batch": batch, "seq": seq}
        table = exe._tables[(x.shape,)].table        # the call table of this binding, by input shapes
        for k, call in enumerate(exe.calls):
            assert table.fns[k] == call.module_at(binding)._address
            if call in dense:
                assert bool(call.variants and call.module_at(binding) is call.variants[0].module) == \
                    few_rows(batch * seq)


def test_dense_layers_read_weights_packed_in_panels_at_every_row_count(encoder):
    """On the CPU each MatMul by a constant reads its weight packed once in column panels [N/nr, K,
    nr], by one register-blocked kernel for every row count but one (no packing per call); a single
    row runs a variant whose register tile is that row.  The [K, N] weights the panels were packed
    from are not kept."""
    from loopweave.nn_ops.ops.matmul import panel_width
    model, exe = encoder
    dense = _dense_calls(model, exe)
    assert len(dense) == 2 * 6                      # q, k, v, output projection, two FFN layers per layer
    nr = panel_width(lw.target.host_target().lanes("float32"))
    for c in dense:
        weight = c.module.params[1].shape
        assert len(weight) == 3 and weight[2] == nr
        assert [v.module.name.endswith("one_row") and v.at_most == 1 for v in c.variants] == [True]
        assert "in1.local" not in c.module.get_source("lowered")
        assert exe.constants[c.args[1]].shape == tuple(weight)
    initializers = {t.name for t in model.graph.initializer}
    assert not initializers & {n for n, a in exe.constants.items() if a.ndim == 2 and a.shape[1] >= nr}
    _check_bindings(model, exe, dense, few_rows=lambda rows: rows <= 1)


def test_dense_layers_without_panels_keep_a_few_rows_variant_picked_per_binding(monkeypatch):
    """Where the weight is not packed (another target, another dtype, fewer columns than a panel),
    each MatMul by a constant has two kernels of the same arguments: the blocked one and, for
    batch*seq <= FEW_ROWS, the streaming one that reads the weight in place."""
    from loopweave.nn_ops.compile_once import builder as polymorphic
    monkeypatch.setattr(polymorphic._Builder, "panels", lambda self, inputs: (inputs, 0))
    model = transformer_encoder(batch=None, seq=None, hidden=64, heads=2, layers=2, ffn=128)
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    dense = _dense_calls(model, exe)
    assert len(dense) == 2 * 6
    assert all(len(c.variants) == 1 and c.variants[0].at_most == polymorphic.FEW_ROWS for c in dense)
    assert all(c.variants[0].module.name.endswith("few_rows") and c.variants[0].module is not c.module for c in dense)
    assert all(v.module.name.endswith("seq_1") for c in exe.calls if c not in dense for v in c.variants)
    for c in dense:         # the blocked kernel packs the weight's panels per call, the streaming one reads it in place
        assert "in1.local = allocate(" in c.module.get_source("lowered")
        assert "in1.local" not in c.variants[0].module.get_source("lowered")
    _check_bindings(model, exe, dense, few_rows=lambda rows: rows <= polymorphic.FEW_ROWS)


def test_attention_kernels_have_a_constant_kernel_for_one_token(encoder):
    """The attention products, the softmax and the key transpose (seq among their last two sizes,
    not the first) each have a kernel built with seq = 1, taken only there: no size argument for
    seq, no partial register tiles.  Results at seq 1 and 2 match onnxruntime and the kernels' own
    calls (run_each); the dense layers keep their row variants and nothing else."""
    model, exe = encoder
    op_of = {n.name: n.op_type for n in model.graph.node}
    units = [c for c in exe.calls if any(v.module.name.endswith("seq_1") for v in c.variants)]
    kinds = sorted({op_of[c.node] for c in units})
    assert kinds == ["MatMul", "Softmax", "Transpose"], kinds
    assert sum(op_of[c.node] == "MatMul" for c in units) == 2 * 2          # Q.K^T and P.V per layer
    for c in units:
        (unit,) = [v for v in c.variants if v.module.name.endswith("seq_1")]
        assert unit.at_most == 1 and str(unit.rows) == "seq"
        assert "seq" in {str(d) for d in c.sizes.values()}
        assert c.module_at({"batch": 3, "seq": 1}) is unit.module
        assert c.module_at({"batch": 3, "seq": 2}) is c.module
        assert len(unit.module.size_names) < len(c.module.size_names)       # seq is not an argument
    for batch, seq in ((3, 1), (1, 1), (3, 2)):
        x = np.random.default_rng(seq).standard_normal((batch, seq, 64)).astype(np.float32)
        got = exe.run({"input": x})[0]
        np.testing.assert_allclose(got, _ort(model, {"input": x})[0], rtol=1e-4, atol=1e-4)
        np.testing.assert_array_equal(got, exe.run_each({"input": x})[0])


def test_arena_grows_for_a_larger_binding_and_is_reused_after(encoder):
    _, exe = encoder
    run = lambda b, s: exe.run({"input": np.ones((b, s, 64), np.float32)})  # noqa: E731
    run(2, 300)
    grown, size = exe.plan.grown, exe.plan.arena_bytes
    run(1, 5)
    run(2, 299)
    assert (exe.plan.grown, exe.plan.arena_bytes) == (grown, size)
    run(2, 301)
    assert exe.plan.grown == grown + 1 and exe.plan.arena_bytes > size


def test_outputs_are_not_overwritten_by_the_next_run(encoder):
    _, exe = encoder
    first, = exe.run({"input": np.ones((1, 3, 64), np.float32)})
    keep = first.copy()
    exe.run({"input": np.full((1, 3, 64), 2.0, np.float32)})
    np.testing.assert_array_equal(first, keep)


def test_a_shape_run_before_skips_the_checks_it_passed_and_nothing_else(encoder, monkeypatch):
    """A plain feed at shapes that ran since the arena last grew reuses that run's binding and call
    table; anything else (a strided or mistyped array, an unseen shape, a grown arena) is checked."""
    _, exe = encoder
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 6, 64)).astype(np.float32)
    want, = exe.run_each({"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-5, atol=1e-6)
    binds = []
    real_bind = exe.signature.bind
    monkeypatch.setattr(exe.signature, "bind", lambda feed: binds.append(1) or real_bind(feed))
    y = rng.standard_normal((2, 6, 64)).astype(np.float32)
    np.testing.assert_allclose(exe.run({"input": y})[0], exe.run_each({"input": y})[0], rtol=1e-5, atol=1e-6)
    assert len(binds) == 1                                      # run_each's, not run's
    strided = np.asfortranarray(y)
    np.testing.assert_allclose(exe.run({"input": strided})[0], exe.run_each({"input": y})[0], rtol=1e-5, atol=1e-6)
    assert len(binds) == 3
    with pytest.raises(lw.ArgumentError, match="must have dtype float32"):
        exe.run({"input": y.astype(np.float64)})
    grown, seq = exe.plan.grown, 8
    while exe.plan.grown == grown:
        seq *= 2
        exe.run({"input": np.ones((2, seq, 64), np.float32)})
    count = len(binds)
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-5, atol=1e-6)
    assert len(binds) == count + 1                              # the old table pointed into the old arena


def test_an_arena_moved_by_run_each_drops_the_call_tables(encoder):
    """``run_each`` at a larger binding moves the arena too: a shape run before then takes the
    checked path again, with tables into the new arena."""
    _, exe = encoder
    x = np.random.default_rng(5).standard_normal((1, 4, 64)).astype(np.float32)
    want, = exe.run_each({"input": x})
    exe.run({"input": x})
    grown, seq = exe.plan.grown, 8
    while exe.plan.grown == grown:
        seq *= 2
        exe.run_each({"input": np.ones((2, seq, 64), np.float32)})
    assert exe._recent({"input": x}) is None
    np.testing.assert_allclose(exe.run({"input": x})[0], want, rtol=1e-5, atol=1e-6)


def test_runs_from_several_threads_take_turns(encoder):
    """The runs of one executable share its arena and call tables, and the native call releases the
    GIL: four threads running four shapes at once each get their own shape's results."""
    import threading
    _, exe = encoder
    feeds = [{"input": np.random.default_rng(k).standard_normal((1 + k % 2, 5 + 7 * k, 64)).astype(np.float32)}
             for k in range(4)]
    want = [exe.run_each(f)[0] for f in feeds]
    wrong = []

    def work(k):
        for _ in range(60):
            if not np.allclose(exe.run(feeds[k])[0], want[k], rtol=1e-4, atol=1e-5):
                wrong.append(k)
                return
    threads = [threading.Thread(target=work, args=(k,)) for k in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert wrong == []


def test_inputs_are_checked_before_anything_runs(encoder):
    _, exe = encoder
    with pytest.raises(lw.ArgumentError, match=r"input 'input' must have shape \[batch, seq, 64\], got \(1, 3, 32\)"):
        exe.run({"input": np.zeros((1, 3, 32), np.float32)})
    with pytest.raises(lw.ArgumentError, match="must have dtype float32"):
        exe.run({"input": np.zeros((1, 3, 64), np.float64)})
    with pytest.raises(lw.ArgumentError, match=r"rank 3"):
        exe.run({"input": np.zeros((3, 64), np.float32)})


@pytest.mark.parametrize("dense", ["panels", "few-rows variants"])
def test_save_and_load_keep_the_polymorphic_executable_without_compiling(encoder, tmp_path, monkeypatch, dense):
    model, exe = encoder
    if dense == "few-rows variants":        # the form dense layers take without panels (see above)
        from loopweave.nn_ops.compile_once import builder as polymorphic
        monkeypatch.setattr(polymorphic._Builder, "panels", lambda self, inputs: (inputs, 0))
        exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    path = tmp_path / "encoder.lwx"
    exe.save(path)
    import loopweave.backends.build as build_module

    def forbidden(*args, **kwargs):
        raise AssertionError("compilation at load or run time")
    for name in ("build", "lower", "build_llvm"):
        monkeypatch.setattr(build_module, name, forbidden)
    loaded = lw.load(path)
    assert isinstance(loaded, PolymorphicExecutable)
    assert len(loaded.calls) == len(exe.calls) and len(loaded.kernels) == len(exe.kernels)
    assert [len(c.variants) for c in loaded.calls] == [len(c.variants) for c in exe.calls]
    kinds = {v.module.name.rsplit("_", 2)[-2] + "_" + v.module.name.rsplit("_", 1)[-1]
             for c in loaded.calls for v in c.variants}
    assert kinds == ({"few_rows", "seq_1"} if dense == "few-rows variants" else {"one_row", "seq_1"})
    assert sorted((n, a.shape) for n, a in loaded.constants.items()) == \
        sorted((n, a.shape) for n, a in exe.constants.items())
    few = {"batch": 1, "seq": 1}
    assert all(c.module_at(few).name.endswith(("few_rows", "one_row", "seq_1")) for c in loaded.calls if c.variants)
    for batch, seq in ((1, 1), (3, 11), (2, 8)):           # few-rows variants, blocked kernels, few again
        x = np.random.default_rng(seq).standard_normal((batch, seq, 64)).astype(np.float32)
        np.testing.assert_allclose(loaded.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-4, atol=1e-4)
    again = tmp_path / "again.lwx"
    loaded.save(again)                      # a loaded executable saves as well
    assert isinstance(lw.load(again), PolymorphicExecutable)


def test_a_damaged_polymorphic_file_is_refused(encoder, tmp_path):
    import zipfile
    _, exe = encoder
    path = tmp_path / "encoder.lwx"
    exe.save(path)
    with zipfile.ZipFile(path) as z:
        members = {n: z.read(n) for n in z.namelist()}
    members["kernels/0.o"] = members["kernels/0.o"][:-1] + bytes([members["kernels/0.o"][-1] ^ 1])
    bad = tmp_path / "bad.lwx"
    with zipfile.ZipFile(bad, "w") as z:
        for n, data in members.items():
            z.writestr(n, data)
    with pytest.raises(lw.DamagedFileError, match="kernels/0.o"):
        lw.load(bad)


def test_polymorphic_needs_a_dynamic_graph():
    b = OnnxBuilder()
    with pytest.raises(lw.ArgumentError, match="shapes are static"):
        lw.compile(lw.from_onnx(b.model((2, 3), b.relu("input"))), polymorphic=True)


def test_elementwise_broadcasting_and_a_batched_matmul():
    """x [N, seq, 8] scaled, plus a row vector, then x @ x^T per batch, softmax: all polymorphic."""
    b = OnnxBuilder(opset=17)
    y = b.node("Add", [b.node("Mul", ["input", b.const(0.5)]), b.init("row", np.arange(8, dtype=np.float32))])
    scores = b.node("MatMul", [y, b.node("Transpose", ["input"], perm=[0, 2, 1])])
    out = b.node("Sigmoid", [b.node("Softmax", [scores], axis=-1)])
    model = b.model(("N", "seq", 8), out, ("N", "seq", "seq"))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    for n, seq in ((1, 1), (2, 5), (3, 17)):
        x = np.random.default_rng(seq).standard_normal((n, seq, 8)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-5, atol=1e-5)


def test_a_value_read_outside_its_group_ends_the_group_there():
    """y = x*2 is a graph output and relu(y) another: the kernel computing y cannot also hide it."""
    from onnx import TensorProto, helper
    b = OnnxBuilder(opset=17)
    y = b.node("Mul", ["input", b.const(2.0)])
    a = b.node("Relu", [y])
    out = b.node("Add", [a, b.init("row", np.linspace(-1, 1, 8).astype(np.float32))])
    model = b.model(("N", "seq", 8), out, ("N", "seq", 8))
    model.graph.output.append(helper.make_tensor_value_info(y, TensorProto.FLOAT, ["N", "seq", 8]))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert len(exe.calls) == 2
    x = np.random.default_rng(0).standard_normal((2, 3, 8)).astype(np.float32)
    got_out, got_y = exe.run({"input": x})
    np.testing.assert_allclose(got_y, x * 2, rtol=1e-6)
    np.testing.assert_allclose(got_out, np.maximum(x * 2, 0) + np.linspace(-1, 1, 8).astype(np.float32), rtol=1e-6)


@pytest.mark.vector_width
def test_softmax_over_a_symbolic_sequence_runs_full_vectors_plus_a_tail(encoder):
    """The attention softmax's rows are seq long: the main loops are whole vectors (ramps), the tail
    is one masked vector of the row's remaining elements (``if ramp(0, 1, 16) < x16(...)`` on 16
    lanes: a lane mask, no guard per element), and every length from 1 up is right (the encoder
    tests check the values)."""
    model, exe = encoder
    lanes = resolve_target("llvm").lanes("float32")     # the encoder is compiled for the host
    op_of = {n.name: n.op_type for n in model.graph.node}
    kernel = next(c.module for c in exe.calls if op_of[c.node] == "Softmax")
    lowered = kernel.get_source("lowered")
    assert "ramp(" in lowered and "(v1 - " in lowered and f" * {lanes})" in lowered
    assert "its extent is not a constant" not in lowered
    assert all(line.strip().startswith(f"if ramp(0, 1, {lanes}) < x{lanes}(") for line in lowered.splitlines()
               if line.strip().startswith("if ")), lowered
    assert all(isinstance(d, str) for d in kernel.params[0].shape[-1:])      # the row length is a size argument


def test_load_in_a_fresh_process_runs_without_compiling(encoder, tmp_path):
    """The kernels' objects come from the file (this process had them loaded already)."""
    import subprocess
    import sys
    model, exe = encoder
    path, x_path, y_path = tmp_path / "encoder.lwx", tmp_path / "x.npy", tmp_path / "y.npy"
    exe.save(path)
    x = np.random.default_rng(5).standard_normal((2, 9, 64)).astype(np.float32)
    np.save(x_path, x)
    x1 = x[:1, :1]                                          # one row: the few-rows variants
    code = f"""
import numpy as np, loopweave as lw, loopweave.backends.build as b, loopweave.backends.llvm.jit as j
def forbidden(*a, **k): raise AssertionError("compiled")
b.build = b.lower = b.build_llvm = j.compile_ir = forbidden
exe, x = lw.load({str(path)!r}), np.load({str(x_path)!r})
np.save({str(y_path)!r}, exe.run({{"input": x}})[0])
np.save({str(y_path)!r} + ".1.npy", exe.run({{"input": np.ascontiguousarray(x[:1, :1])}})[0])
"""
    subprocess.run([sys.executable, "-c", code], check=True, timeout=300)
    np.testing.assert_allclose(np.load(y_path), _ort(model, {"input": x})[0], rtol=1e-4, atol=1e-4)
    np.testing.assert_allclose(np.load(str(y_path) + ".1.npy"), _ort(model, {"input": np.ascontiguousarray(x1)})[0],
                               rtol=1e-4, atol=1e-4)


def test_no_kernel_fuses_loops_of_symbolic_extents(encoder):
    """A fused index of symbolic extents is a div/mod that bound inference cannot follow: a stage
    computed at such a loop would be computed whole at every iteration (the attention softmax took
    hundreds of times longer so).  Row kernels see (rows, n) views; batched matmuls with a symbolic
    column count run their batches in parallel instead of fusing them with the column panels."""
    model, exe = encoder
    op_of = {n.name: n.op_type for n in model.graph.node}
    for call in exe.calls:
        if op_of[call.node] in ("Softmax", "LayerNormalization"):
            assert len(call.module.params[0].shape) == 2
        for line in call.module.get_source("lowered").splitlines():
            if ".fused in range(" in line:          # a fused loop's extent: a product of whole extents
                extent = line.split(".fused in range(", 1)[1].rsplit(")", 1)[0]
                assert "//" not in extent, (call.node, line.strip())


def test_the_native_call_list_runs_what_the_checked_kernel_calls_run(encoder):
    """One native call over the call tables gives exactly the results of calling every kernel from
    Python through its own argument checks (which would refuse a wrong shape or size)."""
    _, exe = encoder
    assert exe._runner is not None
    for batch, seq in ((1, 1), (2, 33), (1, 1), (3, 8), (4, 1), (1, 16), (1, 17)):
        x = np.random.default_rng(seq).standard_normal((batch, seq, 64)).astype(np.float32)
        np.testing.assert_array_equal(exe.run({"input": x})[0], exe.run_each({"input": x})[0])


def test_an_input_given_back_as_an_output_and_through_a_view():
    from onnx import TensorProto, helper
    b = OnnxBuilder(opset=17)
    flat = b.node("Reshape", ["input", b.init("shape", np.array([-1, 4], np.int64))])
    out = b.node("Relu", [flat])
    model = b.model(("N", 4), out, (None, 4))
    model.graph.output.append(helper.make_tensor_value_info(flat, TensorProto.FLOAT, [None, 4]))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    got, view = exe.run({"input": x})
    np.testing.assert_array_equal(got, np.maximum(x, 0))
    np.testing.assert_array_equal(view, x)


def _empty_log(folder) -> str:
    """A tuning log without records (a missing one is an error of its own)."""
    log = folder / "x.jsonl"
    log.write_text("")
    return str(log)


def test_what_the_polymorphic_path_refuses_is_said_clearly(tmp_path):
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Add", ["x", "y"], ["z"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, ["N", "seq"]),
                               helper.make_tensor_value_info("y", TensorProto.FLOAT, ["N", "seq_k"])],
                              [helper.make_tensor_value_info("z", TensorProto.FLOAT, [None, None])])
    g = lw.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(OnnxImportError, match=r"Add: operand 'x' \[N, seq\] does not broadcast to "
                                              r"\[N, max\(seq, seq_k\)\]"):
        lw.compile(g, polymorphic=True)
    with pytest.raises(OnnxImportError, match="does not broadcast"):
        lw.compile(g, polymorphic=True, tuning_log=_empty_log(tmp_path))


@pytest.fixture(scope="module")
def zoo_encoder():
    model = transformer_encoder(batch=None, seq=None)          # the zoo's full size: 4 layers, hidden 256
    return model, lw.compile(lw.from_onnx(model), polymorphic=True)


@pytest.mark.parametrize("batch", [1, 4])
def test_zoo_encoder_over_the_issue_grid_matches_onnxruntime(zoo_encoder, batch):
    """The dynamic benchmark's shapes (correctness only): batch {1, 4} x seq {1, 7, 64, 128, 200, 384}."""
    model, exe = zoo_encoder
    session = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    for seq in (1, 7, 64, 128, 200, 384):
        x = np.random.default_rng(seq).standard_normal((batch, seq, 256)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"input": x})[0], session.run(None, {"input": x})[0], rtol=1e-4, atol=1e-4)


def test_displays_show_symbolic_shapes(encoder):
    model, exe = encoder
    out = model.graph.output[0].name
    assert f"-> ({out}: float32[batch, seq, 64])" in repr(lw.from_onnx(model))
    page = exe._repr_html_()
    assert "kernel calls:" in page and "[batch*seq, 64]" in page and "arena slots (bytes):" in page
    assert page.count("<li>") == len(exe.calls) + 1          # the calls, and "none" for the checks


def test_an_attention_mask_as_bert_exports_it():
    """mask (int64 [N, seq]) -> Cast -> (1 - m) * -10000 -> Unsqueeze -> added to x @ x^T -> Softmax."""
    from onnx import TensorProto, helper
    b = OnnxBuilder(opset=17)
    m = b.node("Cast", ["mask"], to=TensorProto.FLOAT)
    m = b.node("Mul", [b.node("Sub", [b.const(1.0), m]), b.const(-10000.0)])
    m = b.node("Unsqueeze", [m, b.const([1], np.int64)])
    scores = b.node("MatMul", ["input", b.node("Transpose", ["input"], perm=[0, 2, 1])])
    out = b.node("Softmax", [b.node("Add", [scores, m])], axis=-1)
    model = b.model(("N", "seq", 8), out, ("N", "seq", "seq"))
    model.graph.input.append(helper.make_tensor_value_info("mask", TensorProto.INT64, ["N", "seq"]))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    rng = np.random.default_rng(0)
    for n, seq in ((1, 1), (2, 6), (3, 19)):
        feed = {"input": rng.standard_normal((n, seq, 8)).astype(np.float32),
                "mask": (rng.random((n, seq)) < 0.7).astype(np.int64)}
        feed["mask"][:, 0] = 1
        np.testing.assert_allclose(exe.run(feed)[0], _ort(model, feed)[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(exe.run(feed)[0], exe.run_each(feed)[0])


def test_an_mlp_of_gemms_with_a_symbolic_batch():
    b = OnnxBuilder(seed=3)
    h = b.relu(b.gemm("input", 16, 32))                              # Gemm(transB=1) + bias, ReLU fused
    w = b.init("w2", b.weight((32, 8), 0.2))
    c = b.init("c2", b.weight((1, 8), 0.1))
    out = b.node("Softmax", [b.node("Gemm", [h, w, c], alpha=0.5, beta=2.0)], axis=-1)
    model = b.model(("N", 16), out, ("N", 8))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert len(exe.calls) == 3
    from loopweave.nn_ops.ops.matmul import panel_width
    nr = panel_width(lw.target.host_target().lanes("float32"))
    # a Gemm whose columns fill a panel reads its weight packed in panels (and has a one-row
    # variant); a narrower one keeps the blocked kernel and a few-rows one: a variant either way
    assert [len(c.variants) for c in exe.calls] == [1, 1, 0]
    assert [c.variants[0].module.name.endswith("one_row") for c in exe.calls[:2]] == [32 >= nr, 8 >= nr]
    for n in (1, 16, 17, 33):                                    # few rows (N at 1 too), then the blocked kernels
        x = np.random.default_rng(n).standard_normal((n, 16)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-5, atol=1e-6)
        np.testing.assert_array_equal(exe.run({"input": x})[0], exe.run_each({"input": x})[0])


def _resaved(path, tmp_path, edit):
    """The archive at ``path`` written again with ``edit(meta)`` applied (checksums recomputed)."""
    from loopweave.nn_ops.network.archive import ArchiveReader, ArchiveWriter
    out = tmp_path / "edited.lwx"
    with ArchiveReader(path) as reader:
        meta = {k: v for k, v in reader.meta.items() if k != "checksums"}
        members = {name: reader.read(name) for name in reader.meta["checksums"]}
    edit(meta)
    with ArchiveWriter(out) as writer:
        for name, data in members.items():
            writer.add(name, data)
        writer.finish(meta)
    return out


def test_saved_files_from_elsewhere_are_refused_with_what_to_do(encoder, tmp_path):
    _, exe = encoder
    path = tmp_path / "encoder.lwx"
    exe.save(path)
    with pytest.raises(lw.ArgumentError, match="version 99"):
        lw.load(_resaved(path, tmp_path, lambda m: m.update(version=99)))
    with pytest.raises(lw.ArgumentError, match="compiled for cpu 'other-cpu'.*compile the model again here"):
        lw.load(_resaved(path, tmp_path, lambda m: m["target"].update(cpu="other-cpu")))

    def drop_first_kernel(meta):
        meta["kernels"] = meta["kernels"][1:]
    with pytest.raises(OnnxImportError, match="has no kernel for node .* compile the model again"):
        lw.load(_resaved(path, tmp_path, drop_first_kernel))


def test_shape_inputs_are_refused_by_the_polymorphic_path():
    from onnx import TensorProto, helper
    graph = helper.make_graph([helper.make_node("Reshape", ["x", "shape"], ["y"])], "g",
                              [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 3, 4]),
                               helper.make_tensor_value_info("shape", TensorProto.INT64, [2])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [None, None])])
    g = lw.from_onnx(helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)]))
    with pytest.raises(OnnxImportError, match=r"shape inputs \(shape\) change the graph's structure"):
        lw.compile(g, polymorphic=True)


def test_profile_names_every_kernel_call(encoder):
    model, exe = encoder
    x = np.random.default_rng(0).standard_normal((2, 9, 64)).astype(np.float32)
    want = exe.run({"input": x})[0]
    rows = exe.profile({"input": x}, repeat=3)
    assert [node for node, _ in rows] == [c.node for c in exe.calls]
    assert all(seconds > 0 for _, seconds in rows)
    np.testing.assert_array_equal(exe.run({"input": x})[0], want)     # profiling left nothing behind


def test_one_row_of_a_dense_layer_with_a_partial_last_panel_runs_whole_vectors():
    """A classifier of 1000 columns (31 panels and a partial one) at batch 1: its one-row kernel
    loops over the panels inside the row, so every whole panel gets constant, vectorized extents
    (under a symbolic row loop they were scalar: 0.31 ms for MobileNetV2's 1280 x 1000, 0.03 so)."""
    b = OnnxBuilder(seed=4)
    out = b.gemm("input", 64, 1000)
    model = b.model(("N", 64), out, ("N", 1000))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    call, = exe.calls
    one_row = call.module_at({"N": 1})
    assert one_row.name.endswith("one_row") and "not_vectorized" not in one_row.get_source("lowered")
    for n in (1, 3):
        x = np.random.default_rng(n).standard_normal((n, 64)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-4, atol=1e-4)


def test_lw_compile_compiles_a_covered_model_once_and_warns_where_it_cannot(tmp_path):
    """The default for a model of symbolic sizes: compiled once where the polymorphic path covers it;
    else per shape, with a PerShapeCompileWarning saying why; shape inputs per shape, by design."""
    import warnings
    from loopweave.nn_ops.network.dynamic_executable import DynamicExecutable
    b = OnnxBuilder()
    covered = b.model(("N", 4), b.relu("input"), ("N", 4))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert isinstance(lw.compile(lw.from_onnx(covered)), PolymorphicExecutable)
    b = OnnxBuilder()          # (kept rows along the symbolic axis: a count that depends on the binding)
    model = b.model(("N", 4), b.node("Compress", ["input", b.init("keep", np.array([True]))], axis=0), (1, 4))
    with pytest.warns(lw.PerShapeCompileWarning, match=r"(?s)polymorphic=False.*Compress"):
        exe = lw.compile(lw.from_onnx(model), progress=False)
    assert isinstance(exe, DynamicExecutable)
    x = np.random.default_rng(0).standard_normal((3, 4)).astype(np.float32)
    np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0])
    with warnings.catch_warnings():          # checks="bounds": every kernel built with them, still once
        warnings.simplefilter("error")
        assert isinstance(lw.compile(lw.from_onnx(covered), checks="bounds"), PolymorphicExecutable)
    with warnings.catch_warnings():          # tuning_log=: still once (kernels without records keep theirs)
        warnings.simplefilter("error")
        assert isinstance(lw.compile(lw.from_onnx(covered), tuning_log=_empty_log(tmp_path)), PolymorphicExecutable)
    with pytest.raises(OnnxImportError, match="Compress"):
        lw.compile(lw.from_onnx(model), polymorphic=True)



def test_an_embedding_lookup_of_token_ids_compiles_once_and_checks_the_ids():
    """BERT-style exports start with Gather(embedding table, input_ids): int64 ids of symbolic batch
    and sequence read rows of a constant table; an id outside the table is an error, not a read."""
    b = OnnxBuilder(seed=5)
    table = b.init("emb", b.weight((50, 16), 1.0))
    h = b.node("Gather", [table, "input"], axis=0)
    out = b.node("MatMul", [h, b.init("w", b.weight((16, 8), 0.3))])
    model = b.model(("batch", "seq"), out, ("batch", "seq", 8), input_dtype="int64")
    exe = lw.compile(lw.from_onnx(model))
    assert isinstance(exe, PolymorphicExecutable)
    for batch, seq in ((1, 1), (2, 7), (3, 33)):
        ids = np.random.default_rng(seq).integers(0, 50, (batch, seq)).astype(np.int64)
        np.testing.assert_allclose(exe.run({"input": ids})[0], _ort(model, {"input": ids})[0], rtol=1e-4, atol=1e-5)
    exe.run({"input": np.array([[3, 4]], np.int64)})
    for _ in range(2):      # the second time at a shape seen before (the unchecked feed path)
        with pytest.raises(lw.IndexOutOfRangeError, match=r"node 'gather_\w+' \(poly_gather\): index 50 is out of "
                                                          r"range for axis 0 of 'emb\w*' \(an index read from 'input'\)"):
            exe.run({"input": np.array([[3, 50]], np.int64)})


def test_gpt2_causal_mask_and_stacked_qkv_compile_once_over_the_batch():
    """GPT-2 exported with a dynamic batch axis at a fixed length: the position table read at constant
    ids (folded at import), q, k and v taken from one stacked projection (Gather at a constant index),
    the causal mask's Where in the scores' epilogue; one compile for every batch size."""
    from loopweave.nn_ops.testing import model_zoo
    model = model_zoo.gpt2(batch=None, **model_zoo.SMALL["gpt2"])
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    op_of = {n.name: n.op_type for n in model.graph.node}
    assert "Where" not in {op_of[c.node] for c in exe.calls}        # fused into the scores' kernel
    assert sum(op_of[c.node] == "Gather" for c in exe.calls) == 1 + 3 * 2   # the token embedding; q, k, v
    for batch in (1, 3):
        ids = np.random.default_rng(batch).integers(0, 1000, (batch, 32)).astype(np.int64)
        ids[0, 0] = 999
        got, = exe.run({"input": ids})
        want, = _ort(model, {"input": ids})
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("name", ["vit_tiny", "mlp_mixer"])
def test_vision_transformers_with_a_dynamic_batch_compile_once(name):
    """ViT (the class token expanded to the batch from a Shape chain, then a Concat along the
    tokens; the class token taken back by a Gather at index 0) and MLP-Mixer (Reshape targets with
    a 0 for the batch), exported with a dynamic batch axis."""
    from loopweave.nn_ops.testing import model_zoo
    model = getattr(model_zoo, name)(batch=None, **model_zoo.SMALL[name])
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    for batch in (1, 3):
        x = np.random.default_rng(batch).standard_normal((batch, 3, 64, 64)).astype(np.float32)
        got, = exe.run({"input": x})
        want, = _ort(model, {"input": x})
        np.testing.assert_allclose(got, want, rtol=1e-3, atol=1e-4)


@pytest.fixture(scope="module")
def gpt2_dynamic():
    from loopweave.nn_ops.testing import model_zoo
    model = model_zoo.gpt2(batch=None, **dict(model_zoo.SMALL["gpt2"], seq=None))
    return model, lw.compile(lw.from_onnx(model), polymorphic=True)


@pytest.mark.parametrize("batch, seq", [(1, 1), (2, 7), (1, 40)])
def test_gpt2_with_dynamic_batch_and_length_compiles_once(gpt2_dynamic, batch, seq, forbid_compilation):
    """GPT-2 exported with dynamic axes: position ids a Range to the length, the causal mask a Slice
    of a 1024-square buffer to the length (``min(1024, seq)``, read as ``seq`` under a run-time check),
    head shapes from Shape chains.  Each length runs without compiling; seq 1 included."""
    model, exe = gpt2_dynamic
    assert isinstance(exe, PolymorphicExecutable)
    ids = np.random.default_rng(seq).integers(0, 1000, (batch, seq)).astype(np.int64)
    got, = exe.run({"input": ids})
    want, = _ort(model, {"input": ids})
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_gpt2_longer_than_its_position_table_is_refused_by_name(gpt2_dynamic):
    model, exe = gpt2_dynamic
    with pytest.raises(lw.ArgumentError, match=r"min\(1024, seq\) and seq.*(here seq = 1025)"):
        exe.run({"input": np.zeros((1, 1025), np.int64)})


@pytest.mark.parametrize("batch", [1, 3])
def test_top_k_and_arg_max_of_a_batch_compile_once(batch):
    """A classifier's head: TopK (K constant, along the classes; values and indices, or values only)
    and ArgMax/ArgMin with and without keepdims, over a symbolic batch: one compile, exact results."""
    b = OnnxBuilder(seed=2)
    logits = b.node("MatMul", ["input", b.init("w", b.weight((8, 20), 1.0))])
    k = b.init("k", np.array([5], np.int64))
    values, indices = b.node("TopK", [logits, k], n_out=2, axis=1)
    from onnx import TensorProto, helper
    best_only = b.node("TopK", [logits, k], n_out=2, axis=-1, largest=0)[0]        # its indices read by nothing
    arg = b.node("ArgMax", [logits], axis=1, keepdims=0)
    arg_min = b.node("ArgMin", [logits], axis=1, keepdims=1, select_last_index=1)
    outs = [(values, ["N", 5], TensorProto.FLOAT), (indices, ["N", 5], TensorProto.INT64),
            (best_only, ["N", 5], TensorProto.FLOAT), (arg, ["N"], TensorProto.INT64), (arg_min, ["N", 1], TensorProto.INT64)]
    graph = helper.make_graph(b.nodes, "head", [helper.make_tensor_value_info("input", TensorProto.FLOAT, ["N", 8])],
                              [helper.make_tensor_value_info(n, t, s) for n, s, t in outs], initializer=b.inits)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", b.opset)])
    model.ir_version = 8
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert isinstance(exe, PolymorphicExecutable)
    x = np.random.default_rng(batch).standard_normal((batch, 8)).astype(np.float32)
    for got, want in zip(exe.run({"input": x}), _ort(model, {"input": x})):
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_a_top_k_along_a_symbolic_axis_compiles_once_and_checks_k_against_it():
    """The 3 best of each row whose length is symbolic (a detector's boxes), values and indices,
    ties kept in index order; a row shorter than K is refused by name before anything runs."""
    b = OnnxBuilder()
    values, indices = b.node("TopK", ["input", b.init("k", np.array([3], np.int64))], n_out=2, axis=1)
    out = b.node("Add", [values, b.node("Cast", [indices], to=1)])
    model = b.model(("N", "C"), out, ("N", 3))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert "poly_topk_indices" in {c.module.name for c in exe.calls}
    for shape in ((1, 3), (2, 17), (3, 40)):
        x = np.round(np.random.default_rng(shape[1]).standard_normal(shape), 1).astype(np.float32)     # ties
        np.testing.assert_array_equal(exe.run({"input": x})[0], _ort(model, {"input": x})[0])
    with pytest.raises(lw.ArgumentError, match=r"TopK of K = 3 needs axis 1 at least that long, got C \(here C = 2\)"):
        exe.run({"input": np.zeros((1, 2), np.float32)})


def test_a_top_k_of_k_computed_from_sizes_compiles_once():
    """The smallest ``min(C, 5)`` of each row (a detector's ``min(boxes, pre_nms_top_n)`` as torch
    exports it: Shape, Gather, Min): K a size of the kernel, one compile, rows shorter and longer than 5."""
    b = OnnxBuilder()
    n = b.node("Unsqueeze", [b.node("Gather", [b.node("Shape", ["input"]), b.const(1, np.int64)], axis=0),
                             b.const([0], np.int64)])
    values, indices = b.node("TopK", ["input", b.node("Min", [n, b.const([5], np.int64)])], n_out=2, axis=1,
                             largest=0)
    model = b.model(("N", "C"), b.node("Add", [values, b.node("Cast", [indices], to=1)]), ("N", None))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert "poly_topk_indices" in {c.module.name for c in exe.calls}
    for shape in ((1, 1), (2, 3), (3, 40)):
        x = np.round(np.random.default_rng(shape[1]).standard_normal(shape), 1).astype(np.float32)
        np.testing.assert_array_equal(exe.run({"input": x})[0], _ort(model, {"input": x})[0])


def test_a_gather_elements_along_a_symbolic_axis_checks_each_index_it_reads():
    """GatherElements along the sequence at indices computed from the data (negative ones count from
    the end): one compile; an index past the run's length is an error, not a read."""
    b = OnnxBuilder()
    out = b.node("GatherElements", ["input", b.node("Cast", ["input"], to=7)], axis=1)
    model = b.model(("N", "S"), out, ("N", "S"))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert "poly_gather_elements" in {c.module.name for c in exe.calls}
    for shape in ((1, 1), (2, 9)):
        x = np.random.default_rng(shape[1]).integers(-shape[1], shape[1], shape).astype(np.float32)
        np.testing.assert_array_equal(exe.run({"input": x})[0], _ort(model, {"input": x})[0])
    with pytest.raises(lw.IndexOutOfRangeError, match=r"node '\w+' \(poly_gather_elements\): index 2 is out of "
                                                      r"range for axis 1 of 'input'"):
        exe.run({"input": np.array([[0.0, 2.0]], np.float32)})


def test_gathers_of_computed_values_compile_once():
    """Gather of a computed value at a constant index of a symbolic axis (the last token, -1; the
    third, checked to exist before a run), at constant indices and at computed ones (each checked
    where it is read)."""
    b = OnnxBuilder(seed=22)
    h = b.node("MatMul", ["input", b.init("w", b.weight((4, 6), 0.5))])                       # [N, S, 6]
    ends = b.node("Add", [b.node("Gather", [h, b.const(-1, np.int64)], axis=1),
                          b.node("Gather", [h, b.const(2, np.int64)], axis=1)])               # [N, 6]
    picked = b.node("Gather", [h, b.const([0, 2], np.int64)], axis=2)                         # [N, S, 2]
    ids = b.node("Cast", [b.node("Abs", [b.node("Gather", ["input", b.const(0, np.int64)], axis=2)])], to=7)
    rows = b.node("Gather", [b.node("Gather", ["input", b.const(0, np.int64)], axis=0), ids], axis=0)  # [N, S, 4]
    total = b.node("ReduceSum", [b.node("Add", [picked, b.node("Slice", [rows, b.const([0], np.int64),
                                                                          b.const([2], np.int64),
                                                                          b.const([2], np.int64)])]),
                                 b.const([1, 2], np.int64)], keepdims=1)                       # [N, 1]
    model = b.model(("N", "S", 4), b.node("Add", [ends, b.node("Squeeze", [total, b.const([2], np.int64)])]),
                    ("N", 6))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert {"poly_take", "poly_gather_data"} <= {c.module.name for c in exe.calls}
    for shape in ((1, 3, 4), (2, 9, 4)):
        x = np.random.default_rng(shape[1]).uniform(-2.9, 2.9, shape).astype(np.float32)      # ids 0..2
        np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-5, atol=1e-5)
    with pytest.raises(lw.ArgumentError, match=r"index 2 needs axis 1 of at least 3, got S \(here S = 2\)"):
        exe.run({"input": np.zeros((1, 2, 4), np.float32)})
    with pytest.raises(lw.IndexOutOfRangeError, match="axis 0"):
        exe.run({"input": np.full((1, 3, 4), 3.0, np.float32)})


def test_activations_with_attributes_join_a_dense_layer_s_epilogue():
    """LeakyRelu / HardSigmoid / HardSwish after a MatMul over symbolic rows: one kernel with its
    epilogue, compiled once, against onnxruntime at one row and several."""
    b = OnnxBuilder(seed=6, opset=14)
    h = b.node("MatMul", ["input", b.init("w", b.weight((12, 32), 0.5))])
    h = b.node("HardSwish", [b.node("HardSigmoid", [b.node("LeakyRelu", [h], alpha=0.2)], alpha=0.3, beta=0.2)])
    model = b.model(("N", 12), h, ("N", 32))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert len(exe.calls) == 1, [c.module.name for c in exe.calls]
    for rows in (1, 5):
        x = np.random.default_rng(rows).standard_normal((rows, 12)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-5, atol=1e-5)


def test_log_floor_ceil_and_reciprocal_compile_once():
    """Float unaries without attributes (a log-softmax written out, a quantiser's rounding):
    elementwise kernels of symbolic rows, as onnxruntime computes them."""
    b = OnnxBuilder(seed=7)
    # rounding first, of the exact input (after a MatMul a value a rounding error from an integer
    # could round either way)
    q = b.node("Add", [b.node("Floor", [b.node("Mul", ["input", b.const(3.0)])]),
                       b.node("Ceil", [b.node("Mul", ["input", b.const(2.0)])])])
    h = b.node("MatMul", [q, b.init("w", b.weight((6, 10), 1.0))])
    h = b.node("Mul", [b.node("Log", [b.node("Abs", [h])]),
                       b.node("Reciprocal", [b.node("Add", [b.node("Abs", [h]), b.const(1.0)])])])
    model = b.model(("N", 6), h, ("N", 10))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    for rows in (1, 4):
        x = np.random.default_rng(rows).standard_normal((rows, 6)).astype(np.float32)
        np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-5, atol=1e-5)



def _matches_ort_at(model, exe, shapes, atol=1e-5):
    """``exe`` against onnxruntime on a float32 input of each shape (seeded by its second size)."""
    for shape in shapes:
        x = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32)
        got, want = exe.run({"input": x})[0], _ort(model, {"input": x})[0]
        assert got.shape == want.shape
        np.testing.assert_allclose(got, want, rtol=1e-5, atol=atol)

def test_math_activations_and_variadic_sums_join_a_dense_layer_s_epilogue():
    """The activations of ``ops/math.py`` with their attributes (Elu's alpha, Shrink's lambd and
    bias, ...), both GELUs, trig, Sum and Mean after a MatMul over symbolic rows: one kernel, as
    onnxruntime computes them, at one row and several."""
    b = OnnxBuilder(seed=3, opset=20)
    h = b.node("MatMul", ["input", b.init("w", b.weight((12, 16), 0.5))])
    outs = [b.node("Softplus", [h]), b.node("Softsign", [h]), b.node("Mish", [h]), b.node("Elu", [h], alpha=0.7),
            b.node("Selu", [h]), b.node("Celu", [h], alpha=1.3), b.node("ThresholdedRelu", [h], alpha=0.2),
            b.node("Shrink", [h], lambd=0.3, bias=0.1), b.node("Sign", [h]), b.node("Round", [h]),
            b.node("Sin", [h]), b.node("Cos", [h]), b.node("Atan", [h]), b.node("Gelu", [h]),
            b.node("Gelu", [h], approximate="tanh")]
    model = b.model(("N", 12), b.node("Add", [b.node("Sum", outs[:5]), b.node("Mean", outs[5:])]), ("N", 16))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert len(exe.calls) == 1, [c.module.name for c in exe.calls]
    _matches_ort_at(model, exe, ((1, 12), (5, 12)))


def test_comparisons_logic_clip_mod_and_prelu_compile_once():
    """Masks built from comparisons and boolean logic, Where on them (scalar branches too), NaN and
    infinity tests, Clip with a bound left out, float Mod and PRelu by a per-column slope."""
    b = OnnxBuilder(seed=4, opset=13)
    x = "input"
    lt, gt = b.node("Less", [x, b.const(0.25)]), b.node("Greater", [x, b.node("Neg", [x])])
    eq = b.node("Equal", [b.node("Round", [x]), b.const(0.0)])
    le, ge = b.node("LessOrEqual", [x, b.const(-0.5)]), b.node("GreaterOrEqual", [x, b.const(1.0)])
    mask = b.node("Xor", [b.node("Or", [b.node("And", [lt, gt]), eq]), b.node("Not", [le])])
    terms = [b.node("Where", [mask, x, b.node("Clip", [x, b.const(-0.3), b.const(0.4)])]),
             b.node("Where", [ge, b.const(2.0), b.const(-1.0)]),
             b.node("Cast", [b.node("IsNaN", [b.node("Sqrt", [x])])], to=1),
             b.node("Cast", [b.node("IsInf", [b.node("Reciprocal", [b.node("Floor", [x])])], detect_negative=0)],
                    to=1),
             b.node("Mod", [x, b.const(0.7)], fmod=1),
             b.node("PRelu", [x, b.init("slope", b.weight((8,), 1.0))]),
             b.node("Clip", [x, "", b.const(0.5)])]
    model = b.model(("N", 8), b.node("Sum", terms), ("N", 8))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    for rows in (1, 6):
        x = (np.random.default_rng(rows).standard_normal((rows, 8)) * 2).astype(np.float32)
        x[-1, 0] = np.nan
        np.testing.assert_allclose(exe.run({"input": x})[0], _ort(model, {"input": x})[0], rtol=1e-5, atol=1e-5)


def test_integer_mod_sign_clip_equal_and_bitwise_ops_compile_once():
    """Integer elementwise nodes (a position's parity, a sign clipped by integer bounds, bitwise logic
    and shifts): exact, at sizes of 1 and more; a float-only activation of integers is refused."""
    b = OnnxBuilder(seed=5, opset=13)
    x = "input"
    parity = b.node("Equal", [b.node("Mod", [x, b.const(5, np.int64)]), b.const(0, np.int64)])
    clipped = b.node("Clip", [b.node("Sign", [x]), b.const(-1, np.int64), b.const(0, np.int64)])
    picked = b.node("Where", [parity, b.node("Mod", [x, b.const(-3, np.int64)], fmod=1), clipped])
    model = b.model(("N", "S"), b.node("Cast", [b.node("Add", [picked, b.node("Abs", [x])])], to=1), ("N", "S"),
                    input_dtype=np.int64)
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    for shape in ((1, 1), (3, 17)):
        x = np.random.default_rng(1).integers(-20, 20, shape).astype(np.int64)
        np.testing.assert_array_equal(exe.run({"input": x})[0], _ort(model, {"input": x})[0])
    b = OnnxBuilder(seed=5, opset=18)        # bitwise logic and shifts (opset 18's BitwiseAnd ...)
    u = b.node("Cast", [b.node("Abs", ["input"])], to=13)                                      # uint64
    bits = b.node("BitwiseXor", [b.node("BitwiseAnd", [u, b.const(12, np.uint64)]),
                                 b.node("BitwiseOr", [u, b.const(3, np.uint64)])])
    bits = b.node("BitShift", [b.node("BitShift", [bits, b.const(2, np.uint64)], direction="LEFT"),
                               b.const(1, np.uint64)], direction="RIGHT")
    model = b.model(("N", "S"), b.node("Cast", [b.node("BitwiseAnd", [bits, b.node("BitwiseNot", [u])])], to=1),
                    ("N", "S"), input_dtype=np.int64)
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    for shape in ((1, 1), (3, 17)):
        x = np.random.default_rng(2).integers(-40, 40, shape).astype(np.int64)
        np.testing.assert_array_equal(exe.run({"input": x})[0], _ort(model, {"input": x})[0])
    b = OnnxBuilder(seed=5, opset=13)
    model = b.model(("N", 4), b.node("Softplus", [b.node("Cast", ["input"], to=7)]), ("N", 4))
    with pytest.raises(OnnxImportError, match=r"Softplus.* float"):
        lw.compile(lw.from_onnx(model), polymorphic=True)


def test_split_log_softmax_and_pad_compile_once():
    """A projection split in three by sizes and in two by ``num_outputs`` (opset 18), LogSoftmax over
    the last axis, constant and edge padding of symbolic axes: the kernels compute ``S + 3`` from
    ``S``; at one token and several, as onnxruntime computes them."""
    b = OnnxBuilder(seed=8, opset=18)
    h = b.node("MatMul", ["input", b.init("w", b.weight((8, 24), 0.5))])
    q, k, v = b.node("Split", [h, b.const([8, 8, 8], np.int64)], n_out=3, axis=-1)
    left, right = b.node("Split", [v], n_out=2, axis=2, num_outputs=2)
    scores = b.node("LogSoftmax", [b.node("Add", [q, k])], axis=-1)
    padded = b.node("Pad", [b.node("Concat", [left, right], axis=-1), b.const([0, 1, 2, 0, 2, 1], np.int64),
                            b.const(0.5)])
    edged = b.node("Pad", [scores, b.const([0, 1, 1, 0, 2, 2], np.int64)], mode="edge")
    model = b.model(("N", "S", 8), b.node("Add", [padded, edged]), ("N", None, 11))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert {"poly_split", "poly_pad"} <= {c.module.name for c in exe.calls}
    _matches_ort_at(model, exe, ((1, 1, 8), (2, 5, 8)))


def test_a_causal_mask_from_constant_of_shape_and_trilu_compiles_once():
    """What torch exports for ``torch.full((seq, seq), -inf).triu(1)`` added to attention scores:
    ConstantOfShape of a shape computed from ``seq``, Trilu with k=1, then a Tile of the scores'
    rows; one compile, exact at one token and several."""
    from onnx import helper, TensorProto
    b = OnnxBuilder(seed=10, opset=14)
    seq = b.node("Gather", [b.node("Shape", ["input"]), b.const(1, np.int64)], axis=0)
    side = b.node("Unsqueeze", [seq, b.const([0], np.int64)])
    square = b.node("Concat", [side, side], axis=0)
    full = b.node("ConstantOfShape", [square],
                  value=helper.make_tensor("v", TensorProto.FLOAT, [1], [-1e9]))
    mask = b.node("Trilu", [full, b.const(1, np.int64)], upper=1)
    scores = b.node("MatMul", ["input", b.node("Transpose", ["input"], perm=[0, 2, 1])])
    out = b.node("Tile", [b.node("Softmax", [b.node("Add", [scores, mask])], axis=-1), b.const([1, 2, 1], np.int64)])
    model = b.model(("N", "S", 4), out, ("N", None, "S"))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert {"poly_constant_of_shape", "poly_trilu", "poly_tile"} <= {c.module.name for c in exe.calls}
    _matches_ort_at(model, exe, ((1, 1, 4), (2, 6, 4)), atol=1e-6)


def test_cumsum_gather_elements_and_hardmax_compile_once():
    """Position ids counted along the sequence (``mask.cumsum(-1) - 1``, exclusive and reversed too),
    a row's best value gathered at its ArgMax, and Hardmax: one compile, one token and several."""
    b = OnnxBuilder(seed=11, opset=14)
    h = b.node("MatMul", ["input", b.init("w", b.weight((5, 6), 0.7))])
    ids = b.node("Cast", [b.node("Greater", ["input", b.const(0.0)])], to=7)           # int64 mask
    pos = b.node("Sub", [b.node("CumSum", [ids, b.const(1, np.int64)]), b.const(1, np.int64)])
    back = b.node("CumSum", [ids, b.const(1, np.int64)], exclusive=1, reverse=1)
    counts = b.node("Cast", [b.node("Add", [pos, back])], to=1)                        # [N, S, 5]
    best = b.node("GatherElements", [h, b.node("ArgMax", [h], axis=2, keepdims=1)], axis=2)     # [N, S, 1]
    out = b.node("Concat", [b.node("Add", [b.node("Hardmax", [h], axis=-1), best]), counts], axis=-1)
    model = b.model(("N", "S", 5), out, ("N", "S", 11))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert {"poly_cumulative", "poly_gather_elements", "poly_hardmax"} <= {c.module.name for c in exe.calls}
    _matches_ort_at(model, exe, ((1, 1, 5), (3, 7, 5)), atol=1e-6)


def test_reductions_with_a_step_before_or_after_compile_once():
    """ReduceL1, ReduceL2, ReduceSumSquare, ReduceLogSum and ReduceProd over a symbolic axis and a
    static one: the static path's steps (``REDUCE_BETWEEN``) in one kernel each, every size 1 too."""
    b = OnnxBuilder(seed=12, opset=13)
    x = b.node("Add", [b.node("Abs", ["input"]), b.const(0.5)])
    parts = [b.node(op, [x], axes=[axis], keepdims=1)
             for op, axis in (("ReduceL1", 1), ("ReduceL2", 2), ("ReduceSumSquare", 1), ("ReduceLogSum", 2),
                              ("ReduceProd", 2))]
    out = b.node("Add", [b.node("Add", [b.node("Mul", [parts[0], parts[1]]), b.node("Mul", [parts[2], parts[3]])]),
                         parts[4]])
    model = b.model(("N", "S", 3), out, ("N", 1, 1))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    _matches_ort_at(model, exe, ((1, 1, 3), (2, 9, 3)))


def test_every_covered_op_has_a_symbolic_shape_rule():
    """An op the walk covers but shape inference does not know is refused at its first use, whatever
    the walk can do; each covered op needs its rule."""
    from loopweave.nn_ops.compile_once.builder import COVERED
    from loopweave.nn_ops.onnx_import.symbolic_shapes import RULES
    assert sorted(COVERED - set(RULES)) == []


def test_a_qdq_model_compiles_once():
    """A QDQ model as quantization tools write it: the activations quantized and dequantized per
    tensor, an int8 weight dequantized per column (folded to floats at compile), the result per
    channel to uint8 and back: one compile, exactly onnxruntime's values."""
    b = OnnxBuilder(seed=15, opset=13)
    x = b.node("DequantizeLinear", [b.node("QuantizeLinear", ["input", b.const(0.05), b.const(3, np.int8)]),
                                    b.const(0.05), b.const(3, np.int8)])
    weight = b.node("DequantizeLinear", [b.init("wq", np.random.default_rng(0).integers(-100, 100, (6, 8)).astype(np.int8)),
                                         b.init("ws", np.linspace(0.01, 0.02, 8).astype(np.float32)),
                                         b.init("wz", np.zeros(8, np.int8))], axis=1)
    scale, zero = np.linspace(0.1, 0.2, 8).astype(np.float32), np.full(8, 128, np.uint8)
    q = b.node("QuantizeLinear", [b.node("MatMul", [x, weight]), b.init("s", scale), b.init("z", zero)], axis=-1)
    model = b.model(("N", "S", 6), b.node("DequantizeLinear", [q, b.init("s", scale), b.init("z", zero)], axis=-1),
                    ("N", "S", 8))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert [c.module.name for c in exe.calls].count("poly_quantize") == 2
    for shape in ((1, 1, 6), (2, 7, 6)):
        x = np.random.default_rng(shape[1]).standard_normal(shape).astype(np.float32) * 3
        np.testing.assert_array_equal(exe.run({"input": x})[0], _ort(model, {"input": x})[0])
    b = OnnxBuilder(seed=16, opset=21)      # a weight quantized in blocks of 2 rows (opset 21's block_size)
    rng = np.random.default_rng(1)
    weight = b.node("DequantizeLinear", [b.init("wq", rng.integers(-100, 100, (6, 8)).astype(np.int8)),
                                         b.init("ws", rng.uniform(0.01, 0.02, (3, 8)).astype(np.float32)),
                                         b.init("wz", rng.integers(-3, 3, (3, 8)).astype(np.int8))],
                    axis=0, block_size=2)
    model = b.model(("N", 6), b.node("MatMul", ["input", weight]), ("N", 8))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    _matches_ort_at(model, exe, ((1, 6), (5, 6)))


def test_normalizations_by_whole_tensor_reductions_compile_once():
    """LpNormalization (p 1 and 2), MeanVarianceNormalization over the batch and the map,
    ReduceLogSumExp kept and dropped (opset 18's axes input), over symbolic sizes including 1 (MVN
    needs two values: of one, ONNX's definition is a square root of rounding noise); then
    RMSNormalization (opset 23) after a dense layer."""
    b = OnnxBuilder(seed=17, opset=18)
    x = b.node("Add", ["input", b.const(0.1)])
    products = b.node("Mul", [b.node("LpNormalization", [x], axis=1, p=1), b.node("LpNormalization", [x], axis=-1)])
    out = b.node("Add", [b.node("Add", [products, b.node("MeanVarianceNormalization", [x], axes=[0, 2, 3])]),
                         b.node("ReduceLogSumExp", [x, b.const([1, 3], np.int64)], keepdims=1)])
    dropped = b.node("ReduceLogSumExp", [x, b.const([2], np.int64)], keepdims=0)
    out = b.node("Add", [out, b.node("Unsqueeze", [dropped, b.const([2], np.int64)])])
    model = b.model(("N", 4, "H", "W"), out, ("N", 4, "H", "W"))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert {"poly_lp_normalize", "poly_mvn", "poly_log_sum_exp"} <= {c.module.name for c in exe.calls}
    _matches_ort_at(model, exe, ((1, 4, 1, 3), (2, 4, 5, 1), (2, 4, 5, 19)), atol=1e-4)
    b = OnnxBuilder(seed=18, opset=23)
    h = b.node("MatMul", ["input", b.init("w", b.weight((8, 16), 0.5))])
    model = b.model(("N", "S", 8), b.node("RMSNormalization", [h, b.init("s", b.weight((16,), 1.0))], epsilon=1e-4),
                    ("N", "S", 16))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    _matches_ort_at(model, exe, ((1, 1, 8), (3, 5, 8)))


def test_einsum_attention_compiles_once():
    """Attention written with Einsum (``bqhd,bkhd->bhqk`` and back, then a sum over two letters):
    the letters' symbolic sizes from shape inference, one compute each, one token and several."""
    b = OnnxBuilder(seed=19, opset=13)

    def heads(weight):
        return b.node("Reshape", [b.node("MatMul", ["input", b.init(weight, b.weight((8, 8), 0.5))]),
                                  b.const([0, 0, 2, 4], np.int64)])
    q, k = heads("wq"), heads("wk")
    att = b.node("Softmax", [b.node("Einsum", [q, k], equation="bqhd,bkhd->bhqk")], axis=-1)
    ctx = b.node("Einsum", [att, q], equation="bhqk,bkhd->bqhd")
    out = b.node("Add", [b.node("Reshape", [ctx, b.const([0, 0, 8], np.int64)]),
                         b.node("Unsqueeze", [b.node("Einsum", [ctx], equation="bqhd->bq"), b.const([2], np.int64)])])
    model = b.model(("N", "S", 8), out, ("N", "S", 8))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert [c.module.name for c in exe.calls].count("poly_einsum") == 3
    _matches_ort_at(model, exe, ((1, 1, 8), (2, 7, 8)))


def test_one_hot_of_computed_labels_compiles_once():
    """OneHot of integer labels (negative ones count from the depth, out-of-range ones give a row
    of the off value) along the last axis and a middle one."""
    b = OnnxBuilder(seed=20, opset=11)
    values = b.init("v", np.array([-0.5, 2.0], np.float32))
    last = b.node("OneHot", ["input", b.const(5, np.int64), values], axis=-1)                 # [N, S, 5]
    middle = b.node("OneHot", ["input", b.const(5, np.int64), values], axis=1)                # [N, 5, S]
    model = b.model(("N", "S"), b.node("Add", [last, b.node("Transpose", [middle], perm=[0, 2, 1])]),
                    ("N", "S", 5), input_dtype=np.int64)
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    for shape in ((1, 1), (3, 18)):
        x = np.random.default_rng(shape[1]).integers(-7, 7, shape).astype(np.int64)
        np.testing.assert_array_equal(exe.run({"input": x})[0], _ort(model, {"input": x})[0])


def test_cast_like_compiles_once():
    """CastLike to the type of a computed value, and of a constant to a value's type (as torch's
    dynamo exporter writes scalars): folded at compile, the rest in the elementwise kernel."""
    b = OnnxBuilder(seed=21, opset=15)
    ints = b.node("Cast", [b.node("Mul", ["input", b.const(4.0)])], to=7)                  # int64
    floored = b.node("CastLike", [b.node("Floor", [b.node("Mul", ["input", b.const(3.0)])]), ints])
    step = b.node("CastLike", [b.const(2.0), ints])                                        # int64 2
    out = b.node("Cast", [b.node("Add", [b.node("Mul", [floored, step]), ints])], to=1)
    model = b.model(("N", 5), out, ("N", 5))
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    for rows in (1, 4):
        x = np.random.default_rng(rows).standard_normal((rows, 5)).astype(np.float32)
        np.testing.assert_array_equal(exe.run({"input": x})[0], _ort(model, {"input": x})[0])
