"""The op library: compute definitions plus a default schedule per target.

``nn_ops.matmul(A, B)`` etc. return tensors; ``nn_ops.schedule(outputs, target)``
returns a Schedule with each op's default schedule applied.  Whole networks:
``graph`` (the graph IR), ``onnx_import`` (``from_onnx``), ``graph_passes`` and
``executor`` (``compile`` / ``load``).
"""
from .matmul import batch_matmul, dense, matmul
from .registry import register_schedule, schedule
from .elementwise import (add, clip, divide, hard_sigmoid, hard_swish, leaky_relu, maximum, minimum, multiply, relu,
                          sigmoid, subtract, tanh)
from .pooling import global_pool, pool2d
from .shape_ops import concat, pad, reshape, softmax, transpose
from .graph import Graph, Node, Value

from .conv2d import conv2d
from .conv2d_transpose import conv2d_transpose
from . import cuda as _cuda_schedules  # noqa: F401  (registers the default CUDA schedules)

__all__ = ["matmul", "dense", "batch_matmul", "schedule", "register_schedule", "add", "subtract", "multiply",
           "divide", "maximum", "minimum", "relu", "clip", "sigmoid", "tanh", "leaky_relu", "hard_sigmoid",
           "hard_swish", "pool2d", "global_pool", "reshape", "transpose", "concat", "pad", "softmax", "conv2d",
           "conv2d_transpose",
           "Graph", "Node", "Value"]
