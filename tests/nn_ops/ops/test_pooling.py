"""NCHW pooling (``nn_ops/ops/pooling.py``): average windows divide as ONNX says; bad dtypes are refused."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops
from loopweave.errors import DTypeError
from loopweave.nn_ops.ops import pooling

ort = pytest.importorskip("onnxruntime")
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder  # noqa: E402


@pytest.mark.parametrize("kernel,stride,pad,ceil_mode,include_pad", [
    (3, 1, 1, False, False), (3, 2, 1, True, False), (3, 2, 1, True, True), (2, 2, 0, False, False)])
def test_average_pools_match_onnxruntime(kernel, stride, pad, ceil_mode, include_pad):
    b = OnnxBuilder(0)
    y = b.node("AveragePool", ["input"], kernel_shape=[kernel] * 2, strides=[stride] * 2, pads=[pad] * 4,
               ceil_mode=int(ceil_mode), count_include_pad=int(include_pad))
    model = b.model((1, 3, 11, 11), y)
    x = np.random.default_rng(2).standard_normal((1, 3, 11, 11)).astype("float32")
    X = lw.placeholder(x.shape, name="X")
    Y = pooling.pool2d(X, (kernel,) * 2, (stride,) * 2, (pad,) * 4, pool_type="avg", ceil_mode=ceil_mode,
                       count_include_pad=include_pad)
    got = np.empty(tuple(int(d.value) for d in Y.shape), "float32")
    lw.build(nn_ops.schedule(Y), [X, Y])(x, got)
    want, = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-6)


def test_an_integer_average_pool_is_refused_by_name():
    X = lw.placeholder((1, 2, 4, 4), dtype="int32", name="X")
    with pytest.raises(DTypeError, match="average pooling takes a float tensor, got int32"):
        pooling.pool2d(X, (2, 2), (2, 2), pool_type="avg")
