"""The PyTorch front end: ``from_torch`` (a module as a loopweave graph) and the ``torch.compile``
backend ``"loopweave"`` (``backend.py``).  torch is imported only when one of them is used; it comes
with the ``torch`` extra."""
from .from_torch import from_torch

__all__ = ["from_torch"]
