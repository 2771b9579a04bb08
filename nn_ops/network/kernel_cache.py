"""Which compiled kernel a fused group became, remembered on disk across processes.

The object cache (``backends/llvm/jit.py``) is keyed by the kernel's symbol, a hash of
its lowered IR, so even a fully cached compile used to schedule and lower every
kernel to learn its symbol (most of ResNet-18's cached compile time).  This cache maps
a group's structural signature (``executable.group_signature``: op types, attributes,
shapes and dtypes of its parameters, scalar constants) plus the target and a
fingerprint of loopweave's own source to that symbol.  A hit whose object is still in
the object cache skips scheduling, lowering and code generation; any change to the
compiler's source changes the fingerprint, so a stale kernel is never reused.  While a
schedule or graph op registered from outside loopweave (a notebook's own
``register_schedule``) is in the tables, the source fingerprint cannot vouch for the
result, and the cache stays out of the way.

A shape-polymorphic kernel (``compile_once/builder.py``) is remembered by its structural key,
the one a saved ``.lwx`` names it by (``lookup_polymorphic``): a cached polymorphic compile of
ResNet-18 lowered every kernel again (20 s of its 35 s cold).

For the GPU the entry is the lowered function itself, as JSON (``lookup_lowered``): a CUDA module is
made from it without scheduling or lowering (before, a second compile of ResNet-18 for cuda took
8.8 s on the GPU machine, its PTX already cached: scheduling and lowering every kernel again).
"""
from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path
from typing import Optional

from ...backends import loaded_objects
from ...backends.disk_cache import read_verified, writable_cache_dir, write_checksummed
from ...backends.llvm import jit
from ...backends.llvm.jit import cached_object, store_object
from ...backends.runtime import Module, ParamSpec
from ...lowering.ir_json import primfunc_from_json, primfunc_to_json
from ..ops.registry import _SCHEDULES
from .op_table import OPS

_fingerprint: Optional[str] = None
_SOURCE_DIRS = ("dsl", "lowering", "backends", "autoschedule", "nn_ops")
_PACKAGE_ROOT = Path(__file__).resolve().parents[2]      # nn_ops/network/kernel_cache.py -> the package


def source_fingerprint() -> str:
    """A hash of every Python file of the compiler (computed once per process)."""
    global _fingerprint
    if _fingerprint is None:
        _fingerprint = jit.source_hash(_PACKAGE_ROOT, _SOURCE_DIRS, top_level=True)
    return _fingerprint


@dataclass
class CachedKernel:
    """A kernel known from an earlier process: what an executable needs of a built module."""
    symbol: str
    object_code: bytes


_PACKAGE = __name__.split(".")[0]


def applies() -> bool:
    """Whether every registered schedule and graph op comes from loopweave itself."""
    functions = list(_SCHEDULES.values()) + [d.build for d in OPS.values()]
    return all((getattr(fn, "__module__", "") or "").startswith(_PACKAGE + ".") for fn in functions)


def _entry_path(signature: str, target, suffix: str) -> Optional[Path]:
    folder = writable_cache_dir()
    if folder is None:
        return None
    key = hashlib.sha256("\0".join([signature, target.key(), str(target), source_fingerprint(), "checksummed"]).encode())
    return folder / f"{key.hexdigest()[:32]}{suffix}"


def _read(signature: str, target, suffix: str) -> Optional[bytes]:
    """The payload of the entry for ``signature`` on ``target``, or None (the cache off, no entry, or
    a damaged one: ``disk_cache.read_verified`` deletes it with a warning)."""
    if not applies():
        return None
    path = _entry_path(signature, target, suffix)
    return None if path is None else read_verified(path)


def _write(signature: str, target, suffix: str, payload: bytes) -> None:
    """Store ``payload`` as the entry for ``signature`` (the callers ask ``applies`` first: they keep
    the kernel's object too)."""
    path = _entry_path(signature, target, suffix)
    if path is not None:
        write_checksummed(path, payload)


