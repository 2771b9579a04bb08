"""The exception types every layer of loopweave raises.

User mistakes derive from :class:`LoopweaveError`; bugs in loopweave itself raise
:class:`InternalError`, whose message asks for a report.  This module imports nothing
of the project so every layer can use it.
"""


class LoopweaveError(Exception):
    """Base of every error caused by how loopweave was used."""


class DTypeError(LoopweaveError, TypeError):
    """An expression mixes dtypes that need an explicit cast, or names an unknown dtype."""


class ExprError(LoopweaveError, ValueError):
    """A compute definition is malformed (bad shape, wrong index count, bad reduction)."""


class ScheduleError(LoopweaveError, ValueError):
    """A schedule primitive was called with arguments that break one of its rules."""


class LoweringError(LoopweaveError):
    """A schedule cannot be lowered (e.g. a proven out-of-bounds access)."""


class BoundsError(LoweringError, IndexError):
    """Bound inference proved that an access can fall outside a tensor's extent."""


class ArgumentError(LoopweaveError, ValueError):
    """A compiled function was called with arguments that do not match its signature."""


class IndexOutOfRangeError(ArgumentError, IndexError):
    """A kernel's run-time index check failed: an index read from data (a Gather's indices, or any
    data-dependent load with ``checks="bounds"``) is outside the tensor.

    ``index`` is the bad value as read, ``extent`` the size of the axis it indexes, ``what`` names
    that axis and tensor, ``node`` the network node (empty for a kernel built by ``lw.build``).
    """

    def __init__(self, message: str, index: int = 0, extent: int = 0, what: str = "", node: str = ""):
        super().__init__(message)
        self.index, self.extent, self.what, self.node = index, extent, what, node


class BuildError(LoopweaveError):
    """Code generation or native compilation failed for a user-visible reason."""


class MissingExtraError(LoopweaveError, ImportError):
    """An optional dependency a feature needs is not installed; the message names the pip extra
    (``pip install "loopweave[autoschedule]"``) that installs it."""


class ImportError_(LoopweaveError):  # noqa: N801 - avoid shadowing the builtin
    """A model file is malformed or uses something the importer does not support."""


class TorchExportError(ImportError_):
    """torch could not turn a module into a graph (``torch.export`` / its ONNX exporter): data-dependent
    control flow, an op without an ONNX translation, ...; the message names torch's reason."""


class DamagedFileError(ArgumentError):
    """A saved file (a ``.lwx`` member, a cache entry) fails its checksum or is malformed.

    ``member`` names the damaged part (e.g. ``kernels/lw_conv_1a2b.o`` or ``meta.json``).
    """

    def __init__(self, message: str, member: str = ""):
        super().__init__(message)
        self.member = member


class LoopweaveWarning(UserWarning):
    """Base of the warnings loopweave issues."""


class PerShapeCompileWarning(LoopweaveWarning):
    """A model with symbolic sizes could not be compiled once for all of them; it compiles per input
    shape on first use instead (the message says why)."""


class ScheduleWarning(LoopweaveWarning):
    """A schedule primitive that will not do what it asks (``vectorize`` or ``unroll`` of an axis whose
    extent is symbolic); the message says how to get it."""


class EagerFallbackWarning(LoopweaveWarning):
    """``torch.compile(backend="loopweave")`` runs a graph eagerly in torch: it uses ops loopweave does not
    import (the message names them) or tensors on a device other than the CPU."""


class CacheWarning(LoopweaveWarning):
    """The on-disk cache was damaged (the entry was deleted and rebuilt) or is not writable."""


class InternalError(Exception):
    """A bug in loopweave: an invariant that should always hold did not."""

    def __init__(self, message: str):
        super().__init__(f"{message}\n(This is a bug in loopweave; please report it with the code that triggered it.)")


class OnnxImportError(ImportError_):
    """An ONNX model cannot be imported: malformed, or it uses unsupported ops/attributes.

    ``unsupported`` lists ``(node name, op type, opset, reason)`` for every node that
    cannot be converted, so one error names them all.
    """

    def __init__(self, message: str, unsupported=()):
        super().__init__(message)
        self.unsupported = list(unsupported)
