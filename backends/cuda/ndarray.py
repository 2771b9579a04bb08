"""Arrays in GPU memory: ``lw.device_array(np_array, "cuda")`` and ``lw.from_dlpack(obj)``.

A :class:`DeviceArray` is a dense, C-contiguous block of device memory with a shape
and a dtype, either owned (allocated here, freed when collected) or borrowed from
another library through DLPack (its producer's deleter runs when collected).  CUDA
modules use device arrays in place; numpy arrays passed to them are copied over and
back for convenience.
"""
from __future__ import annotations

import math
import sys

import numpy as np

from ...errors import ArgumentError
from . import dlpack
from .driver import get_driver


class DeviceArray:
    def __init__(self, ptr: int, shape, dtype, device_id: int = 0, owned: bool = True, keepalive=None):
        self.ptr = int(ptr)
        self.shape = tuple(int(s) for s in shape)
        self.dtype = np.dtype(dtype)
        self.device_id = device_id
        self.size = math.prod(self.shape)
        self.nbytes = self.size * self.dtype.itemsize
        self._owned = owned
        self._keepalive = keepalive

    @classmethod
    def empty(cls, shape, dtype="float32") -> "DeviceArray":
        shape = (shape,) if isinstance(shape, int) else tuple(shape)
        drv = get_driver()
        nbytes = math.prod(shape) * np.dtype(dtype).itemsize
        return cls(drv.alloc(nbytes), shape, dtype, drv.device_index)

    @property
    def ndim(self) -> int:
        return len(self.shape)

    def numpy(self) -> np.ndarray:
        """A host copy."""
        out = np.empty(self.shape, self.dtype)
        if self.nbytes:
            drv = get_driver()
            drv.synchronize()
            drv.copy_to_host(out.ctypes.data, self.ptr, self.nbytes)
        return out

    def copy_from(self, array: np.ndarray) -> None:
        """Overwrite with the contents of a host array of the same shape and dtype."""
        array = np.ascontiguousarray(array)
        if array.shape != self.shape or array.dtype != self.dtype:
            raise ArgumentError(f"copy_from: expected a {self.dtype} array of shape {self.shape}, "
                                f"got {array.dtype} {array.shape}")
        if self.nbytes:
            get_driver().copy_to_device(self.ptr, array.ctypes.data, self.nbytes)

    def __dlpack__(self, stream=None, **_):
        # kernels run on the legacy default stream, which synchronises with the consumer's streams
        return dlpack.export_capsule(self.ptr, self.shape, self.dtype.name, (dlpack.KDL_CUDA, self.device_id), self)

    def __dlpack_device__(self):
        return (dlpack.KDL_CUDA, self.device_id)

    def __repr__(self) -> str:
        return f"DeviceArray(shape={self.shape}, dtype={self.dtype.name}, cuda:{self.device_id})"

    def __del__(self):
        if getattr(self, "_owned", False) and self.ptr:
            try:
                get_driver().free(self.ptr)
            except Exception:  # interpreter shutdown: the context is gone with the process
                pass
            self.ptr = 0


def device_array(array, target: str = "cuda") -> DeviceArray:
    """A copy of ``array`` (numpy, or anything ``np.asarray`` takes) in GPU memory."""
    if target != "cuda":
        raise ArgumentError(f"device_array: only target 'cuda' has device memory, got {target!r}")
    host = np.ascontiguousarray(array)
    out = DeviceArray.empty(host.shape, host.dtype)
    out.copy_from(host)
    return out


def from_dlpack(obj):
    """A loopweave view of another library's tensor (CuPy, PyTorch, JAX, numpy), without a copy.

    CUDA tensors become :class:`DeviceArray` s; CPU tensors become numpy arrays.
    """
    if isinstance(obj, (DeviceArray, np.ndarray)):
        return obj
    if not hasattr(obj, "__dlpack__") or not hasattr(obj, "__dlpack_device__"):
        raise ArgumentError(f"from_dlpack needs an object with __dlpack__ and __dlpack_device__, "
                            f"got {type(obj).__name__}")
    device_type, device_id = obj.__dlpack_device__()
    if int(device_type) == dlpack.KDL_CPU:
        return np.from_dlpack(obj)
    if int(device_type) != dlpack.KDL_CUDA:
        raise ArgumentError(f"from_dlpack: tensors on DLPack device type {device_type} are not supported "
                            f"(only CPU and CUDA)")
    try:
        capsule = obj.__dlpack__(stream=1)   # 1: the legacy default stream, on which loopweave launches
    except TypeError:
        capsule = obj.__dlpack__()
    tensor = dlpack.import_capsule(capsule)
    return DeviceArray(tensor.data, tensor.shape, tensor.dtype, int(device_id), owned=False, keepalive=tensor)


