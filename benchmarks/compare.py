"""The interleaved-timing helpers, from the package (``loopweave.backends.timing``)."""
from loopweave.backends.timing import Comparison, interleaved, set_threads

__all__ = ["Comparison", "interleaved", "set_threads"]
