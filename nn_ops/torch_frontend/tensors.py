"""Torch CPU tensors to numpy arrays and back without copying: both sides share the buffer.

``tensor.numpy()`` is a view of a CPU tensor's storage and ``torch.from_numpy`` a view of an
array's; only a non-contiguous tensor is copied (the compiled network reads dense C-order
buffers).  A tensor elsewhere than on the CPU is refused with its device named: loopweave's
network executables for torch run on the CPU.
"""
from __future__ import annotations

from typing import Sequence

from ...errors import ArgumentError


def device_of(tensors: Sequence) -> str:
    """The first device other than the CPU among ``tensors`` (tensors only), or ``""``."""
    for t in tensors:
        device = getattr(t, "device", None)
        if device is not None and device.type != "cpu":
            return str(device)
    return ""


def check_cpu(tensors: Sequence, what: str) -> None:
    """``ArgumentError`` naming the device when one of ``tensors`` is not on the CPU."""
    device = device_of(tensors)
    if device:
        raise ArgumentError(f"{what}: a tensor is on device {device!r}; loopweave runs torch tensors on the CPU "
                            f"(move them with .cpu(), or compile for the device with lw.compile(..., "
                            f"target='cuda') from lw.from_torch)")


def as_numpy(tensor):
    """A numpy view of a CPU tensor (a contiguous copy only when it is not contiguous)."""
    t = tensor.detach()
    if not t.is_contiguous():
        t = t.contiguous()
    return t.numpy()


def as_torch(array):
    """A torch tensor sharing ``array``'s buffer."""
    import torch
    return torch.from_numpy(array)
