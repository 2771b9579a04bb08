"""DLPack: share arrays with CuPy, PyTorch, JAX and numpy without copies.

The legacy ``DLManagedTensor`` capsule protocol (``"dltensor"``), which every producer
supports: :func:`export_capsule` wraps memory that loopweave owns so that a consumer
(``torch.from_dlpack``, ``cupy.from_dlpack``) can use it, and :func:`import_capsule`
reads a producer's capsule, taking over its deleter.  Only C-contiguous tensors are
accepted (strides NULL or row-major), as the kernels index buffers densely.
"""
from __future__ import annotations

import ctypes
from typing import Dict, Tuple

import numpy as np

from ...errors import ArgumentError

KDL_CPU, KDL_CUDA = 1, 2
_CODES = {"i": 0, "u": 1, "f": 2, "b": 6}
_DTYPES = {(0, 8): "int8", (0, 16): "int16", (0, 32): "int32", (0, 64): "int64", (1, 8): "uint8",
           (2, 16): "float16", (2, 32): "float32", (2, 64): "float64", (6, 8): "bool", (1, 1): "bool"}
_NAME = b"dltensor"
_USED = b"used_dltensor"


class DLDevice(ctypes.Structure):
    _fields_ = [("device_type", ctypes.c_int32), ("device_id", ctypes.c_int32)]


class DLDataType(ctypes.Structure):
    _fields_ = [("code", ctypes.c_uint8), ("bits", ctypes.c_uint8), ("lanes", ctypes.c_uint16)]


class DLTensor(ctypes.Structure):
    _fields_ = [("data", ctypes.c_void_p), ("device", DLDevice), ("ndim", ctypes.c_int32), ("dtype", DLDataType),
                ("shape", ctypes.POINTER(ctypes.c_int64)), ("strides", ctypes.POINTER(ctypes.c_int64)),
                ("byte_offset", ctypes.c_uint64)]


class DLManagedTensor(ctypes.Structure):
    pass


_DELETER = ctypes.CFUNCTYPE(None, ctypes.POINTER(DLManagedTensor))
DLManagedTensor._fields_ = [("dl_tensor", DLTensor), ("manager_ctx", ctypes.c_void_p), ("deleter", _DELETER)]

_api = ctypes.pythonapi
_api.PyCapsule_New.restype = ctypes.py_object
_api.PyCapsule_New.argtypes = [ctypes.c_void_p, ctypes.c_char_p, ctypes.c_void_p]
_api.PyCapsule_GetPointer.restype = ctypes.c_void_p
_api.PyCapsule_GetPointer.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_SetName.restype = ctypes.c_int
_api.PyCapsule_SetName.argtypes = [ctypes.py_object, ctypes.c_char_p]
_api.PyCapsule_IsValid.restype = ctypes.c_int
_api.PyCapsule_IsValid.argtypes = [ctypes.c_void_p, ctypes.c_char_p]
# the same C function, taking the capsule as a raw pointer (inside the capsule's destructor)
_get_pointer_raw = ctypes.PYFUNCTYPE(ctypes.c_void_p, ctypes.c_void_p, ctypes.c_char_p)(
    ("PyCapsule_GetPointer", ctypes.pythonapi))

_CAPSULE_DESTRUCTOR = ctypes.CFUNCTYPE(None, ctypes.c_void_p)

# exported tensors still referenced by a consumer or an unconsumed capsule: address -> (struct, shape, owner)
_live: Dict[int, tuple] = {}


def _release(managed_ptr) -> None:
    _live.pop(ctypes.cast(managed_ptr, ctypes.c_void_p).value, None)


_deleter = _DELETER(_release)


def _capsule_destructor(capsule_ptr) -> None:
    """An unconsumed capsule (still named "dltensor") frees its tensor; a consumed one was handed over."""
    if _api.PyCapsule_IsValid(capsule_ptr, _NAME):
        _live.pop(_get_pointer_raw(capsule_ptr, _NAME), None)


_destructor = _CAPSULE_DESTRUCTOR(_capsule_destructor)


def dtype_code(dtype: str) -> Tuple[int, int]:
    dt = np.dtype(dtype)
    if dt.name == "bool":
        return 6, 8
    return _CODES[dt.kind], dt.itemsize * 8


def export_capsule(data: int, shape, dtype: str, device: Tuple[int, int], owner) -> object:
    """A "dltensor" capsule for C-contiguous memory at ``data``; ``owner`` is kept alive until the consumer is done."""
    managed = DLManagedTensor()
    ndim = len(shape)
    shape_arr = (ctypes.c_int64 * max(1, ndim))(*shape)
    code, bits = dtype_code(dtype)
    managed.dl_tensor = DLTensor(ctypes.c_void_p(data), DLDevice(*device), ndim, DLDataType(code, bits, 1),
                                 ctypes.cast(shape_arr, ctypes.POINTER(ctypes.c_int64)), None, 0)
    managed.manager_ctx = None
    managed.deleter = _deleter
    address = ctypes.addressof(managed)
    _live[address] = (managed, shape_arr, owner)
    return _api.PyCapsule_New(ctypes.c_void_p(address), _NAME, ctypes.cast(_destructor, ctypes.c_void_p))


class ImportedTensor:
    """A producer's tensor taken from its capsule; calls the producer's deleter when collected."""

    def __init__(self, capsule):
        address = _api.PyCapsule_GetPointer(capsule, _NAME)
        if not address:
            raise ArgumentError("the object's __dlpack__() did not return a 'dltensor' capsule")
        self._managed = DLManagedTensor.from_address(address)
        self._capsule = capsule
        _api.PyCapsule_SetName(capsule, _USED)   # we own it now: its deleter is ours to call
        t = self._managed.dl_tensor
        self.device = (t.device.device_type, t.device.device_id)
        key = (t.dtype.code, t.dtype.bits)
        if t.dtype.lanes != 1 or key not in _DTYPES:
            raise ArgumentError(f"DLPack dtype (code {t.dtype.code}, {t.dtype.bits} bits, {t.dtype.lanes} lanes) "
                                f"is not supported; use one of {', '.join(sorted(set(_DTYPES.values())))}")
        self.dtype = np.dtype(_DTYPES[key])
        self.shape = tuple(int(t.shape[k]) for k in range(t.ndim))
        self.data = (t.data or 0) + int(t.byte_offset)
        if t.strides:
            expected = 1
            for k in reversed(range(t.ndim)):
                if self.shape[k] != 1 and int(t.strides[k]) != expected:
                    raise ArgumentError(f"a DLPack tensor of shape {self.shape} with strides "
                                        f"{tuple(int(t.strides[j]) for j in range(t.ndim))} is not C-contiguous; "
                                        f"make it contiguous first (e.g. .contiguous() in PyTorch)")
                expected *= self.shape[k]

    def __del__(self):
        managed = getattr(self, "_managed", None)
        if managed is not None and managed.deleter:
            managed.deleter(ctypes.pointer(managed))
            self._managed = None


def import_capsule(capsule) -> ImportedTensor:
    return ImportedTensor(capsule)