_LEGACY_STREAMS = (None, 0, 1, 2)   # CUDA Array Interface: no stream, legacy default, per-thread default


def as_device_array(obj):
    """``from_dlpack(obj)``, through ``__cuda_array_interface__`` where that is exact and cheaper.

    On an H100, a 256^3 matmul called with three torch tensors took 200 us per call
    through DLPack and 173 us through the interface (two machine starts; 95 us with
    DeviceArrays, 43 us of kernel).  A dense tensor whose interface names no stream, or a default
    stream (which loopweave's launches on the legacy default stream are ordered with), is
    viewed from the interface's pointer; anything else (strided, a side stream, an
    unknown type) goes through DLPack, which makes the producer's stream wait.
    """
    if isinstance(obj, (DeviceArray, np.ndarray)):
        return obj
    view = _torch_view(obj)
    if view is not None:
        return view
    try:
        cai = obj.__cuda_array_interface__
        ptr, _ = cai["data"]
        shape, dtype = tuple(cai["shape"]), np.dtype(cai["typestr"])
        strides, stream = cai.get("strides"), cai.get("stream")
    except Exception:   # not a CUDA array, or a producer that refuses (CPU tensor): the general path
        return from_dlpack(obj)
    if stream not in _LEGACY_STREAMS or dtype.byteorder == ">" or \
            (strides is not None and tuple(strides) != _dense_strides(shape, dtype.itemsize)):
        return from_dlpack(obj)
    device_id = get_driver().device_index
    return DeviceArray(ptr, shape, dtype, device_id, owned=False, keepalive=obj)


_TORCH_DTYPES = frozenset({"float32", "float64", "float16", "int8", "int16", "int32", "int64", "uint8", "bool"})


def _torch_view(obj):
    """A dense CUDA ``torch.Tensor`` on loopweave's device whose current stream is the legacy
    default, viewed from its own accessors; None for anything else (the general paths decide).

    What the ``__cuda_array_interface__`` path checks, without building the interface's dict in
    Python (torch's property costs tens of microseconds per tensor, measured on an H100:
    ``python -m benchmarks.cuda_matmul --host``); ``torch._C._cuda_getCurrentRawStream`` is the stream the interface
    reports, read without making a Stream object."""
    torch = sys.modules.get("torch")
    if torch is None or type(obj) is not getattr(torch, "Tensor", None) or not obj.is_cuda:
        return None
    current_stream = getattr(torch._C, "_cuda_getCurrentRawStream", None)
    dtype = str(obj.dtype).rpartition(".")[2]       # torch.float32 -> float32, numpy's name too
    if current_stream is None or dtype not in _TORCH_DTYPES or not obj.is_contiguous():
        return None
    device_id = obj.get_device()
    drv = get_driver()
    if device_id != drv.device_index or current_stream(device_id) != 0:
        return None
    return DeviceArray(obj.data_ptr(), obj.shape, dtype, device_id, owned=False, keepalive=obj)


def _dense_strides(shape, itemsize: int) -> tuple:
    strides, step = [], itemsize
    for extent in reversed(shape):
        strides.append(step)
        step *= max(1, extent)
    return tuple(reversed(strides))


def _address_range(a) -> tuple:
    return (a.ptr, a.ptr + a.nbytes)


def overlaps(a: DeviceArray, b: DeviceArray) -> bool:
    (a0, a1), (b0, b1) = _address_range(a), _address_range(b)
    return a.nbytes > 0 and b.nbytes > 0 and a0 < b1 and b0 < a1


__all__ = ["DeviceArray", "as_device_array", "device_array", "from_dlpack", "overlaps"]
