"""Device arrays and DLPack.  The capsule code is checked on the CPU with numpy (both directions);
everything that allocates GPU memory is marked ``gpu``."""
import gc

import numpy as np
import pytest

import loopweave as lw
from loopweave.backends.cuda import dlpack


class _Exporter:
    """A CPU tensor exported through loopweave's capsule code."""

    def __init__(self, array):
        self.array = array

    def __dlpack__(self, stream=None):
        return dlpack.export_capsule(self.array.ctypes.data, self.array.shape, self.array.dtype.name, (1, 0),
                                     self.array)

    def __dlpack_device__(self):
        return (1, 0)


@pytest.mark.parametrize("dtype", ["float32", "float64", "int8", "int32", "int64", "uint8", "bool"])
def test_export_is_read_by_numpy_without_copy(dtype):
    a = (np.arange(24).reshape(2, 3, 4) % 5).astype(dtype)
    b = np.from_dlpack(_Exporter(a))
    assert b.dtype == a.dtype and b.shape == a.shape
    assert b.ctypes.data == a.ctypes.data
    np.testing.assert_array_equal(a, b)


def test_exported_tensor_is_released_by_consumer_and_by_unconsumed_capsule():
    a = np.ones((3, 4), "float32")
    before = len(dlpack._live)
    b = np.from_dlpack(_Exporter(a))
    assert len(dlpack._live) == before + 1
    del b
    gc.collect()
    assert len(dlpack._live) == before
    capsule = _Exporter(a).__dlpack__()
    assert len(dlpack._live) == before + 1
    del capsule
    gc.collect()
    assert len(dlpack._live) == before


def test_import_reads_a_producers_capsule():
    a = np.arange(12, dtype="int16").reshape(3, 4)
    t = dlpack.import_capsule(a.__dlpack__())
    assert t.device == (1, 0) and t.dtype == np.int16 and t.shape == (3, 4) and t.data == a.ctypes.data


def test_import_refuses_non_contiguous_tensors():
    a = np.zeros((4, 6), "float32")[:, ::2]
    with pytest.raises(lw.ArgumentError, match=r"strides \(6, 2\) is not C-contiguous"):
        dlpack.import_capsule(a.__dlpack__())


def test_from_dlpack_of_cpu_tensors_gives_numpy():
    a = np.arange(6, dtype="float32")
    assert lw.from_dlpack(a) is a
    b = lw.from_dlpack(_Exporter(a))
    assert isinstance(b, np.ndarray) and b.ctypes.data == a.ctypes.data
    with pytest.raises(lw.ArgumentError, match=r"from_dlpack needs an object with __dlpack__"):
        lw.from_dlpack([1, 2, 3])


# --------------------------------------------------------------------------- on a GPU

def _scale_kernel():
    n = lw.var("n")
    A = lw.placeholder((n,), name="A")
    C = lw.compute((n,), lambda i: A[i] * 3.0 + 1.0, name="C")
    s = lw.create_schedule(C)
    o, i = s[C].split(C.op.axis[0], factor=128)
    s[C].bind(o, lw.thread_axis("blockIdx.x"))
    s[C].bind(i, lw.thread_axis("threadIdx.x"))
    return lw.build(s, [A, C], target="cuda")


@pytest.mark.gpu
def test_device_array_round_trip_and_in_place_call():
    a = np.random.default_rng(0).standard_normal(1000).astype("float32")
    da = lw.device_array(a)
    assert da.shape == (1000,) and da.dtype == np.float32
    np.testing.assert_array_equal(da.numpy(), a)
    dc = lw.DeviceArray.empty((1000,), "float32")
    f = _scale_kernel()
    f(da, dc)
    # NVRTC contracts a * 3 + 1 into one fma (one rounding, numpy rounds twice): near the cancellation
    # at a = -1/3 the two differ by an ulp of the terms, so compare with the exact value at that scale
    np.testing.assert_allclose(dc.numpy(), a.astype(np.float64) * 3 + 1, rtol=1e-6, atol=1e-6)
    assert f.time(da, dc) > 0


@pytest.mark.gpu
def test_device_array_shape_checks():
    f = _scale_kernel()
    with pytest.raises(lw.ArgumentError, match=r"argument 'C' has shape \(999,\), but dimension 0 must be n = 1000"):
        f(lw.device_array(np.zeros(1000, "float32")), lw.DeviceArray.empty(999, "float32"))
    with pytest.raises(lw.ArgumentError, match=r"argument 'A' must have dtype float32, got float64"):
        f(lw.device_array(np.zeros(1000)), lw.DeviceArray.empty(1000, "float32"))


