"""Tooling for tests, demos and benchmarks of whole networks: bundled models built in memory
(``model_zoo.py``), the ONNX backend conformance runner (``conformance.py``) and the
interleaved comparison with onnxruntime (``onnxruntime_peer.py``) and exact references for
quantized models (``integer_reference.py``)."""
