"""The CUDA driver API through ctypes: context, memory, modules, launches, events.

``libcuda.so`` comes with the NVIDIA driver, not with a toolkit or a wheel, so its
absence (or ``cuInit`` failing) means "no GPU here": :func:`get_driver` raises
``BuildError("no CUDA driver/GPU found ...")`` and :func:`gpu_available` answers
False, which the tests use to skip.  One primary context per process, on device 0
(or ``$LOOPWEAVE_CUDA_DEVICE``), made current on the calling thread before each use.
"""
from __future__ import annotations

import ctypes
import os
import threading
from functools import lru_cache
from typing import Optional

from ...errors import BuildError

CUdeviceptr = ctypes.c_uint64
_ATTR_CC_MAJOR, _ATTR_CC_MINOR = 75, 76
_ATTR_MAX_SHARED_PER_BLOCK = 8
_CAPTURE_THREAD_LOCAL = 1    # CU_STREAM_CAPTURE_MODE_THREAD_LOCAL


class CudaError(BuildError):
    """A CUDA driver call failed."""


class PreparedLaunch:
    """One kernel launch with its grid, block and argument array marshalled for ``cuLaunchKernel``."""
    __slots__ = ("fn", "grid", "block", "args", "params")

    def __init__(self, fn, grid, block, args: list):
        self.fn = fn
        self.grid = [ctypes.c_uint(int(g)) for g in grid]
        self.block = [ctypes.c_uint(int(b)) for b in block]
        self.args = args     # kept alive: params points into them
        self.params = (ctypes.c_void_p * max(1, len(args)))(*[ctypes.addressof(a) for a in args])


