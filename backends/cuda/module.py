"""The CUDA runtime module: same checks and call as the CPU one, kernels on the GPU.

``f(*arrays)`` takes numpy arrays (copied to the device and, for outputs, back),
:class:`DeviceArray` s (used in place) or any DLPack CUDA tensor (CuPy, PyTorch),
checks dtypes, ranks, shapes and symbolic sizes exactly like the CPU module, then
runs the host program: allocate intermediates, launch each kernel on the legacy
default stream with grid extents evaluated from the sizes, free.  The PTX is loaded
into the driver on the first call, so building needs no GPU.  Kernels that check indices
(gathers, ``checks="bounds"``) write a bad one to the module's device error slot, read
back after the call: ``IndexOutOfRangeError`` names the tensor, the index and the extent,
as on the CPU.
"""
from __future__ import annotations

import ctypes
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...dsl import dtypes
from ...dsl.expr import Binary, Cast, Compare, Const, Logical, Select, Var
from ...errors import ArgumentError, IndexOutOfRangeError, InternalError
from ...lowering.ir import Allocate, KernelLaunch, LetStmt, Seq
from ..runtime import Module, ParamSpec, index_error_text
from .codegen import ERROR_SLOT_WORDS
from .driver import PreparedLaunch, get_driver
from .ndarray import DeviceArray, as_device_array, overlaps


REPLAY_SETS = 8   # argument-pointer sets whose marshalled launches a module keeps


def _allocates(s) -> bool:
    """Whether a host program allocates device memory (its launches then differ per call).  It walks
    the host statements ``_exec`` runs, not into the kernels (``post_order_visit`` would: their
    shared and local buffers are Allocates too)."""
    if isinstance(s, Allocate):
        return True
    if isinstance(s, Seq):
        return any(_allocates(c) for c in s.stmts)
    if isinstance(s, LetStmt):
        return _allocates(s.body)
    return False


def eval_host(e, env: Dict[int, int]) -> int:
    """Evaluate index arithmetic over the sizes (launch extents, buffer sizes, host lets)."""
    if isinstance(e, Const):
        return int(e.value) if e.dtype != "bool" else bool(e.value)
    if isinstance(e, Var):
        if id(e) not in env:
            raise InternalError(f"host code uses '{e.name}', which has no value at launch")
        return env[id(e)]
    if isinstance(e, Cast):
        return eval_host(e.value, env)
    if isinstance(e, Binary):
        a, b = eval_host(e.a, env), eval_host(e.b, env)
        return {"add": lambda: a + b, "sub": lambda: a - b, "mul": lambda: a * b, "floordiv": lambda: a // b,
                "floormod": lambda: a % b, "min": lambda: min(a, b), "max": lambda: max(a, b)}[e.op]()
    if isinstance(e, Compare):
        a, b = eval_host(e.a, env), eval_host(e.b, env)
        return {"eq": a == b, "ne": a != b, "lt": a < b, "le": a <= b, "gt": a > b, "ge": a >= b}[e.op]
    if isinstance(e, Logical):
        if e.op == "not":
            return not eval_host(e.a, env)
        a = eval_host(e.a, env)
        return (a and eval_host(e.b, env)) if e.op == "and" else (a or eval_host(e.b, env))
    if isinstance(e, Select):
        return eval_host(e.true_value, env) if eval_host(e.condition, env) else eval_host(e.false_value, env)
    raise InternalError(f"host code cannot evaluate {type(e).__name__}")


