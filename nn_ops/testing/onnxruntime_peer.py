"""Interleaved latency comparison of a compiled network against onnxruntime (see ``loopweave.backends.timing``)."""
from __future__ import annotations

from typing import Optional

import numpy as np


from ...backends.timing import Comparison, interleaved, set_threads  # noqa: F401 - re-exported for the CLI


def onnxruntime_session(model, threads: int):
    import onnxruntime as ort
    opts = ort.SessionOptions()
    opts.intra_op_num_threads = threads
    opts.inter_op_num_threads = 1
    data = model if isinstance(model, (bytes, str)) else model.SerializeToString()
    return ort.InferenceSession(data, opts, providers=["CPUExecutionProvider"])


def random_feed(exe, seed: int = 0):
    """Random inputs for ``exe``; symbolic sizes (a dynamic batch) are set to 1."""
    rng = np.random.default_rng(seed)
    return {name: rng.standard_normal(tuple(1 if isinstance(d, str) else d for d in shape)).astype(dtype)
            for name, shape, dtype in exe.inputs}


def compare_with_onnxruntime(model, exe, threads: int = 2, pairs: int = 15, feed: Optional[dict] = None,
                             check: bool = True, clock=None) -> Comparison:
    """Time ``exe`` against onnxruntime on ``model`` (a ModelProto or path), interleaved (by ``clock``:
    wall time unless given, see ``backends.timing.interleaved``)."""
    import onnx
    if not isinstance(model, onnx.ModelProto):
        model = onnx.load(model)
    set_threads(threads)
    sess = onnxruntime_session(model, threads)
    feed = feed or random_feed(exe)
    if check:
        ours, theirs = exe.run(feed), sess.run(None, feed)
        for a, b in zip(ours, theirs):
            scale = max(1e-6, float(np.abs(b).max()))
            if not np.allclose(a, b, rtol=1e-3, atol=1e-3 * scale):
                raise AssertionError(f"loopweave and onnxruntime disagree: max abs diff "
                                     f"{float(np.abs(a - b).max()):.3g} at output scale {scale:.3g}")
    timing = {"clock": clock} if clock else {}
    return interleaved(lambda: exe.run(feed), lambda: sess.run(None, feed), pairs=pairs, **timing)
