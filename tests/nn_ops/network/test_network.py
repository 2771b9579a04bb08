"""Whole networks: ONNX import, graph passes, fusion, the one-call executor, save/load, errors."""
import re
import time

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
from onnx import TensorProto, helper  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError
from loopweave.nn_ops.network.passes import fuse_operators, optimize
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder, mobilenet_v2, resnet18, small_cnn

ort = pytest.importorskip("onnxruntime")


def _reference(model, feed):
    sess = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"])
    return sess.run(None, feed)


def _check_against_onnxruntime(model, exe, seed=0):
    rng = np.random.default_rng(seed)
    feed = {name: rng.standard_normal(shape).astype(dtype) for name, shape, dtype in exe.inputs}
    got = exe.run(feed)
    want = _reference(model, feed)
    assert len(got) == len(want)
    for a, b in zip(got, want):
        assert a.shape == b.shape
        np.testing.assert_allclose(a, b, rtol=1e-4, atol=1e-4 * max(1.0, float(np.abs(b).max())))
    return feed, got


@pytest.fixture(scope="module")
def small():
    model = small_cnn(batch=2, size=16)
    return model, lw.compile(lw.from_onnx(model), progress=False)


def test_small_cnn_matches_onnxruntime(small):
    model, exe = small
    _check_against_onnxruntime(model, exe)


def test_import_gives_static_graph_with_printer_and_html():
    g = lw.from_onnx(small_cnn(batch=2, size=16))
    assert g.inputs == ["input"] and g.values["input"].shape == (2, 3, 16, 16)
    text = str(g)
    assert "conv2d(" in text and "max_pool2d(" in text and "float32[2, 10]" in text
    html = g._repr_html_()
    assert "<table>" in html and "conv2d" in html and "[2, 8, 16, 16]" in html


def test_batch_norm_is_folded_and_epilogues_fused():
    g = optimize(lw.from_onnx(small_cnn()))
    counts = g.op_counts()
    assert counts["conv2d_blocked"] == 4 and "mul" not in counts, counts    # every BN went into its conv
    groups = fuse_operators(g)
    names = [grp.name for grp in groups]
    assert "conv2d_blocked_relu" in names and "conv2d_blocked_add_relu" in names and "conv2d_blocked_clip" in names, \
        names
    # no stand-alone elementwise kernel; the one injective kernel is the layout transform after the pool
    assert [grp.name for grp in groups if grp.kind == "injective"] == ["from_blocked"], names


def test_save_load_round_trip(small, tmp_path):
    model, exe = small
    feed, got = _check_against_onnxruntime(model, exe, seed=1)
    path = tmp_path / "small.lwx"
    exe.save(path)
    t0 = time.perf_counter()
    again = lw.load(path)
    assert time.perf_counter() - t0 < 1.0
    for a, b in zip(again.run(feed), got):
        np.testing.assert_array_equal(a, b)


def test_run_checks_inputs(small):
    _, exe = small
    x = np.zeros((2, 3, 16, 16), np.float32)
    with pytest.raises(lw.ArgumentError, match="unknown input.*'image'"):
        exe.run({"image": x})
    with pytest.raises(lw.ArgumentError, match="missing input.*'input'"):
        exe.run({})
    with pytest.raises(lw.ArgumentError, match="'input' must have dtype float32, got float64"):
        exe.run({"input": x.astype(np.float64)})
    with pytest.raises(lw.ArgumentError, match=r"'input' must have shape \(2, 3, 16, 16\).*batch size was fixed"):
        exe.run({"input": np.zeros((4, 3, 16, 16), np.float32)})
    with pytest.raises(lw.ArgumentError, match="'input' must have shape"):
        exe.run({"input": np.zeros((2, 3, 8, 8), np.float32)})


def test_feeds_that_need_converting_or_checking_leave_the_fast_path(small):
    """A plain feed (the exact names, C-contiguous arrays of the right shape and dtype) skips the
    full check; anything else takes it: a Fortran-ordered array or a strided view is copied and
    gives the same result, an ndarray subclass is read as its data, an extra name is refused."""
    _, exe = small
    x = np.random.default_rng(0).standard_normal((2, 3, 16, 16)).astype(np.float32)
    assert exe._plain_feed({"input": x}) is not None
    expected = exe.run({"input": x})[0]
    fortran = np.asfortranarray(x)
    strided = np.repeat(x, 2, axis=3)[..., ::2]
    assert exe._plain_feed({"input": fortran}) is None and exe._plain_feed({"input": strided}) is None
    for feed in ({"input": fortran}, {"input": strided}, x, {"input": x.view(np.recarray)}):
        np.testing.assert_array_equal(exe.run(feed)[0], expected)
    with pytest.raises(lw.ArgumentError, match="unknown input.*'extra'"):
        exe.run({"input": x, "extra": x})


