"""loopweave: a tensor compiler driven from Python.

State *what* to compute with placeholders and ``compute``; state *how* with a
schedule; ``lower`` shows the loops; ``build`` returns a checked, native callable.
"""
from .errors import (ArgumentError, BoundsError, BuildError, CacheWarning, DamagedFileError, DTypeError,
                     EagerFallbackWarning, ExprError, IndexOutOfRangeError, InternalError, LoopweaveError,
                     LoopweaveWarning, LoweringError,
                     MissingExtraError, OnnxImportError, PerShapeCompileWarning, ScheduleError,
                     ScheduleWarning, TorchExportError)
from .target import Target
from .target_info import TargetInfo, target_info
from .dsl.expr import Expr, Var, cast, const, if_then_else, select, var
from .dsl.intrinsics import abs, ceil, erf, exp, floor, fmod, log, pow, round, rsqrt, sigmoid, sqrt, tanh
from .dsl.bitwise import bitwise_and, bitwise_not, bitwise_or, bitwise_xor, shift_left, shift_right
from .dsl.reduction import argmax, argmin, comm_reducer, max, min, prod, sum
from .dsl.schedule import Schedule, Stage, create_schedule
from .dsl.tensor import IterVar, Tensor, compute, placeholder, reduce_axis, thread_axis
from .dsl.trace import Trace
from .lowering.lower import lower
from .backends.build import build
from .backends.runtime import Module
from .backends.cuda.ndarray import DeviceArray, device_array, from_dlpack
from .nn_ops.models import from_onnx
from .nn_ops.torch_frontend import from_torch
from .nn_ops.compile import compile, load
from .nn_ops.network.limits import memory_limit, set_memory_limit
from .nn_ops.compile_once.tasks import extract_tasks

__version__ = "0.1.0"

__all__ = [
    "ArgumentError", "BoundsError", "BuildError", "CacheWarning", "DamagedFileError", "DTypeError",
    "EagerFallbackWarning", "ExprError",
    "IndexOutOfRangeError", "InternalError", "LoopweaveError", "LoopweaveWarning", "LoweringError", "MissingExtraError",
    "OnnxImportError",
    "PerShapeCompileWarning", "ScheduleError", "ScheduleWarning", "TorchExportError",
    "Target", "TargetInfo", "target_info", "Expr", "Var", "cast", "const", "if_then_else", "select", "var",
    "abs", "ceil", "erf", "exp", "floor", "fmod", "log", "pow", "round", "rsqrt", "sigmoid", "sqrt", "tanh",
    "bitwise_and", "bitwise_not", "bitwise_or", "bitwise_xor", "shift_left", "shift_right", "argmax",
    "argmin", "comm_reducer", "max", "min", "prod", "sum", "Schedule", "Stage", "create_schedule", "IterVar",
    "Tensor", "compute", "placeholder", "reduce_axis", "thread_axis", "Trace", "lower", "build", "Module",
    "from_onnx", "from_torch", "compile", "load", "DeviceArray", "device_array", "from_dlpack",
    "memory_limit", "set_memory_limit", "extract_tasks",
]
