"""``lw.compile(net, target="cuda")``: every kernel of a network built with the op library's CUDA
schedules.  Here (no GPU needed): the CUDA C of every kernel compiles to PTX, the schedules'
values are checked by running the whole network with its GPU kernels emulated on the CPU,
and running without a GPU is a clean error.  On a GPU (marker ``gpu``): against onnxruntime."""
import ctypes

import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.network.cuda_executable import CudaExecutable  # noqa: E402
from loopweave.nn_ops.network.executable import build_kernels  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import small_cnn, transformer_encoder  # noqa: E402
from loopweave.target import resolve_target  # noqa: E402


def _tensor_core_cnn():
    """Convolutions on the tensor cores at batch 1, each padded to whole warp tiles (so product and
    epilogue are two kernels): a 3-channel stem (27 taps padded to 32), a 3x3 32->32 with a residual
    add over 36 pixels (padded to 64 columns), a 1x1 32->24 (rows padded to 32), a 1x1 24->64 (24
    taps); the classifier (one row) stays fp32."""
    from loopweave.nn_ops.testing.onnx_builder import OnnxBuilder
    b = OnnxBuilder(3)
    x = b.relu(b.conv("input", 3, 32, 3, bias=True))
    x = b.relu(b.node("Add", [b.conv(x, 32, 32, 3, bias=True), x]))
    x = b.relu(b.conv(b.conv(x, 32, 24, 1, bias=True), 24, 64, 1, bias=True))
    x = b.node("GlobalAveragePool", [x])
    out = b.gemm(b.node("Flatten", [x], axis=1), 64, 10)
    return b.model((1, 3, 6, 6), out, (1, 10), name="tensor_core_cnn")


MODELS = {"small_cnn": lambda: small_cnn(batch=2, size=16), "encoder": lambda: transformer_encoder(layers=1),
          "tensor_core_cnn": _tensor_core_cnn}


def _feed(exe, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(d) for n, s, d in exe.inputs}