def test_unsupported_ops_are_all_listed_before_compiling():
    b = OnnxBuilder()
    x = b.node("RandomUniformLike", ["input"])
    y = b.node("Relu", [x])
    z = b.node("Det", [y])
    w = b.node("Relu", [b.node("NonZero", [z])])
    model = b.model((1, 3, 4, 4), w, (1, 3, 4, 4))
    with pytest.raises(OnnxImportError) as info:
        lw.from_onnx(model)
    message = str(info.value)
    assert "3 node(s)" in message
    for op in ("RandomUniformLike", "Det", "NonZero"):
        assert f"{op} (opset 13)" in message
    assert "randomuniformlike_1_node" in message
    assert [u[1] for u in info.value.unsupported] == ["RandomUniformLike", "Det", "NonZero"]
    assert isinstance(info.value, lw.LoopweaveError)


def test_unsupported_attribute_is_reported_with_the_node():
    b = OnnxBuilder()
    out = b.node("MaxPool", ["input"], kernel_shape=[2, 2], auto_pad="MIRROR")
    with pytest.raises(OnnxImportError, match="maxpool_1_node.*MaxPool.*auto_pad='MIRROR'"):
        lw.from_onnx(b.model((1, 1, 4, 4), out, (1, 1, 2, 2)))


def test_malformed_and_missing_files(tmp_path):
    bad = tmp_path / "bad.onnx"
    bad.write_bytes(b"\x08\x07this is not protobuf\xff\xff")
    with pytest.raises(OnnxImportError, match="not a valid ONNX model|malformed|empty graph"):
        lw.from_onnx(str(bad))
    with pytest.raises(OnnxImportError, match="does not exist"):
        lw.from_onnx(str(tmp_path / "missing.onnx"))
    with pytest.raises(OnnxImportError, match="file path or an onnx.ModelProto"):
        lw.from_onnx(42)
    with pytest.raises(lw.ArgumentError, match="not a loopweave executable|cannot open"):
        lw.load(bad)


def test_input_shapes_fix_a_dynamic_batch():
    model = small_cnn()
    model.graph.input[0].type.tensor_type.shape.dim[0].dim_param = "N"
    g = lw.from_onnx(model, input_shapes={"input": (3, 3, 16, 16)})
    assert g.values["input"].shape == (3, 3, 16, 16)
    with pytest.raises(OnnxImportError, match="input_shapes names 'image'"):
        lw.from_onnx(model, input_shapes={"image": (3, 3, 16, 16)})


def test_shape_subgraph_is_folded():
    """Shape -> Gather -> Unsqueeze -> Concat -> Reshape: the usual exported flatten."""
    b = OnnxBuilder()
    pooled = b.node("GlobalAveragePool", ["input"])
    shape = b.node("Shape", [pooled])
    batch = b.node("Gather", [shape, b.init("zero", np.array(0, np.int64))], axis=0)
    batch1 = b.node("Unsqueeze", [batch, b.init("axes", np.array([0], np.int64))])
    target = b.node("Concat", [batch1, b.init("minus1", np.array([-1], np.int64))], axis=0)
    flat = b.node("Reshape", [pooled, target])
    out = b.gemm(flat, 4, 5)
    model = b.model((2, 4, 3, 3), out, (2, 5))
    g = lw.from_onnx(model)
    assert set(g.op_counts()) == {"global_avg_pool", "reshape", "dense"}
    _check_against_onnxruntime(model, lw.compile(g, progress=False))


def test_graph_output_that_is_a_reshape_and_two_outputs():
    b = OnnxBuilder()
    r = b.relu("input")
    flat = b.node("Flatten", [r], axis=1)
    model = b.model((2, 3, 2, 2), flat, (2, 12))
    model.graph.output.append(helper.make_tensor_value_info(r, TensorProto.FLOAT, [2, 3, 2, 2]))
    exe = lw.compile(lw.from_onnx(model), progress=False)
    _check_against_onnxruntime(model, exe)


@pytest.mark.parametrize("builder", [resnet18, mobilenet_v2], ids=["resnet18", "mobilenet_v2"])
def test_full_size_networks_match_onnxruntime(builder):
    model = builder(batch=1, size=224)
    exe = lw.compile(lw.from_onnx(model), progress=False)
    _check_against_onnxruntime(model, exe)