@pytest.mark.gpu
def test_device_array_exports_a_cuda_capsule():
    da = lw.device_array(np.arange(8, dtype="float32"))
    assert da.__dlpack_device__() == (dlpack.KDL_CUDA, da.device_id)
    t = dlpack.import_capsule(da.__dlpack__())
    assert t.device == (dlpack.KDL_CUDA, da.device_id) and t.data == da.ptr and t.shape == (8,)


@pytest.mark.gpu
def test_torch_and_cupy_tensors_are_used_in_place():
    f = _scale_kernel()
    used = 0
    for name in ("torch", "cupy"):
        try:
            lib = __import__(name)
        except ImportError:
            continue
        if name == "torch":
            x = lib.arange(1000, dtype=lib.float32, device="cuda")
            y = lib.empty_like(x)
            f(x, y)
            np.testing.assert_allclose(y.cpu().numpy(), x.cpu().numpy() * 3 + 1, rtol=1e-6)
            with pytest.raises(lw.ArgumentError, match=r"not C-contiguous"):
                f(lib.zeros(2000, device="cuda")[::2], y)
        else:
            x = lib.arange(1000, dtype=lib.float32)
            y = lib.empty_like(x)
            f(x, y)
            np.testing.assert_allclose(lib.asnumpy(y), lib.asnumpy(x) * 3 + 1, rtol=1e-6)
        used += 1
    if not used:
        pytest.skip("neither torch nor cupy is installed")


class _CudaArrayInterface:
    """Exposes __cuda_array_interface__ (and __dlpack__, recording that it was the one used)."""

    def __init__(self, shape=(4, 3), strides=None, stream=None, typestr="<f4"):
        self.cai = {"data": (0x7000, False), "shape": shape, "typestr": typestr, "strides": strides, "version": 3}
        if stream is not None:
            self.cai["stream"] = stream
        self.dlpack_calls = 0

    @property
    def __cuda_array_interface__(self):
        return self.cai

    def __dlpack__(self, stream=None):
        self.dlpack_calls += 1
        return "capsule"

    def __dlpack_device__(self):
        return (dlpack.KDL_CUDA, 0)


@pytest.mark.parametrize("case, fast", [({}, True), ({"strides": (12, 4)}, True), ({"stream": 1}, True),
                                        ({"stream": 0x5555}, False), ({"strides": (4, 16)}, False),
                                        ({"typestr": ">f4"}, False)])
def test_cuda_array_interface_is_used_only_where_exact(monkeypatch, case, fast):
    """Dense tensors on a default stream are viewed through the interface (cheap); a side stream, strides
    or a foreign byte order go through DLPack, which orders streams and refuses what it must."""
    from loopweave.backends.cuda import ndarray
    monkeypatch.setattr(ndarray, "get_driver", lambda: type("D", (), {"device_index": 0})())
    monkeypatch.setattr(ndarray.dlpack, "import_capsule",
                        lambda capsule: type("T", (), {"data": 0x9000, "shape": (4, 3), "dtype": "float32"})())
    obj = _CudaArrayInterface(**case)
    view = ndarray.as_device_array(obj)
    assert (obj.dlpack_calls == 0) == fast
    assert view.ptr == (0x7000 if fast else 0x9000) and view.shape == (4, 3) and view.dtype == np.float32


@pytest.mark.gpu
def test_torch_tensors_are_viewed_like_their_cuda_array_interface():
    """The torch accessor path gives the view the interface path gives, and steps aside for what
    it does not cover (a side stream, strides, a dtype loopweave has no name for)."""
    torch = pytest.importorskip("torch")
    from loopweave.backends.cuda import ndarray
    x = torch.arange(12, dtype=torch.float32, device="cuda").reshape(3, 4)[1:]
    view = ndarray._torch_view(x)
    cai = x.__cuda_array_interface__
    assert (view.ptr, view.shape, view.dtype) == (cai["data"][0], tuple(cai["shape"]), np.dtype(cai["typestr"]))
    assert ndarray._torch_view(x.t()) is None                       # strided
    assert ndarray._torch_view(x.to(torch.bfloat16)) is None        # no numpy name
    assert ndarray._torch_view(x.cpu()) is None
    side = torch.cuda.Stream()
    with torch.cuda.stream(side):
        assert ndarray._torch_view(x) is None                       # DLPack orders the streams
    f = _scale_kernel()
    y = torch.empty(1000, device="cuda")
    f(torch.arange(1000, dtype=torch.float32, device="cuda"), y)
    np.testing.assert_allclose(y.cpu().numpy(), np.arange(1000) * 3 + 1, rtol=1e-6)


def test_objects_that_are_not_torch_tensors_are_not_viewed_as_torch():
    from loopweave.backends.cuda import ndarray
    assert ndarray._torch_view(_CudaArrayInterface()) is None
    assert ndarray._torch_view(np.zeros(3)) is None
