"""CudaExecutable: a network compiled for ``target="cuda"``.

The same plan as on the CPU (``executable.build_kernels``: graph passes, fused kernels
built once each with the op library's CUDA schedules, one weight blob, one arena
planned by liveness), on the GPU: the weights are copied to the device once, the
arena is one device allocation, and every kernel's arguments are fixed device
addresses, so the launches are marshalled once and captured as one CUDA graph
(``cuda_graph=True``, the default): ``run`` copies the inputs in, replays the graph (one
``cuGraphLaunch`` instead of a host round trip per kernel) and copies the outputs back.
Inputs may be device arrays (``DeviceArray``, CUDA tensors with DLPack): they are copied
on the device; ``run(feed, device_outputs=True)`` returns ``DeviceArray`` s.  Building
needs no GPU (every kernel's CUDA C and PTX can be inspected: ``exe.sources()``);
running does.  Kernels that check indices (Gather and the like, every data-dependent load
with ``checks="bounds"``) each get a device error slot of their own; after a run the slots
come back in one copy, and a bad index raises ``IndexOutOfRangeError`` naming the node.
"""
from __future__ import annotations

import ctypes
from typing import Dict, List, Optional, Tuple

import numpy as np

from ...backends.cuda.codegen import ERROR_SLOT_WORDS
from ...backends.cuda.ndarray import DeviceArray, as_device_array
from ...backends.runtime import index_error_text
from ...backends.timing import per_call_medians
from ...errors import ArgumentError, IndexOutOfRangeError, InternalError
from .feed import check_static_feed


SLOT_BYTES = ERROR_SLOT_WORDS * 8


def _on_device(value) -> bool:
    """Whether a feed value is a device array: a DeviceArray or a tensor offering DLPack (torch, CuPy)."""
    return isinstance(value, DeviceArray) or hasattr(value, "__dlpack__")