def _parallel_loops(func) -> int:
    return str(func).count("# parallel")


def test_dense_epilogue_is_fused_into_the_gemm_tile():
    from loopweave import nn_ops
    X = lw.placeholder((40, 64), name="X")        # enough work to run in parallel (registry.SERIAL_WORK)
    W = lw.placeholder((20, 64), name="W")
    b = lw.placeholder((20,), name="b")
    Y = nn_ops.relu(nn_ops.dense(X, W, b))
    func = lw.lower(nn_ops.schedule(Y), [X, W, b, Y])
    assert _parallel_loops(func) == 1, func         # one loop nest: the relu is written from the accumulator
    rng = np.random.default_rng(0)
    x, w, bb = rng.standard_normal((40, 64), np.float32), rng.standard_normal((20, 64), np.float32), \
        rng.standard_normal(20, np.float32)
    out = np.empty((40, 20), np.float32)
    lw.build(func)(x, w, bb, out)
    np.testing.assert_allclose(out, np.maximum(x @ w.T + bb, 0), rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("groups,k", [(1, 3), (1, 1), (8, 3)], ids=["conv3x3", "conv1x1", "depthwise"])
def test_conv_epilogue_is_fused(groups, k):
    from loopweave import nn_ops
    X = lw.placeholder((1, 8, 10, 10), name="X")
    W = lw.placeholder((8, 8 // groups, k, k), name="W")
    R = lw.placeholder((1, 8, 10, 10), name="R")
    Y = nn_ops.relu(nn_ops.add(nn_ops.conv2d(X, W, 1, k // 2, 1, groups), R))
    s = nn_ops.schedule(Y)
    assert getattr(s[Y], "fused_anchor", None) is not None
    func = lw.lower(s, [X, W, R, Y])
    assert "allocate((1, 8, 10, 10)" not in str(func)     # no full-size intermediate for the conv result


def test_memory_plan_reuses_the_arena(small):
    _, exe = small
    g = exe.graph
    intermediates = sum(int(np.prod(v.shape)) * 4 for name, v in g.values.items()
                        if name not in g.initializers and name not in g.inputs and name not in g.outputs)
    assert 0 < exe.arena_size < intermediates


def test_progress_goes_to_stderr(capsys):
    """Outside a terminal or notebook (here: pytest's captured stderr) only the summary line is printed."""
    exe = lw.compile(lw.from_onnx(small_cnn(size=8)), progress=True)
    err = capsys.readouterr().err
    assert re.search(rf"loopweave: {len(exe.calls)} kernel calls: \d+ kernels compiled, \d+ from the cache", err) \
        and "\r" not in err, err
    lw.compile(lw.from_onnx(small_cnn(size=8)), progress=False)
    assert capsys.readouterr().err == ""


@pytest.mark.parametrize("in_order", [False, True])
def test_profile_lists_every_kernel(small, in_order):
    """Each call repeated, or the calls in run order once per pass (as a run sees the caches)."""
    _, exe = small
    rows = exe.profile({"input": np.zeros((2, 3, 16, 16), np.float32)}, repeat=2, in_order=in_order)
    assert [name for name, _ in rows] == [c.name for c in exe.calls] and all(t > 0 for _, t in rows)


def test_same_value_twice_two_inputs_and_a_constant_output():
    b = OnnxBuilder()
    sq = b.node("Mul", ["input", "input"])
    s = b.node("Add", [sq, "other"])
    model = b.model((2, 3), s, (2, 3))
    model.graph.input.append(helper.make_tensor_value_info("other", TensorProto.FLOAT, [2, 3]))
    const = b.init("k", np.arange(4, dtype=np.float32))
    model.graph.initializer.extend([b.inits[-1]])
    model.graph.output.append(helper.make_tensor_value_info(const, TensorProto.FLOAT, [4]))
    model.graph.output.append(helper.make_tensor_value_info(sq, TensorProto.FLOAT, [2, 3]))
    exe = lw.compile(lw.from_onnx(model), progress=False)
    _check_against_onnxruntime(model, exe)


def test_load_refuses_other_cpus_and_versions(small, tmp_path):
    import hashlib
    import json
    import zipfile
    _, exe = small
    path = tmp_path / "small.lwx"
    exe.save(path)
    # (a CPU whose features this one has, an x86-64-v3 file on an AVX-512 machine, loads: test_export_levels)
    for key, value, message in [("target", {"kind": "llvm", "cpu": "other", "features": "+avx2,+nosuchfeature"},
                                 "lacks .nosuchfeature.; compile the model again"),
                                ("version", 99, "unsupported format")]:
        broken = tmp_path / f"broken_{key}.lwx"
        with zipfile.ZipFile(path) as src, zipfile.ZipFile(broken, "w") as dst:
            for item in src.namelist():
                data = src.read(item)
                if item == "meta.sha256":
                    continue
                if item == "meta.json":
                    meta = json.loads(data)
                    meta[key] = value
                    data = json.dumps(meta).encode()
                    dst.writestr("meta.sha256", hashlib.sha256(data).hexdigest())
                dst.writestr(item, data)
        with pytest.raises(lw.ArgumentError, match=message):
            lw.load(broken)
    assert "<table>" in exe._repr_html_()


def test_older_opsets_are_converted_to_13():
    """Opset 9 (Clip min/max and Unsqueeze axes as attributes) goes through onnx's version converter."""
    b = OnnxBuilder(opset=9)
    x = b.node("Clip", [b.relu(b.bn(b.conv("input", 3, 4, 3), 4))], min=0.0, max=6.0)
    u = b.node("Unsqueeze", [b.node("GlobalAveragePool", [x])], axes=[0])
    model = b.model((1, 3, 6, 6), u, (1, 1, 4, 1, 1))
    g = lw.from_onnx(model)
    assert "clip" in g.op_counts()
    _check_against_onnxruntime(model, lw.compile(g, progress=False))


def test_dangling_input_is_a_clear_import_error():
    b = OnnxBuilder()
    out = b.node("Add", ["input", "nowhere"])
    with pytest.raises(OnnxImportError, match="malformed.*nowhere"):
        lw.from_onnx(b.model((1, 3), out, (1, 3)))


@pytest.mark.parametrize("builder", [resnet18, mobilenet_v2], ids=["resnet18", "mobilenet_v2"])
def test_networks_with_batch_larger_than_one(builder):
    model = builder(batch=2, size=32, classes=16)
    _check_against_onnxruntime(model, lw.compile(lw.from_onnx(model), progress=False))


def test_explicit_zero_pad_is_folded_into_the_conv():
    b = OnnxBuilder()
    pads = b.init("pads", np.array([0, 0, 1, 0, 0, 0, 2, 1], np.int64))
    p = b.node("Pad", ["input", pads])
    out = b.relu(b.conv(p, 3, 4, 3, stride=2, pad=0))
    model = b.model((1, 3, 9, 9), out, (1, 4, 5, 5))
    g = optimize(lw.from_onnx(model))
    assert "pad" not in g.op_counts() and g.nodes[0].attrs["padding"] == (1, 0, 2, 1)
    _check_against_onnxruntime(model, lw.compile(lw.from_onnx(model), progress=False))


@pytest.mark.parametrize("attrs, pool, length", [
    (dict(strides=[2], dilations=[2], pads=[1, 2], group=2), "MaxPool", 4),
    (dict(auto_pad="SAME_UPPER", strides=[1], group=2), "AveragePool", 17),
])
def test_1d_conv_and_pool_run_as_2d_rows(attrs, pool, length):
    """Rank-3 Conv / MaxPool / AveragePool import as their 2-d ops on [N, C, 1, L] rows."""
    rng = np.random.default_rng(4)
    w = helper.make_tensor("w", TensorProto.FLOAT, [6, 2, 3], rng.standard_normal(36).astype(np.float32).tolist())
    b = helper.make_tensor("b", TensorProto.FLOAT, [6], rng.standard_normal(6).astype(np.float32).tolist())
    conv = helper.make_node("Conv", ["x", "w", "b"], ["c"], kernel_shape=[3], **attrs)
    pool_attrs = dict(kernel_shape=[2], strides=[2]) if pool == "MaxPool" else dict(kernel_shape=[3], pads=[1, 1])
    pooled = helper.make_node(pool, ["c"], ["y"], **pool_attrs)
    graph = helper.make_graph([conv, pooled], "g", [helper.make_tensor_value_info("x", TensorProto.FLOAT, [2, 4, 17])],
                              [helper.make_tensor_value_info("y", TensorProto.FLOAT, [2, 6, length])],
                              initializer=[w, b])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    counts = lw.from_onnx(model).op_counts()
    assert counts.get("conv2d") == 1 and ("max_pool2d" in counts or "avg_pool2d" in counts), counts
    _check_against_onnxruntime(model, lw.compile(lw.from_onnx(model), progress=False))
