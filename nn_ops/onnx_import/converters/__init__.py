"""ONNX converters by operator family: importing a module registers its converters in
``context.CONVERTERS`` (op type and opset range -> function)."""
from . import (attention, bitwise, conv_transpose, elementwise, index, logic, loss, math, nn,  # noqa: F401
               normalization, qoperator, quantized, recurrent, reduce, shape)