class CudaExecutable:
    def __init__(self, inputs, outputs, calls, modules: Dict[str, object], arena_size: int, weights: np.ndarray,
                 target):
        self.inputs = [(n, tuple(s), d) for n, s, d in inputs]
        self.outputs = [(n, tuple(s), d) for n, s, d in outputs]
        self.calls, self.modules = calls, modules
        self.arena_size, self.weights, self.target = arena_size, weights, target
        self.compile_seconds = 0.0
        self.num_groups = len(calls)
        self.cuda_graph = True     # replay the launches as one CUDA graph (False: launch one by one)
        self._device: Optional[dict] = None

    def __repr__(self) -> str:
        ins = ", ".join(f"{n}: {d}{list(s)}" for n, s, d in self.inputs)
        outs = ", ".join(f"{n}: {d}{list(s)}" for n, s, d in self.outputs)
        return (f"<loopweave CudaExecutable ({ins}) -> ({outs}): {len(self.calls)} kernel calls, "
                f"{len(self.modules)} distinct kernels, arena {self.arena_size / 1e6:.1f} MB, "
                f"weights {self.weights.nbytes / 1e6:.1f} MB>")

    def sources(self, fmt: str = "cuda") -> Dict[str, str]:
        """Each distinct kernel's code by symbol: ``"cuda"`` (CUDA C), ``"ptx"`` or ``"lowered"``."""
        return {sym: m.get_source(fmt) for sym, m in self.modules.items()}

    # ------------------------------------------------------------ running
    def _setup(self):
        """Device memory (arena, weights, inputs, outputs) and the loaded kernels, once."""
        from ...backends.cuda.driver import get_driver
        if self._device is not None:
            return self._device
        drv = get_driver()          # BuildError with the reason when there is no GPU
        for m in self.modules.values():
            m._load(drv)
        dev = {"drv": drv, "arena": drv.alloc(max(1, self.arena_size)),
               "weights": drv.alloc(max(1, self.weights.nbytes)),
               "inputs": [drv.alloc(max(1, int(np.prod(s)) * np.dtype(d).itemsize)) for _, s, d in self.inputs],
               "outputs": [drv.alloc(max(1, int(np.prod(s)) * np.dtype(d).itemsize)) for _, s, d in self.outputs]}
        if self.weights.nbytes:
            drv.copy_to_device(dev["weights"], self.weights.ctypes.data, self.weights.nbytes)
        # every kernel's arguments are fixed device addresses: resolve and check them once
        dev["launches"] = []
        for call in self.calls:
            module = self.modules[call.symbol]
            pointers = [self._pointer(dev, loc) for loc in call.args]
            module._check_alignment(pointers)
            dev["launches"].append((module, pointers))
        dev["scratch"] = []
        checking = any(module.checks_indices for module, _ in dev["launches"])
        dev["errors"] = drv.alloc(len(self.calls) * SLOT_BYTES) if checking else None
        if checking:
            self._clear_error_slots(dev)
        dev["prepared"] = self._prepared_launches(drv, dev)
        dev["stream"] = dev["graph"] = None
        self._device = dev
        return dev

    @staticmethod
    def _prepared_launches(drv, dev):
        """Each call's kernel launches, marshalled once; intermediates a kernel's host program
        allocates are allocated here for the executable's lifetime (freed with the arena)."""
        prepared = []
        for k, (module, pointers) in enumerate(dev["launches"]):
            err = dev["errors"] + k * SLOT_BYTES if module.checks_indices else None
            steps, owned = module.prepared_launches(drv, pointers, {}, err=err)
            dev["scratch"].extend(owned)
            prepared.append(steps)
        return prepared

    def _graph(self, dev):
        """The run's launches captured as a CUDA graph, made on first use (None: cuda_graph is off)."""
        if not self.cuda_graph:
            return None
        if dev["graph"] is None:
            drv = dev["drv"]
            dev["stream"] = drv.stream()
            dev["graph"] = drv.capture_graph(
                dev["stream"], lambda: [drv.launch_prepared(p, dev["stream"]) for steps in dev["prepared"] for p in steps])
        return dev["graph"]

    def _pointer(self, dev, location) -> int:
        space, where = location
        if space in ("input", "output"):
            return dev[space + "s"][where]
        if space in ("arena", "weight"):
            return dev["arena" if space == "arena" else "weights"] + where
        raise InternalError(f"unknown storage location {location!r}")

    def _clear_error_slots(self, dev):
        zeros = (ctypes.c_uint64 * (ERROR_SLOT_WORDS * len(self.calls)))()
        dev["drv"].copy_to_device(dev["errors"], ctypes.addressof(zeros), ctypes.sizeof(zeros))

    def _check_indices(self, dev):
        """After a finished run: raise the first bad index a kernel recorded, in call order (every
        slot is cleared first)."""
        if dev["errors"] is None:
            return
        words = (ctypes.c_uint64 * (ERROR_SLOT_WORDS * len(self.calls)))()
        dev["drv"].copy_to_host(ctypes.addressof(words), dev["errors"], ctypes.sizeof(words))
        for k, (call, (module, _)) in enumerate(zip(self.calls, dev["launches"])):
            slot = words[k * ERROR_SLOT_WORDS:(k + 1) * ERROR_SLOT_WORDS]
            failed = module.read_index_error(slot) if module.checks_indices else None
            if failed is not None:
                self._clear_error_slots(dev)
                raise _index_error(call, *failed)

    def _launch_all(self, dev):
        drv = dev["drv"]
        graph = self._graph(dev)
        if graph is not None:
            drv.launch_graph(graph, dev["stream"])
        else:
            for steps in dev["prepared"]:
                for launch in steps:
                    drv.launch_prepared(launch)

    def run(self, feed, device_outputs: bool = False) -> list:
        """Run on ``feed`` ({input name: numpy array, DeviceArray or CUDA DLPack tensor}); returns the
        outputs in graph order, as numpy arrays, or with ``device_outputs=True`` as new DeviceArrays
        (copied on the device, never through the host)."""
        arrays = self._checked_feed(feed)
        dev = self._setup()
        drv = dev["drv"]
        for a, ptr in zip(arrays, dev["inputs"]):
            if isinstance(a, np.ndarray):
                drv.copy_to_device(ptr, a.ctypes.data, a.nbytes)
            elif a.nbytes:
                drv.copy_device_to_device(ptr, a.ptr, a.nbytes)
        self._launch_all(dev)
        if device_outputs:
            outs = [DeviceArray.empty(s, d) for _, s, d in self.outputs]
            for o, ptr in zip(outs, dev["outputs"]):
                if o.nbytes:
                    drv.copy_device_to_device(o.ptr, ptr, o.nbytes)
            drv.synchronize()
            self._check_indices(dev)
            return outs
        drv.synchronize()
        self._check_indices(dev)
        outs = [np.empty(s, d) for _, s, d in self.outputs]
        for o, ptr in zip(outs, dev["outputs"]):
            drv.copy_to_host(o.ctypes.data, ptr, o.nbytes)
        return outs

    def _checked_feed(self, feed) -> list:
        """The feed's arrays in input order: host arrays through the CPU executable's checks, device
        arrays (DeviceArray, or a CUDA tensor through DLPack) checked for shape and dtype here."""
        if isinstance(feed, dict) and any(not isinstance(v, np.ndarray) and _on_device(v) for v in feed.values()):
            host = {k: v for k, v in feed.items() if isinstance(v, np.ndarray)}
            device = {k: as_device_array(v) if not isinstance(v, DeviceArray) else v
                      for k, v in feed.items() if not isinstance(v, np.ndarray)}
            checked = dict(zip([n for n, _, _ in self.inputs if n in host],
                               check_static_feed([i for i in self.inputs if i[0] in host], host)))
            for name, shape, dtype in self.inputs:
                if name in device:
                    a = device[name]
                    if a.dtype != np.dtype(dtype) or tuple(a.shape) != tuple(shape):
                        raise ArgumentError(f"input {name!r} must be a {dtype} array of shape {tuple(shape)}, "
                                            f"got a device array of {a.dtype} {tuple(a.shape)}")
                    checked[name] = a
                elif name not in checked:
                    raise ArgumentError(f"missing input {name!r}")
            unknown = [k for k in feed if k not in checked]
            if unknown:
                raise ArgumentError(f"unknown input(s) {', '.join(map(repr, unknown))}; the network's inputs "
                                    f"are {', '.join(repr(n) for n, _, _ in self.inputs)}")
            return [checked[n] for n, _, _ in self.inputs]
        return check_static_feed(self.inputs, feed)

    __call__ = run

    def _median_seconds(self, drv, work, repeat: int) -> float:
        """Median GPU seconds of ``work()`` (launches only), by CUDA events around each repetition."""
        start, end = drv.event(), drv.event()
        samples = []
        try:
            for _ in range(repeat):
                drv.record(start)
                work()
                drv.record(end)
                samples.append(drv.elapsed_seconds(start, end))
        finally:
            drv.destroy_event(start)
            drv.destroy_event(end)
        return float(np.median(samples))

    def time(self, feed, repeat: int = 20) -> float:
        """Median seconds of the kernels alone (CUDA events; the copies of inputs and outputs excluded)."""
        self.run(feed)
        dev = self._setup()
        return self._median_seconds(dev["drv"], lambda: self._launch_all(dev), repeat)

    def profile(self, feed, repeat: int = 10, in_order: bool = False) -> List[Tuple[str, float]]:
        """Median seconds of each kernel call on the GPU (CUDA events around each launch), in call
        order, as ``Executable.profile`` gives on the CPU (``in_order`` too): for finding hot spots."""
        self.run(feed)
        dev = self._setup()
        drv = dev["drv"]
        launches = [(call.name, lambda k=k: [drv.launch_prepared(p) for p in dev["prepared"][k]])
                    for k, call in enumerate(self.calls)]
        result = per_call_medians(launches, repeat, in_order, clock=lambda fn: self._median_seconds(drv, fn, 1))
        self.last_profile = result
        return result

    def save(self, path) -> None:
        """Refused: a CUDA network is not written to a file yet (an ``ArgumentError`` saying what works)."""
        raise ArgumentError(f"save: a network compiled for cuda cannot be saved to {str(path)!r} yet; compile it "
                            f"in the process that runs it (lw.compile(graph, target='cuda')), or compile for the "
                            f"CPU (target='llvm') to save an .lwx")

    def export_library(self, path, *args, **kwargs):
        """Refused: the C library holds CPU code only (an ``ArgumentError`` saying so)."""
        raise ArgumentError(f"export_library: {str(path)!r} would be a CPU library, and this network is compiled "
                            f"for cuda; compile it with target='llvm' to export it")

    def __del__(self):
        dev = self._device
        if dev is None:
            return
        try:
            drv = dev["drv"]
            drv.synchronize()
            if dev.get("graph") is not None:
                drv.destroy_graph(dev["graph"])
                drv.destroy_stream(dev["stream"])
            for ptr in [dev["arena"], dev["weights"]] + dev["inputs"] + dev["outputs"] + dev.get("scratch", []):
                drv.free(ptr)
            if dev.get("errors") is not None:
                drv.free(dev["errors"])
        except Exception:  # noqa: BLE001 - interpreter shutdown: the driver may be gone already
            pass


def _index_error(call, what: str, index: int, extent: int, wraps: bool) -> IndexOutOfRangeError:
    """The error for a failed index check of kernel call ``call``: its ``inK`` named as the graph
    values behind them, the node named (one of the group's nodes, where several were fused)."""
    for k, value in enumerate(call.inputs):
        what = what.replace(f"'in{k}'", f"'{value}'")
    nodes = list(call.nodes)
    node = nodes[0] if len(nodes) == 1 else ""
    where = (f"node '{node}'" if node else f"one of the nodes {', '.join(repr(n) for n in nodes)}") if nodes \
        else f"kernel '{call.name}'"
    return IndexOutOfRangeError(f"{where} ({' + '.join(call.ops) or call.name}): "
                                f"{index_error_text(what, index, extent, wraps)}.\n"
                                f"  fix: check the values fed to the network (e.g. token ids against the "
                                f"vocabulary size); ONNX leaves out-of-range indices undefined, and loopweave "
                                f"refuses them", index, extent, what, node)