def lookup(signature: str, target) -> Optional[CachedKernel]:
    """The kernel built for ``signature`` on ``target`` before, if its object is still cached.

    Entries are checksummed like objects (``disk_cache.read_verified``): a damaged one is
    deleted with a warning and the group is built again."""
    data = _read(signature, target, ".kernel")
    if data is None:
        return None
    try:
        symbol = data.decode("ascii").strip()
    except UnicodeDecodeError:
        return None
    obj = cached_object(symbol, target) if symbol else None
    return CachedKernel(symbol, obj) if obj is not None else None


def store(signature: str, target, module) -> None:
    """Remember that ``signature`` became ``module`` (and keep its object on disk: a kernel
    loaded earlier in this process may have been compiled under another cache directory)."""
    if not applies():
        return
    _keep_object(module, target)
    _write(signature, target, ".kernel", module.symbol.encode("ascii"))


def _keep_object(module, target) -> None:
    if cached_object(module.symbol, target) is None:
        store_object(module.symbol, target, module.object_code)


def lookup_lowered(signature: str, target):
    """For the GPU, whose modules are made from the lowered function (CUDA C generated from it, the
    PTX found in the compiler's disk cache): the function ``signature`` was lowered to before, or
    None.  It is stored as data (``lowering/ir_json.py``: JSON read back into a fixed set of IR nodes,
    never pickle) and checksummed (a damaged entry is deleted and the group lowered again); the source
    fingerprint in the key keeps a stale one from being used."""
    data = _read(signature, target, ".lowered.json")
    if data is None:
        return None
    try:
        return primfunc_from_json(data)
    except ValueError:       # an unreadable entry is a miss
        return None


def store_lowered(signature: str, target, func) -> None:
    if not applies():
        return
    try:
        text = primfunc_to_json(func)
    except ValueError:       # a node the JSON form cannot hold: this kernel is not remembered
        return
    _write(signature, target, ".lowered.json", text.encode())


def kernel_entry(module) -> dict:
    """What loading ``module`` again needs besides its object code (``kernel_module``): a saved
    executable's kernel entry (``polymorphic_executable.save``), and the polymorphic kernel cache's."""
    return {"symbol": module.symbol, "name": module.name, "params": [p.to_json() for p in module.params],
            "size_names": list(module.size_names)}


def kernel_module(entry: dict, obj: bytes, host):
    """The Module of a ``kernel_entry`` and its object code, loaded (once per process: a symbol built
    or loaded before is reused).  A malformed entry raises KeyError or TypeError."""
    params = [ParamSpec(p["name"], p["dtype"], [d if isinstance(d, int) else d["expr"] for d in p["shape"]],
                        bool(p["is_output"])) for p in entry["params"]]
    size_names = [str(n) for n in entry["size_names"]]
    symbol, name = str(entry["symbol"]), str(entry["name"])
    address = loaded_objects.load(symbol, obj)
    module = Module(name, address, params, size_names, {}, host)
    module.object_code, module.symbol = loaded_objects.loaded_object(symbol), symbol
    return module


def lookup_polymorphic(key: str, target):
    """The loaded Module of the polymorphic kernel built for structural ``key`` on ``target`` before, if
    its object is still cached (an unreadable entry is a miss)."""
    data = _read(key, target, ".poly")
    if data is None:
        return None
    try:
        entry = json.loads(data)
        obj = cached_object(str(entry["symbol"]), target)
        return None if obj is None else kernel_module(entry, obj, target)
    except (ValueError, KeyError, TypeError):
        return None


def store_polymorphic(key: str, target, module) -> None:
    """Remember that the polymorphic kernel of structural ``key`` became ``module``."""
    if not applies():
        return
    _keep_object(module, target)
    _write(key, target, ".poly", json.dumps(kernel_entry(module)).encode())
