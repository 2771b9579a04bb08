"""The interleaved-timing helpers, from the package (``loopweave.timing``)."""
from loopweave.timing import Comparison, interleaved, set_threads

__all__ = ["Comparison", "interleaved", "set_threads"]