class Driver:
    def __init__(self, lib: ctypes.CDLL, device_index: int):
        self.lib = lib
        self._check(lib.cuInit(0), "cuInit")
        count = ctypes.c_int()
        self._check(lib.cuDeviceGetCount(ctypes.byref(count)), "cuDeviceGetCount")
        if count.value == 0:
            raise CudaError("no CUDA driver/GPU found: the driver reports no CUDA device")
        if not 0 <= device_index < count.value:
            raise CudaError(f"CUDA device {device_index} does not exist ({count.value} device(s))")
        self.device_index = device_index
        self.device = ctypes.c_int()
        self._check(lib.cuDeviceGet(ctypes.byref(self.device), device_index), "cuDeviceGet")
        self.context = ctypes.c_void_p()
        self._check(lib.cuDevicePrimaryCtxRetain(ctypes.byref(self.context), self.device), "cuDevicePrimaryCtxRetain")
        self.make_current()
        self.lock = threading.Lock()

    # ---------------------------------------------------------------- basics
    def _check(self, status: int, what: str):
        if status != 0:
            name, text = ctypes.c_char_p(), ctypes.c_char_p()
            self.lib.cuGetErrorName(status, ctypes.byref(name))
            self.lib.cuGetErrorString(status, ctypes.byref(text))
            detail = f"{(name.value or b'?').decode()}: {(text.value or b'').decode()}"
            raise CudaError(f"CUDA driver call {what} failed with {status} ({detail})")

    def make_current(self):
        self._check(self.lib.cuCtxSetCurrent(self.context), "cuCtxSetCurrent")

    def attribute(self, attr: int) -> int:
        value = ctypes.c_int()
        self._check(self.lib.cuDeviceGetAttribute(ctypes.byref(value), attr, self.device), "cuDeviceGetAttribute")
        return value.value

    @property
    def arch(self) -> str:
        return f"sm_{self.attribute(_ATTR_CC_MAJOR)}{self.attribute(_ATTR_CC_MINOR)}"

    def name(self) -> str:
        buf = ctypes.create_string_buffer(256)
        self._check(self.lib.cuDeviceGetName(buf, 256, self.device), "cuDeviceGetName")
        return buf.value.decode()

    def synchronize(self):
        self.make_current()
        self._check(self.lib.cuCtxSynchronize(), "cuCtxSynchronize")

    # ---------------------------------------------------------------- memory
    def alloc(self, nbytes: int) -> int:
        self.make_current()
        ptr = CUdeviceptr()
        self._check(self.lib.cuMemAlloc_v2(ctypes.byref(ptr), ctypes.c_size_t(max(1, nbytes))), "cuMemAlloc")
        return ptr.value

    def free(self, ptr: int):
        self.make_current()
        self._check(self.lib.cuMemFree_v2(CUdeviceptr(ptr)), "cuMemFree")

    def copy_to_device(self, dst: int, src_host: int, nbytes: int):
        self.make_current()
        self._check(self.lib.cuMemcpyHtoD_v2(CUdeviceptr(dst), ctypes.c_void_p(src_host), ctypes.c_size_t(nbytes)),
                    "cuMemcpyHtoD")

    def copy_to_host(self, dst_host: int, src: int, nbytes: int):
        self.make_current()
        self._check(self.lib.cuMemcpyDtoH_v2(ctypes.c_void_p(dst_host), CUdeviceptr(src), ctypes.c_size_t(nbytes)),
                    "cuMemcpyDtoH")

    # ---------------------------------------------------------------- code
    def load_module(self, image: bytes) -> ctypes.c_void_p:
        """Load PTX (NUL-terminated text) or a cubin; the driver JIT-compiles PTX for this GPU."""
        self.make_current()
        module = ctypes.c_void_p()
        log_size = 1 << 14
        err_log = ctypes.create_string_buffer(log_size)
        options = (ctypes.c_int * 2)(5, 6)   # CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
        values = (ctypes.c_void_p * 2)(ctypes.cast(err_log, ctypes.c_void_p).value, ctypes.c_void_p(log_size).value)
        status = self.lib.cuModuleLoadDataEx(ctypes.byref(module), ctypes.c_char_p(image), 2, options, values)
        if status == 222:   # CUDA_ERROR_UNSUPPORTED_PTX_VERSION
            raise CudaError("the NVIDIA driver is older than the compiler that produced this PTX (a CUDA 13 "
                            "nvcc or NVRTC needs a CUDA 13 driver); pip install 'loopweave[cuda]' (NVRTC 12, "
                            "preferred over nvcc when present) or update the driver")
        if status != 0:
            log = err_log.value.decode(errors="replace")
            try:
                self._check(status, "cuModuleLoadDataEx")
            except CudaError as exc:
                raise CudaError(f"{exc}\n{log}") from None
        return module

    def get_function(self, module, name: str) -> ctypes.c_void_p:
        fn = ctypes.c_void_p()
        self._check(self.lib.cuModuleGetFunction(ctypes.byref(fn), module, name.encode()), "cuModuleGetFunction")
        return fn

    def launch(self, fn, grid, block, args: list, stream=None):
        """Launch ``fn`` with ``args`` (ctypes scalars: c_uint64 pointers, c_int64 sizes) on ``stream``
        (None: the legacy default stream)."""
        self.make_current()
        self.launch_prepared(PreparedLaunch(fn, grid, block, args), stream)

    def launch_prepared(self, launch: "PreparedLaunch", stream=None):
        """Launch with arguments marshalled once (a network replays the same launches every run)."""
        self._check(self.lib.cuLaunchKernel(launch.fn, *launch.grid, *launch.block, ctypes.c_uint(0),
                                            stream if stream is not None else ctypes.c_void_p(0),
                                            launch.params, ctypes.c_void_p(0)), "cuLaunchKernel")

    def copy_device_to_device(self, dst: int, src: int, nbytes: int):
        self.make_current()
        self._check(self.lib.cuMemcpyDtoD_v2(CUdeviceptr(dst), CUdeviceptr(src), ctypes.c_size_t(nbytes)),
                    "cuMemcpyDtoD")

    # ---------------------------------------------------------------- streams and graphs
    def stream(self) -> ctypes.c_void_p:
        """A new blocking stream (it orders with the legacy default stream, where copies and events go)."""
        self.make_current()
        stream = ctypes.c_void_p()
        self._check(self.lib.cuStreamCreate(ctypes.byref(stream), 0), "cuStreamCreate")
        return stream

    def capture_graph(self, stream, work) -> ctypes.c_void_p:
        """Record the launches ``work()`` issues on ``stream`` into an instantiated CUDA graph: one
        ``cuGraphLaunch`` then replays all of them, without a host round trip per kernel."""
        self.make_current()
        self._check(self.lib.cuStreamBeginCapture_v2(stream, _CAPTURE_THREAD_LOCAL), "cuStreamBeginCapture")
        graph = ctypes.c_void_p()
        try:
            work()
        finally:   # end the capture even when a launch failed, so that the stream stays usable
            ended = self.lib.cuStreamEndCapture(stream, ctypes.byref(graph))
        self._check(ended, "cuStreamEndCapture")
        exe = ctypes.c_void_p()
        try:
            self._check(self.lib.cuGraphInstantiateWithFlags(ctypes.byref(exe), graph, ctypes.c_ulonglong(0)),
                        "cuGraphInstantiateWithFlags")
        finally:
            self.lib.cuGraphDestroy(graph)
        return exe

    def launch_graph(self, graph_exec, stream):
        self._check(self.lib.cuGraphLaunch(graph_exec, stream), "cuGraphLaunch")

    def destroy_graph(self, graph_exec):
        self.lib.cuGraphExecDestroy(graph_exec)

    def destroy_stream(self, stream):
        self.lib.cuStreamDestroy_v2(stream)

    # ---------------------------------------------------------------- timing
    def event(self) -> ctypes.c_void_p:
        self.make_current()
        ev = ctypes.c_void_p()
        self._check(self.lib.cuEventCreate(ctypes.byref(ev), 0), "cuEventCreate")
        return ev

    def record(self, ev):
        self._check(self.lib.cuEventRecord(ev, ctypes.c_void_p(0)), "cuEventRecord")

    def elapsed_seconds(self, start, end) -> float:
        self._check(self.lib.cuEventSynchronize(end), "cuEventSynchronize")
        ms = ctypes.c_float()
        self._check(self.lib.cuEventElapsedTime(ctypes.byref(ms), start, end), "cuEventElapsedTime")
        return ms.value / 1e3

    def destroy_event(self, ev):
        self.lib.cuEventDestroy_v2(ev)


_driver: Optional[Driver] = None
_failure: Optional[str] = None
_lock = threading.Lock()


@lru_cache(maxsize=None)
def _load_libcuda() -> Optional[ctypes.CDLL]:
    for name in ("libcuda.so.1", "libcuda.so"):
        try:
            return ctypes.CDLL(name)
        except OSError:
            continue
    return None


def get_driver() -> Driver:
    """The process's driver handle; BuildError with the reason when there is no usable GPU."""
    global _driver, _failure
    with _lock:
        if _driver is not None:
            return _driver
        if _failure is None:
            lib = _load_libcuda()
            if lib is None:
                _failure = "libcuda.so (the NVIDIA driver) is not installed"
            else:
                try:
                    _driver = Driver(lib, int(os.environ.get("LOOPWEAVE_CUDA_DEVICE", "0")))
                    return _driver
                except CudaError as exc:
                    _failure = str(exc)
        raise BuildError(f"no CUDA driver/GPU found ({_failure}); a CUDA module can be built here (f.get_source('cuda'), "
                         f"f.get_source('ptx')) but runs only on a machine with an NVIDIA GPU")


def gpu_available() -> bool:
    try:
        get_driver()
        return True
    except BuildError:
        return False
