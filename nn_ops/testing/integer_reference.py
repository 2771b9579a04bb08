"""Exact references for quantized models, and when onnxruntime is one.

ONNX's integer ops (MatMulInteger, ConvInteger, QLinearMatMul, DynamicQuantizeLinear) have exact
definitions, and loopweave computes them to the bit.  onnxruntime does not always: on an x86 CPU
without VNNI its u8 x s8 product (``vpmaddubsw``) adds pairs of products in 16 bits with
saturation, so a sum of two 255 * -128 products clips and a 768-deep dot product can be off by
tens.  Tests therefore compare with ``exact_reference`` (ONNX's reference evaluator, numpy
arithmetic of the definitions) and with onnxruntime only where ``onnxruntime_integer_product_is_exact``.
"""
from __future__ import annotations

from ...target import native_target

VNNI_FEATURES = frozenset({"avx512vnni", "avxvnni"})


def exact_reference(model, feed: dict) -> list:
    """The outputs of ``model`` for ``feed`` by ONNX's reference evaluator (exact integer arithmetic)."""
    from onnx.reference import ReferenceEvaluator
    return ReferenceEvaluator(model).run(None, feed)


def onnxruntime_integer_product_is_exact(weight_dtype: str) -> bool:
    """Whether onnxruntime's int8 product by a full-range weight of ``weight_dtype`` is exact on
    this machine: with a dot-product instruction (VNNI: 32-bit sums), for a uint8 weight (its
    u8 x u8 kernel widens before it adds), and on a CPU that is not x86.  (Weights within
    [-64, 63] would be exact everywhere: two products of 255 and 64 fit 16 bits.)  Asks the real
    CPU: onnxruntime knows nothing of ``LOOPWEAVE_HOST_TARGET``."""
    cpu = native_target()
    return weight_dtype == "uint8" or cpu.arch != "x86_64" or bool(VNNI_FEATURES & cpu.enabled_features())
