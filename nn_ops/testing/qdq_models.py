"""Models quantized by onnxruntime's static quantizer (its QDQ or QOperator format), for tests and benchmarks.

``static_qdq(model, samples)`` runs ``onnxruntime.quantization.quantize_static`` with the given input
samples as calibration data (uint8 activations, int8 weights, per output channel by default): the
models people get when they quantize for a CPU with onnxruntime's own tools.
"""
from __future__ import annotations

import logging
import os
import tempfile
from typing import Dict, List

import numpy as np


def static_qdq(model, samples: List[Dict[str, np.ndarray]], per_channel: bool = True, qoperator: bool = False):
    """``model`` quantized statically in the QDQ format (``qoperator``: the QOperator format, with
    onnxruntime's ``com.microsoft`` QLinear* operators), calibrated on ``samples`` (feeds)."""
    import onnx
    from onnxruntime.quantization import CalibrationDataReader, QuantFormat, QuantType, quantize_static

    class Samples(CalibrationDataReader):
        def __init__(self):
            self._left = iter(samples)

        def get_next(self):
            return next(self._left, None)

    logging.getLogger().setLevel(logging.ERROR)     # its advice to pre-process the model first
    with tempfile.TemporaryDirectory() as tmp:
        src, dst = os.path.join(tmp, "model.onnx"), os.path.join(tmp, "qdq.onnx")
        onnx.save(model, src)
        quantize_static(src, dst, Samples(), quant_format=QuantFormat.QOperator if qoperator else QuantFormat.QDQ, per_channel=per_channel,
                        activation_type=QuantType.QUInt8, weight_type=QuantType.QInt8)
        return onnx.load(dst)