class CudaModule(Module):
    """A compiled CUDA function; ``get_source("cuda")`` and ``get_source("ptx")`` show the code."""

    html_sources = (("lowered", "lowered IR", True), ("cuda", "CUDA C", False), ("ptx", "PTX", False))

    def __init__(self, name: str, params: List[ParamSpec], size_names: List[str], sources, target, func, kernels,
                 ptx_of):
        self.name, self.params, self.size_names = name, params, size_names
        self.target = target
        self._sources = sources
        self._func = func
        self._kernels = {k.name: k for k in kernels}
        self._sites = kernels[0].sites if kernels else []   # check site k + 1: (what, wraps)
        self.checks_indices = any(k.checks for k in kernels)
        self._err: Optional[int] = None   # the device error slot of calls through the module
        self._ptx_of = ptx_of
        self._module = None
        self._functions = {}
        self._param_index = {id(b): k for k, b in enumerate(func.params)}
        self._size_vars = list(func.size_vars)
        self._static = self._static_params()
        self._output_indices = [k for k, p in enumerate(params) if p.is_output]
        # static modules whose host program allocates nothing replay their launches, marshalled
        # once per set of argument pointers (the last few sets): see ``_replay``
        self._replayable = self._static is not None and not _allocates(func.body)
        self._replays: Dict[tuple, List[PreparedLaunch]] = {}

    @property
    def lowered_function(self):
        """The PrimFunc this module was built from (``lw.build(func, (), "cuda")`` makes it again)."""
        return self._func

    # ----------------------------------------------------------- argument checks
    def _check_array(self, p: ParamSpec, a) -> None:
        if not isinstance(a, (np.ndarray, DeviceArray)):
            raise ArgumentError(f"argument '{p.name}' must be a numpy.ndarray, a loopweave DeviceArray or a CUDA "
                                f"tensor with __dlpack__ (CuPy, PyTorch), got {type(a).__name__}")

    def _check_layout(self, p: ParamSpec, a) -> None:
        if isinstance(a, np.ndarray):
            Module._check_layout(self, p, a)   # device arrays are dense by construction

    def _overlap(self, a, b) -> bool:
        if isinstance(a, DeviceArray) and isinstance(b, DeviceArray):
            return overlaps(a, b)
        if isinstance(a, np.ndarray) and isinstance(b, np.ndarray):
            return np.may_share_memory(a, b)
        return False

    def _as_arrays(self, args) -> list:
        return [a if isinstance(a, (np.ndarray, DeviceArray)) or not hasattr(a, "__dlpack__") else as_device_array(a)
                for a in args]

    # ----------------------------------------------------------- running
    def _load(self, drv):
        if self._module is None:
            self._module = drv.load_module(self._ptx_of().encode() + b"\0")
            self._functions = {n: drv.get_function(self._module, n) for n in self._kernels}

    def _stage(self, drv, args):
        """Device pointers for the arguments: numpy arrays are copied in (outputs come back later)."""
        pointers, back, keep = [], [], []
        for p, a in zip(self.params, args):
            if isinstance(a, DeviceArray):
                pointers.append(a.ptr)
                continue
            dev = DeviceArray.empty(a.shape, a.dtype)
            keep.append(dev)
            if a.nbytes:
                drv.copy_to_device(dev.ptr, a.ctypes.data, a.nbytes)
            pointers.append(dev.ptr)
            if p.is_output:
                back.append((a, dev))
        return pointers, back, keep

    def _check_alignment(self, pointers):
        for info in self._kernels.values():
            for buf_id, need in info.param_align.items():
                k = self._param_index.get(buf_id)
                if k is not None and pointers[k] % need:
                    raise ArgumentError(f"argument '{self.params[k].name}' is read with {need}-byte vector "
                                        f"accesses but its data pointer is not {need}-byte aligned; pass a copy "
                                        f"(e.g. .contiguous().clone() in PyTorch) or a loopweave DeviceArray")

    def _error_slot(self, drv) -> int:
        """The module's device error slot, zeroed (made on first use)."""
        if self._err is None:
            self._err = drv.alloc(ERROR_SLOT_WORDS * 8)
            self._clear_error_slot(drv)
        return self._err

    def _clear_error_slot(self, drv) -> None:
        zeros = (ctypes.c_uint64 * ERROR_SLOT_WORDS)()
        drv.copy_to_device(self._err, ctypes.addressof(zeros), ERROR_SLOT_WORDS * 8)

    def read_index_error(self, words) -> Optional[tuple]:
        """``(what, index, extent, wraps)`` from an error slot holding ``words`` (site, index, extent),
        or None where no check failed."""
        site = int(words[0])
        if site == 0:
            return None
        if not 0 < site <= len(self._sites):
            raise InternalError(f"a kernel of '{self.name}' reported index check {site}, which it does not have")
        what, wraps = self._sites[site - 1]
        return what, ctypes.c_int64(words[1]).value, ctypes.c_int64(words[2]).value, wraps

    def _raise_index_error(self, drv) -> None:
        """After a finished call: raise the bad index a kernel recorded (the slot is cleared first)."""
        if not self.checks_indices or self._err is None:
            return
        words = (ctypes.c_uint64 * ERROR_SLOT_WORDS)()
        drv.copy_to_host(ctypes.addressof(words), self._err, ERROR_SLOT_WORDS * 8)
        failed = self.read_index_error(words)
        if failed is None:
            return
        self._clear_error_slot(drv)
        what, index, extent, wraps = failed
        raise IndexOutOfRangeError(f"{self.name}: {index_error_text(what, index, extent, wraps)}; the outputs were "
                                   f"not fully written.\n  fix: pass indices inside the range, or make the "
                                   f"computation clamp or wrap them", index, extent, what)

    def _run(self, drv, pointers, sizes):
        env = {id(v): sizes[v.name] for v in self._size_vars}
        buffers = {id(b): ptr for b, ptr in zip(self._func.params, pointers)}
        err = self._error_slot(drv) if self.checks_indices else None
        self._exec(drv, self._func.body, env, buffers, drv.launch, err=err)

    def prepared_launches(self, drv, pointers, sizes, err: Optional[int] = None) -> Tuple[List[PreparedLaunch],
                                                                                           List[int]]:
        """This call's launches, marshalled once, for a caller that replays them (a network, a CUDA
        graph), and the device buffers allocated for the host program's intermediates, which the
        caller now owns (they live as long as the launches are replayed; free them with drv.free).
        Kernels that check indices report to the device error slot ``err`` (default: the module's)."""
        env = {id(v): sizes[v.name] for v in self._size_vars}
        buffers = {id(b): ptr for b, ptr in zip(self._func.params, pointers)}
        if err is None and self.checks_indices:
            err = self._error_slot(drv)
        launches: List[PreparedLaunch] = []
        owned: List[int] = []
        self._exec(drv, self._func.body, env, buffers,
                   lambda fn, grid, block, args: launches.append(PreparedLaunch(fn, grid, block, args)),
                   owned=owned, err=err)
        return launches, owned

    def _exec(self, drv, s, env, buffers, launch, owned: Optional[list] = None, err: Optional[int] = None):
        """Interpret the host program; with ``owned``, intermediates are allocated for good and
        listed there (the launches are being recorded, not run); ``err``: the device error slot
        of kernels that check indices."""
        if isinstance(s, Seq):
            for c in s.stmts:
                self._exec(drv, c, env, buffers, launch, owned, err)
        elif isinstance(s, LetStmt):
            env[id(s.var)] = eval_host(s.value, env)
            self._exec(drv, s.body, env, buffers, launch, owned, err)
        elif isinstance(s, Allocate):
            nbytes = eval_host(s.extent, env) * dtypes.itemsize(s.buffer.dtype)
            ptr = drv.alloc(nbytes)
            buffers[id(s.buffer)] = ptr
            if owned is not None:
                owned.append(ptr)
                self._exec(drv, s.body, env, buffers, launch, owned, err)
                return
            try:
                self._exec(drv, s.body, env, buffers, launch, err=err)
            finally:
                drv.synchronize()   # kernels that use the buffer have finished
                drv.free(ptr)
        elif isinstance(s, KernelLaunch):
            grid = [eval_host(g, env) for g in s.grid]
            if min(grid) <= 0:
                return   # nothing to compute (an empty size)
            block = [int(b.value) for b in s.block]
            args = [ctypes.c_uint64(buffers[id(b)]) for b in s.params]
            args += [ctypes.c_int64(env[id(v)]) for v in s.scalars]
            if self._kernels[s.name].checks:
                args.append(ctypes.c_uint64(err))
            launch(self._functions[s.name], grid, block, args)
        else:
            raise InternalError(f"host code of a CUDA module has a {type(s).__name__}")

    def _static_device_ok(self, args) -> bool:
        """Whether ``args`` pass every check of ``_bind``: static shapes, all device arrays (the
        common case when timing or chaining kernels); a few attribute reads instead of ~30 us."""
        static = self._static
        if static is None or len(args) != len(static):
            return False
        for a, (dtype, shape) in zip(args, static):
            if type(a) is not DeviceArray or a.shape != shape or a.dtype != dtype:
                return False
        for i in self._output_indices:
            for j, b in enumerate(args):
                if j != i and overlaps(args[i], b):
                    return False
        return True

    def _prepare_call(self, args):
        args = self._as_arrays(args)
        sizes = {} if self._static_device_ok(args) else self._bind(args)
        drv = get_driver()
        self._load(drv)
        pointers, back, keep = self._stage(drv, args)
        self._check_alignment(pointers)
        return drv, pointers, sizes, back, keep

    def _replay(self, args) -> bool:
        """Run a call on static device arrays from launches marshalled for the same pointers before.

        The general path interprets the host program and marshals every argument per call:
        most of the host time of a short kernel (a 1024^3 matmul called with device arrays).
        Returns False (nothing run) where the general path must take the call."""
        if not self._replayable:
            return False
        args = self._as_arrays(args)
        if not self._static_device_ok(args):
            return False
        key = tuple(a.ptr for a in args)
        drv = get_driver()
        launches = self._replays.get(key)
        if launches is None:
            self._load(drv)
            self._check_alignment(list(key))
            launches, owned = self.prepared_launches(drv, list(key), {})
            assert not owned, "a replayable host program allocates nothing"
            if len(self._replays) >= REPLAY_SETS:
                self._replays.pop(next(iter(self._replays)))
            self._replays[key] = launches
        drv.make_current()
        for launch in launches:
            drv.launch_prepared(launch)
        drv.synchronize()
        self._raise_index_error(drv)
        return True

    def __call__(self, *args) -> None:
        if self._replay(args):
            return
        drv, pointers, sizes, back, keep = self._prepare_call(args)
        self._run(drv, pointers, sizes)
        drv.synchronize()
        self._raise_index_error(drv)
        for host, dev in back:
            if host.nbytes:
                drv.copy_to_host(host.ctypes.data, dev.ptr, host.nbytes)

    def time(self, *args, number: int = 0, repeat: int = 7, min_seconds: float = 0.05) -> float:
        """Median seconds per call on the GPU (CUDA events; copies of numpy arguments excluded)."""
        drv, pointers, sizes, back, keep = self._prepare_call(args)
        self._run(drv, pointers, sizes)   # warm-up
        drv.synchronize()
        self._raise_index_error(drv)      # (the timed runs read the same indices)
        start, end = drv.event(), drv.event()
        try:
            if number <= 0:
                number = 1
                while True:
                    drv.record(start)
                    for _ in range(number):
                        self._run(drv, pointers, sizes)
                    drv.record(end)
                    if drv.elapsed_seconds(start, end) >= min_seconds / repeat or number >= 1 << 16:
                        break
                    number *= 2
            samples = []
            for _ in range(repeat):
                drv.record(start)
                for _ in range(number):
                    self._run(drv, pointers, sizes)
                drv.record(end)
                samples.append(drv.elapsed_seconds(start, end) / number)
        finally:
            drv.destroy_event(start)
            drv.destroy_event(end)
        return float(np.median(samples))

    def get_source(self, fmt: str = "cuda") -> str:
        """The generated code: ``"lowered"`` (loop IR), ``"cuda"`` (CUDA C) or ``"ptx"``."""
        return Module.get_source(self, fmt)

    def __repr__(self) -> str:
        return Module.__repr__(self).replace("loopweave.Module", "loopweave.CudaModule")
