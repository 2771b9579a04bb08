"""Linear (de)quantization: ``y = (x - zero_point) * scale`` and
``q = clamp(round(x / scale) + zero_point)`` (ONNX DequantizeLinear / QuantizeLinear).

The scale (and zero point) is one value, one per position along ``axis``, or, with
``block_size``, one per block of ``block_size`` positions along ``axis`` (same rank as x).
Rounding is half to even; quantized values saturate to the integer type's range.
"""
from __future__ import annotations

from typing import Optional

import numpy as np

from ...dsl import dtypes
from ...dsl.expr import cast, const
from ...dsl.intrinsics import elementwise_max, elementwise_min, round as lw_round
from ...dsl.tensor import Tensor, compute
from ...errors import ExprError
from .elementwise import broadcast_index, extents, static_shape


def _param_index(param: Tensor, x_shape, axis: int, block_size: int):
    """How x's index maps to the scale/zero-point index."""
    pshape = static_shape(param)
    if len(pshape) == 0 or (len(pshape) == 1 and pshape[0] == 1 and not (isinstance(x_shape[axis], int)
                                                                         and x_shape[axis] == 1)):
        return lambda idx: (0,) * len(pshape)
    if not isinstance(x_shape[axis], int):
        raise ExprError(f"a scale of shape {pshape} along axis {axis} of symbolic size {x_shape[axis]} (per tensor, "
                        f"or along an axis of static size)")
    if block_size:
        if len(pshape) != len(x_shape):
            raise ExprError(f"blocked quantization needs a scale of rank {len(x_shape)}, got shape {pshape}")
        return lambda idx: tuple(i // block_size if a == axis else i for a, i in enumerate(idx))
    if pshape != (x_shape[axis],):
        raise ExprError(f"per-axis scale of shape {pshape} for axis {axis} of shape {x_shape}")
    return lambda idx: (idx[axis],)


def dequantize(x: Tensor, scale: Tensor, zero_point: Optional[Tensor] = None, axis: int = 1, block_size: int = 0,
               name: str = "dequantize") -> Tensor:
    shape = extents(x)          # symbolic extents allowed (shape-polymorphic kernels)
    axis = axis % len(shape) if shape else 0
    out = scale.dtype
    at = _param_index(scale, shape, axis, block_size)

    def body(*idx):
        v = cast(out, x[idx])
        if zero_point is not None:
            v = v - cast(out, zero_point[at(idx)])
        return v * scale[at(idx)]

    return compute(shape, body, name=name, tag="injective")


def quantize(x: Tensor, scale: Tensor, zero_point: Optional[Tensor], out_dtype: str, axis: int = 1,
             block_size: int = 0, name: str = "quantize") -> Tensor:
    if not dtypes.is_int(out_dtype):
        raise ExprError(f"quantize to {out_dtype} (an integer type expected)")
    shape = extents(x)
    axis = axis % len(shape) if shape else 0
    at = _param_index(scale, shape, axis, block_size)
    info = np.iinfo(out_dtype)
    work = x.dtype

    def body(*idx):
        q = lw_round(x[idx] / cast(work, scale[at(idx)]))
        if zero_point is not None:
            q = q + cast(work, zero_point[at(idx)])
        q = elementwise_min(elementwise_max(q, const(float(info.min), work)), const(float(info.max), work))
        return cast(out_dtype, q)

    return compute(shape, body, name=name, tag="injective")


def saturated(v, out_dtype: str, int32_range: bool):
    """Float ``v`` (float32 or float64) rounded half to even and saturated to ``out_dtype``: with
    ``int32_range`` (every ``v`` rounds into int32) saturated after the rounding, in int32, which the x86
    backend does in its saturating packs or truncations; else clamped in ``v``'s type first (equal: the
    bounds are integers)."""
    info = np.iinfo(out_dtype)
    if int32_range:
        q = cast("int32", lw_round(v))
        return cast(out_dtype, elementwise_min(elementwise_max(q, const(int(info.min), "int32")),
                                               const(int(info.max), "int32")))
    v = elementwise_min(elementwise_max(v, const(float(info.min), v.dtype)), const(float(info.max), v.dtype))
    return cast(out_dtype, cast("int32", lw_round(v)))


#: the largest magnitude a float32 may have to round into int32 (a margin below 2**31)
INT32_SAFE = float(2 ** 31 - 2 ** 8)


def rescale(x: Tensor, multiplier: Tensor, offset: Tensor, out_dtype: str, name: str = "rescale",
            int32_range: bool = False) -> Tensor:
    """``q = clamp(round(float32(x) * multiplier + offset))`` (half to even, saturated to ``out_dtype``),
    ``multiplier`` and ``offset`` broadcast to ``x``: a requantization between 8-bit values in one
    multiply-add, where a DequantizeLinear, float ops and a QuantizeLinear took a division and
    several more (``passes/fold_affine_requantization``, which proves it equal on every input, and
    ``int32_range`` where every value rounds into int32)."""
    if not dtypes.is_int(out_dtype):
        raise ExprError(f"rescale to {out_dtype} (an integer type expected)")
    for t in (multiplier, offset):
        if t.dtype != "float32":
            raise ExprError(f"rescale: {t.name} must be float32, got {t.dtype}")
    shape = extents(x)

    def body(*idx):
        v = cast("float32", x[idx]) * broadcast_index(multiplier, len(shape), idx) + \
            broadcast_index(offset, len(shape), idx)
        return saturated(v, out_dtype, int32_range)

    return compute(shape, body, name=name, tag="injective")


def rescale_add(a: Tensor, b: Tensor, multipliers, offset: float, out_dtype: str, name: str = "rescale_add") -> Tensor:
    """``q = clamp(round(float32(a) * ma + (float32(b) * mb + offset)))`` (half to even, saturated to
    ``out_dtype``), ``multipliers = (ma, mb)`` and ``offset`` float32 values: a residual add between
    8-bit values without their float32 maps (``passes/fold_quantized_add``, which proves it equal on
    every pair of inputs)."""
    if not dtypes.is_int(out_dtype):
        raise ExprError(f"rescale_add to {out_dtype} (an integer type expected)")
    shape = extents(a)
    if tuple(extents(b)) != tuple(shape):
        raise ExprError(f"rescale_add: operands of shapes {tuple(shape)} and {tuple(extents(b))} (equal shapes expected)")
    ma, mb = (const(float(np.float32(m)), "float32") for m in multipliers)
    int32_range = 255 * (abs(float(multipliers[0])) + abs(float(multipliers[1]))) + abs(float(offset)) < INT32_SAFE

    def body(*idx):
        v = cast("float32", a[idx]) * ma + (cast("float32", b[idx]) * mb + const(float(np.float32(offset)), "float32"))
        return saturated(v, out_dtype, int32_range)

    return compute(shape, body, name=name, tag="injective")
