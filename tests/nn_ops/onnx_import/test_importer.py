"""The importer's use of ONNX shape inference (nn_ops/onnx_import/importer.py)."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

from loopweave.nn_ops.onnx_import.importer import _without_weight_data  # noqa: E402
from loopweave.nn_ops.testing.model_zoo import transformer_encoder  # noqa: E402


def test_shape_inference_gets_the_model_without_its_float_weights_and_infers_the_same():
    """Shape inference serialised every weight into C++ and back (GPT-2: 1.4 s of its import); it
    never reads a float weight's values, so it gets the model without them and must infer exactly
    what it inferred with them.  Integer tensors (shape operands) keep their data."""
    from onnx import numpy_helper
    model = transformer_encoder(layers=1)
    # a large integer tensor (ids, an index table) keeps its data: shape computations may read it
    model.graph.initializer.append(numpy_helper.from_array(np.arange(5000, dtype=np.int64), "big_ids"))
    before = model.SerializeToString()
    slim = _without_weight_data(model)
    assert model.SerializeToString() == before                 # the caller's model is untouched
    by_name = {t.name: t for t in slim.graph.initializer}
    big = [t for t in model.graph.initializer
           if t.data_type == onnx.TensorProto.FLOAT and int(np.prod(t.dims)) > 1024]
    assert big
    for t in big:
        s = by_name[t.name]
        assert list(s.dims) == list(t.dims) and s.data_type == t.data_type
        assert not s.raw_data and not s.float_data
    ints = [t for t in model.graph.initializer if t.data_type == onnx.TensorProto.INT64]
    assert "big_ids" in {t.name for t in ints}
    for t in ints:
        assert by_name[t.name].SerializeToString() == t.SerializeToString()
    full = onnx.shape_inference.infer_shapes(model, strict_mode=False, data_prop=True)
    typed = onnx.shape_inference.infer_shapes(slim, strict_mode=False, data_prop=True)
    assert [str(v) for v in typed.graph.value_info] == [str(v) for v in full.graph.value_info]
    assert [str(v) for v in typed.graph.output] == [str(v) for v in full.graph.output]
    assert len(slim.SerializeToString()) < len(before) / 10
