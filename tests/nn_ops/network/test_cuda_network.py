"""``lw.compile(net, target="cuda")``: every kernel of a network built with the op library's CUDA
schedules.  Here (no GPU needed): the CUDA C of every kernel compiles to PTX, the schedules'
values are checked by running the whole network with its GPU kernels emulated on the CPU,
and running without a GPU is a clean error.  On a GPU (marker ``gpu``): against onnxruntime."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")

import loopweave as lw  # noqa: E402
from loopweave.nn_ops.network.cuda_executable import CudaExecutable  # noqa: E402
from loopweave.nn_ops.network.executable import build_kernels  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import small_cnn, transformer_encoder  # noqa: E402
from loopweave.target import resolve_target  # noqa: E402

MODELS = {"small_cnn": lambda: small_cnn(batch=2, size=16), "encoder": lambda: transformer_encoder(layers=1)}


def _feed(exe, seed=0):
    rng = np.random.default_rng(seed)
    return {n: rng.standard_normal(s).astype(d) for n, s, d in exe.inputs}


def _ort(model, feed):
    return ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, feed)


@pytest.fixture(scope="module", params=sorted(MODELS))
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


@pytest.mark.parametrize("name", sorted(MODELS))
def test_gpu_schedules_of_the_network_emulated_on_the_cpu(name, emulate):
    """Each kernel: the op library's CUDA schedule, lowered for cuda (so it is legal there), its
    thread loops run serially on the CPU; the network's outputs must match onnxruntime."""
    model = MODELS[name]()
    plan = build_kernels(lw.from_onnx(model), resolve_target("cuda"), False,
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

