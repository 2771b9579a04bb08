"""Neural-network operators and whole networks, in three subpackages that import one way:

- ``ops/``: the op library.  ``nn_ops.matmul(A, B)`` etc. return tensors;
  ``nn_ops.schedule(outputs, target)`` returns a Schedule with each op's default
  schedule for ``target`` applied.
- ``network/``: the network compiler (graph IR, op table, graph passes, executables).
- ``onnx_import/``: ONNX models to graphs (``from_onnx``), converters by op family.

``compile.py`` is the front door for networks (``lw.compile`` / ``lw.load``), and
``testing/`` holds bundled models, the conformance runner and the onnxruntime comparison.
"""
from .ops.matmul import batch_matmul, dense, matmul
from .ops.registry import register_schedule, schedule
from .ops.elementwise import (add, clip, divide, hard_sigmoid, hard_swish, leaky_relu, maximum, minimum, multiply,
                              relu, sigmoid, subtract, tanh)
from .ops.pooling import global_pool, pool2d
from .ops.shape import concat, pad, reshape, softmax, transpose
from .network.graph import Graph, Node, Value

from .ops.conv2d import conv2d
from .ops.conv2d_transpose import conv2d_transpose

__all__ = ["matmul", "dense", "batch_matmul", "schedule", "register_schedule", "add", "subtract", "multiply",
           "divide", "maximum", "minimum", "relu", "clip", "sigmoid", "tanh", "leaky_relu", "hard_sigmoid",
           "hard_swish", "pool2d", "global_pool", "reshape", "transpose", "concat", "pad", "softmax", "conv2d",
           "conv2d_transpose",
           "Graph", "Node", "Value"]