def _ort(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.fixture(scope="module", params=["encoder", "small_cnn"])
def compiled(request):
    model = MODELS[request.param]()
    return model, lw.compile(lw.from_onnx(model), target="cuda", progress=False)


def test_every_kernel_compiles_to_ptx(compiled, cuda_compilers):
    _, exe = compiled
    assert isinstance(exe, CudaExecutable) and "CudaExecutable" in repr(exe)
    sources = exe.sources("cuda")
    assert len(sources) == len(exe.modules) >= 5
    assert all("__global__" in src for src in sources.values())
    assert all(".entry" in ptx for ptx in exe.sources("ptx").values())


def test_running_without_a_gpu_is_a_clean_error(compiled):
    from loopweave.backends.cuda.driver import gpu_available
    if gpu_available():
        pytest.skip("a GPU is present")
    _, exe = compiled
    for method in (exe.run, exe.profile):
        with pytest.raises(lw.BuildError, match="no CUDA driver/GPU found"):
            method(_feed(exe))
    with pytest.raises(lw.ArgumentError, match="must have shape"):     # inputs are checked first
        exe.run({n: np.zeros((1,) * len(s), d) for n, s, d in exe.inputs})


@pytest.mark.parametrize("name, precision", [("small_cnn", "fp32"), ("encoder", "fp32"), ("tensor_core_cnn", "tf32")])
def test_gpu_schedules_of_the_network_emulated_on_the_cpu(name, precision, emulate):
    """Each kernel: the op library's CUDA schedule, lowered for cuda (so it is legal there), its
    thread loops run serially on the CPU; the network's outputs must match onnxruntime.  With
    tf32, the tensor-core schedules (padding included) emulated: exact fp32 (fp16's differ in the
    reduction's split only: tests/backends/cuda/test_tensor_cores.py runs them kernel by kernel)."""
    from loopweave.nn_ops.compile import with_precision
    model = MODELS[name]()
    plan = build_kernels(lw.from_onnx(model), with_precision(resolve_target("cuda"), precision), False,
                         build_fn=lambda s, args, _name: emulate(s, args))
    exe = plan.cpu_executable(resolve_target("llvm"))
    feed = _feed(exe)
    got = exe.run(feed)
    for a, b in zip(got, _ort(model, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_network_on_the_gpu_matches_onnxruntime(compiled):
    model, exe = compiled
    feed = _feed(exe, seed=1)
    for a, b in zip(exe.run(feed), _ort(model, feed)):
        np.testing.assert_allclose(a, b, rtol=1e-3, atol=1e-3)
    assert exe.time(feed) > 0
    profile = exe.profile(feed, repeat=2)
    assert [name for name, _ in profile] == [c.name for c in exe.calls] and all(t > 0 for _, t in profile)



@pytest.mark.gpu
def test_graph_replay_matches_launches_one_by_one(compiled):
    """The captured CUDA graph computes what the kernels launched one at a time compute, and a
    second run on new inputs (the graph replayed) is not stale."""
    model, exe = compiled
    assert exe.cuda_graph
    for seed in (2, 3):
        feed = _feed(exe, seed=seed)
        with_graph = exe.run(feed)
        assert exe._device["graph"] is not None          # every kernel of these models is capturable
        exe.cuda_graph = False
        try:
            one_by_one = exe.run(feed)
        finally:
            exe.cuda_graph = True
        for a, b, c in zip(with_graph, one_by_one, _ort(model, feed)):
            np.testing.assert_array_equal(a, b)
            np.testing.assert_allclose(a, c, rtol=1e-3, atol=1e-3)


@pytest.mark.gpu
def test_device_arrays_in_and_out(compiled):
    from loopweave.backends.cuda.ndarray import DeviceArray
    model, exe = compiled
    feed = _feed(exe, seed=4)
    on_device = {n: lw.device_array(a) for n, a in feed.items()}
    outs = exe.run(on_device, device_outputs=True)
    assert all(isinstance(o, DeviceArray) for o in outs)
    for a, b in zip(outs, _ort(model, feed)):
        np.testing.assert_allclose(a.numpy(), b, rtol=1e-3, atol=1e-3)
    name, shape, dtype = exe.inputs[0]
    with pytest.raises(lw.ArgumentError, match=name):
        exe.run({**on_device, name: lw.device_array(np.zeros((1,) * len(shape), dtype))})


def test_launches_are_marshalled_once_per_module(compiled):
    """Without a GPU: a kernel module's host program flattens to launches with fixed grids and
    arguments (what the network captures as a graph); its intermediates are allocated once and
    handed to the caller."""
    from loopweave.backends.cuda import module as cuda_module
    _, exe = compiled
    for m in exe.modules.values():
        m._functions = {name: object() for name in m._kernels}      # stand-ins: nothing is launched
        pointers = [4096 * (k + 1) for k in range(len(m.params))]
        drv = _CountingAllocator()
        steps, owned = m.prepared_launches(drv, pointers, {})
        assert len(owned) == len(drv.sizes) and steps and all(len(p.grid) == 3 and len(p.block) == 3 for p in steps)
        known = set(pointers) | set(owned)
        assert all(a.value in known for p in steps for a in p.args if isinstance(a, ctypes.c_uint64))
        m._functions = {}
    A = lw.placeholder((64, 64), name="A")
    B = lw.compute((64, 64), lambda i, j: A[i, j] * 2, name="B")
    C = lw.compute((64, 64), lambda i, j: B[j, i] + 1, name="C")
    s = lw.create_schedule(C)
    for t in (B, C):
        bx, tx = s[t].split(s[t].op.axis[0], factor=16)
        s[t].bind(bx, lw.thread_axis("blockIdx.x"))
        s[t].bind(tx, lw.thread_axis("threadIdx.x"))
    f = lw.build(s, [A, C], target="cuda")
    f._functions = {name: object() for name in f._kernels}
    assert "allocate(" in f.get_source("lowered")        # B lives between the two kernels
    drv = _CountingAllocator()
    steps, owned = f.prepared_launches(drv, [1 << 12, 1 << 13], {})
    assert isinstance(f, cuda_module.CudaModule) and owned == [1 << 20] and drv.sizes == [64 * 64 * 4]
    assert len(steps) == 2 and steps[0].args[1].value == 1 << 20     # the first kernel writes B
    assert steps[1].args[0].value == 1 << 20            # the second kernel reads the buffer the first wrote


class _CountingAllocator:
    def __init__(self):
        self.sizes = []

    def alloc(self, nbytes):
        self.sizes.append(nbytes)
        return 1 << 20


def test_kernels_with_the_same_device_code_but_other_shapes_stay_apart():
    """Two depthwise convolutions that differ only in their channel count (384 and 576 at 14x14)
    have the same CUDA C (the count is only in the launch grid); a network must still run each
    with its own module (sharing one symbol ran the 384-channel kernel for both)."""
    from loopweave.nn_ops.ops.conv2d import conv2d
    from loopweave import nn_ops
    symbols = {}
    for c in (384, 576):
        X, W = lw.placeholder((1, c, 14, 14), name="X"), lw.placeholder((c, 1, 3, 3), name="W")
        Y = conv2d(X, W, 1, 1, groups=c)
        f = lw.build(nn_ops.schedule(Y, "cuda"), [X, W, Y], target="cuda:sm_90")
        symbols[c] = (f.symbol, f.get_source("cuda"))
    assert symbols[384][1] == symbols[576][1]          # the device code alone does not tell them apart
    assert symbols[384][0] != symbols[576][0]


def test_cuda_convolutions_become_implicit_gemms_where_measured_faster():
    """3x3 convolutions always; 1x1 ones only for several images (direct was faster at batch 1)."""
    from loopweave.nn_ops.network.passes import optimize
    from loopweave.nn_ops.testing.model_zoo import mobilenet_v2
    for batch, pointwise in ((1, "conv2d"), (2, "conv2d_gemm")):
        g = optimize(lw.from_onnx(mobilenet_v2(batch=batch, size=32)), "cuda")
        kinds = {}
        for node in g.nodes:
            if node.op_type in ("conv2d", "conv2d_gemm") and node.attrs.get("groups", 1) == 1:
                kernel = tuple(node.attrs.get("kernel") or g.shape(node.inputs[1])[2:])
                kinds.setdefault(kernel, set()).add(node.op_type)
        assert kinds[(3, 3)] == {"conv2d_gemm"} and kinds[(1, 1)] == {pointwise}, kinds


def test_tf32_network_runs_its_gemms_on_tensor_cores():
    """``precision="tf32"``: every dense/batch-matmul kernel of the encoder is a warp-tile (mma.sync)
    kernel, the others are as in fp32.  (The values of those schedules: emulated and run on CPU
    threads kernel by kernel in tests/backends/cuda/test_tensor_cores.py.)"""
    exe = lw.compile(lw.from_onnx(transformer_encoder(layers=1)), target="cuda", progress=False, precision="tf32")
    sources = {c.name: exe.sources("cuda")[c.symbol] for c in exe.calls}
    gemms = [name for name in sources if "matmul" in name or "dense" in name]
    assert len(gemms) == 5 and all("lw_mma_m16n8k8_tf32(" in sources[name] for name in gemms)   # by name
    assert not any("mma" in src for name, src in sources.items() if name not in gemms)
    assert exe.target.precision == "tf32" and "tf32 matmuls" in str(exe.target)
    exe = lw.compile(lw.from_onnx(_tensor_core_cnn()), target="cuda", progress=False, precision="tf32")
    on_tensor_cores = [c for c in exe.calls if "lw_mma_m16n8k8_tf32(" in exe.sources("cuda")[c.symbol]]
    # every conv, each padded (its epilogue a kernel of its own); not the classifier
    assert [c.name for c in on_tensor_cores] == ["conv2d_gemm_relu", "conv2d_gemm_add_relu", "conv2d_gemm",
                                                 "conv2d_gemm_relu"], [c.name for c in exe.calls]
    assert all(len(exe.modules[c.symbol]._kernels) == 2 for c in on_tensor_cores)
    exe = lw.compile(lw.from_onnx(_tensor_core_cnn()), target="cuda", progress=False, precision="fp16")
    assert sum("lw_mma_m16n8k16_f16(" in exe.sources("cuda")[c.symbol] for c in exe.calls) == 4


def test_precision_is_checked_before_compiling():
    graph = lw.from_onnx(small_cnn(batch=1, size=8))
    for target, precision, error, match in (
            ("cuda", "bf16", lw.ArgumentError, "use 'fp32'"),
            ("llvm", "fp16", lw.BuildError, "is for target 'cuda'"),
            ("llvm", "tf32", lw.BuildError, "is for target 'cuda'"),
            ("cuda:sm_75", "tf32", lw.BuildError, r"sm_80 or newer\), but the code is compiled for sm_75")):
        with pytest.raises(error, match=match):
            lw.compile(graph, target=target, precision=precision, progress=False)


@pytest.mark.gpu
@pytest.mark.parametrize("precision", ["tf32", "fp16"])
def test_tensor_core_network_on_the_gpu_matches_onnxruntime(precision):
    """The tensor cores for real: tf32 / fp16 products (10 mantissa bits) against onnxruntime's fp32."""
    model = _tensor_core_cnn()
    exe = lw.compile(lw.from_onnx(model), target="cuda", progress=False, precision=precision)
    feed = _feed(exe, seed=5)
    for a, b in zip(exe.run(feed), _ort(model, feed)):
        np.testing.assert_allclose(a, b, rtol=2e-2, atol=2e-2)
