"""CudaExecutable: a network compiled for ``target="cuda"``.

The same plan as on the CPU (``executable.build_kernels``: graph passes, fused kernels
built once each with the op library's CUDA schedules, one weight blob, one arena
planned by liveness), on the GPU: the weights are copied to the device once, the
arena is one device allocation, and ``run`` copies the inputs in, launches every
kernel in order on the default stream and copies the outputs back.  Building needs no
GPU (every kernel's CUDA C and PTX can be inspected: ``exe.sources()``); running does.
"""
from __future__ import annotations

from typing import Dict, List, Optional, Tuple

import numpy as np

from ...errors import InternalError
from .feed import check_static_feed


class CudaExecutable:
    def __init__(self, inputs, outputs, calls, modules: Dict[str, object], arena_size: int, weights: np.ndarray,
                 target):
        self.inputs = [(n, tuple(s), d) for n, s, d in inputs]
        self.outputs = [(n, tuple(s), d) for n, s, d in outputs]
        self.calls, self.modules = calls, modules
        self.arena_size, self.weights, self.target = arena_size, weights, target
        self.compile_seconds = 0.0
        self.num_groups = len(calls)
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
        self._device = dev
        return dev

    def _pointer(self, dev, location) -> int:
        space, where = location
        if space in ("input", "output"):
            return dev[space + "s"][where]
        if space in ("arena", "weight"):
            return dev["arena" if space == "arena" else "weights"] + where
        raise InternalError(f"unknown storage location {location!r}")

    def _launch_all(self, dev):
        for module, pointers in dev["launches"]:
            module._run(dev["drv"], pointers, {})

    def run(self, feed) -> List[np.ndarray]:
        """Run on ``feed`` ({input name: numpy array}); returns numpy outputs in graph order."""
        arrays = check_static_feed(self.inputs, feed)
        dev = self._setup()
        drv = dev["drv"]
        for a, ptr in zip(arrays, dev["inputs"]):
            drv.copy_to_device(ptr, a.ctypes.data, a.nbytes)
        self._launch_all(dev)
        drv.synchronize()
        outs = [np.empty(s, d) for _, s, d in self.outputs]
        for o, ptr in zip(outs, dev["outputs"]):
            drv.copy_to_host(o.ctypes.data, ptr, o.nbytes)
        return outs

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

    def profile(self, feed, repeat: int = 10) -> List[Tuple[str, float]]:
        """Median seconds of each kernel call on the GPU (CUDA events around each launch), in call
        order, as ``Executable.profile`` gives on the CPU: for finding hot spots."""
        self.run(feed)
        dev = self._setup()
        drv = dev["drv"]
        result = [(call.name, self._median_seconds(drv, lambda m=module, p=pointers: m._run(drv, p, {}), repeat))
                  for call, (module, pointers) in zip(self.calls, dev["launches"])]
        self.last_profile = result
        return result

    def __del__(self):
        dev = self._device
        if dev is None:
            return
        try:
            drv = dev["drv"]
            drv.synchronize()
            for ptr in [dev["arena"], dev["weights"]] + dev["inputs"] + dev["outputs"]:
                drv.free(ptr)
        except Exception:  # noqa: BLE001 - interpreter shutdown: the driver may be gone already
            pass
