"""Index, scatter, spatial-sampling and loss ops compiled once (``compile_once/general_ops.py``):
data, indices and maps of symbolic sizes, each at several bindings including sizes of 1, against
onnxruntime."""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")
from onnx import TensorProto, helper, numpy_helper  # noqa: E402

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402

from .test_builder import _ort  # noqa: E402


def _model(nodes, inputs, outputs, initializers=(), opset=18):
    """inputs: [(name, numpy dtype, shape)]; outputs: [(name, numpy dtype, rank)], of sizes left open
    (ONNX's inference knows no sizes computed from shapes, as a window's length)."""
    def info(name, dtype, shape):
        return helper.make_tensor_value_info(name, helper.np_dtype_to_tensor_dtype(np.dtype(dtype)), shape)
    graph = helper.make_graph(nodes, "g", [info(*i) for i in inputs], [info(n, d, [None] * r) for n, d, r in outputs],
                              initializer=[numpy_helper.from_array(a, n) for n, a in initializers])
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", opset)], ir_version=8)


def _compiled_once(model, kernels):
    """The model compiled once; each of ``kernels`` (``poly_<key>``) among its calls (not a fallback)."""
    exe = lw.compile(lw.from_onnx(model), polymorphic=True)
    assert set(kernels) <= {c.module.name for c in exe.calls}
    return exe


def _matches(model, exe, feeds, exact=True):
    """Each feed's outputs against onnxruntime's: equal, or (``exact=False``) within 1e-5."""
    for feed in feeds:
        for got, want in zip(exe.run(feed), _ort(model, feed)):
            assert got.shape == want.shape
            if exact:
                np.testing.assert_array_equal(got, want)
            else:
                np.testing.assert_allclose(got, want, rtol=1e-5, atol=1e-5)


def test_gather_nd_scatters_and_reverse_sequence_compile_once():
    """GatherND with a batch axis and without, ScatterND and ScatterElements (reductions too, indices
    shorter than the data along a symbolic axis), ReverseSequence: computed indices (negative ones
    count from the end) into data of symbolic sizes, exact."""
    node = helper.make_node
    nodes = [node("GatherND", ["data", "rows"], ["picked"], batch_dims=1),
             node("GatherND", ["data", "points"], ["at"]),
             node("ScatterND", ["data", "slots", "slabs"], ["put"]),
             node("ScatterND", ["data", "slots", "slabs"], ["added"], reduction="add"),
             node("ScatterElements", ["data", "cols", "values"], ["set"], axis=1),
             node("ScatterElements", ["data", "cols", "values"], ["maxed"], axis=1, reduction="max"),
             node("ScatterElements", ["data", "cols", "values"], ["scaled"], axis=1, reduction="mul"),
             node("ReverseSequence", ["data", "lengths"], ["reversed"], batch_axis=0, time_axis=1)]
    model = _model(nodes, [("data", np.float32, ["N", "S", 3]), ("rows", np.int64, ["N", "K", 1]),
                           ("points", np.int64, ["P", 2]), ("slots", np.int64, ["J", 1]),
                           ("slabs", np.float32, ["J", "S", 3]), ("cols", np.int64, ["M", "T", 3]),
                           ("values", np.float32, ["M", "T", 3]), ("lengths", np.int64, ["N"])],
                   [(o.output[0], np.float32, 2 if o.output[0] == "at" else 3) for o in nodes])
    exe = _compiled_once(model, ["poly_gather_nd", "poly_scatter_nd", "poly_scatter_elements",
                                 "poly_reverse_sequence"])
    rng = np.random.default_rng(0)
    feeds = []
    for n, s, k, p, j, m, t in ((1, 1, 1, 1, 1, 1, 1), (4, 6, 2, 5, 3, 2, 4)):
        feeds.append({"data": rng.standard_normal((n, s, 3)).astype(np.float32),
                      "rows": rng.integers(-s, s, (n, k, 1)),
                      "points": np.stack([rng.integers(-n, n, p), rng.integers(-s, s, p)], axis=1),
                      "slots": (rng.permutation(n)[:j] - n * (np.arange(j) % 2)).reshape(j, 1),    # distinct rows
                      "slabs": rng.standard_normal((j, s, 3)).astype(np.float32),
                      "cols": np.stack([np.stack([rng.permutation(s)[:t] - s * (c % 2) for c in range(3)], axis=1)
                                        for _ in range(m)]),      # distinct along the scattered axis
                      "values": rng.standard_normal((m, t, 3)).astype(np.float32),
                      "lengths": rng.integers(1, s + 1, n)})
    _matches(model, exe, feeds)


# (the trial import at sizes of 1 folds the window of length 1 that is not periodic: ONNX's 0 / 0, a NaN, as
# onnxruntime gives it)
@pytest.mark.filterwarnings("ignore:invalid value encountered in divide:RuntimeWarning")
def test_eye_like_center_crop_pad_windows_and_compress_compile_once():
    """EyeLike of a matrix of symbolic sides; CenterCropPad to constant sizes over axes of symbolic
    size, cropped or padded by the binding (by odd amounts too); the three windows of a length read
    from a shape; Compress by a constant condition along a static axis and flattened."""
    node = helper.make_node
    nodes = [node("EyeLike", ["x"], ["eye"], k=1),
             node("EyeLike", ["x"], ["eye_int"], k=-2, dtype=TensorProto.INT32),
             node("CenterCropPad", ["x", "target"], ["centred"]),
             node("Shape", ["x"], ["s"], start=1, end=2),
             node("Squeeze", ["s"], ["length"]),
             node("HannWindow", ["length"], ["hann"]),
             node("HammingWindow", ["length"], ["hamming"], periodic=0),
             node("BlackmanWindow", ["length"], ["blackman"], output_datatype=TensorProto.DOUBLE),
             node("Compress", ["y", "keep"], ["kept"], axis=1),
             node("Compress", ["z", "keep"], ["flat"])]
    outputs = [("eye", np.float32, 2), ("eye_int", np.int32, 2), ("centred", np.float32, 2),
               ("hann", np.float32, 1), ("hamming", np.float32, 1), ("blackman", np.float64, 1),
               ("kept", np.float32, 3), ("flat", np.float32, 1)]
    model = _model(nodes, [("x", np.float32, ["N", "S"]), ("y", np.float32, ["N", 5, "S"]), ("z", np.float32, [2, 3])],
                   outputs, initializers=[("target", np.array([4, 3], np.int64)),
                                          ("keep", np.array([1, 0, 1, 1], bool))])
    exe = _compiled_once(model, ["poly_eye_like", "poly_center_crop_pad", "poly_window", "poly_compress"])
    rng = np.random.default_rng(1)
    _matches(model, exe, [{"x": rng.standard_normal((n, s)).astype(np.float32),
                           "y": rng.standard_normal((n, 5, s)).astype(np.float32),
                           "z": rng.standard_normal((2, 3)).astype(np.float32)}
                          for n, s in ((1, 1), (3, 2), (4, 5), (7, 8))], exact=False)


def test_lp_pool_grid_sample_and_affine_grid_compile_once():
    """LpPool (padded, strided; p 3 and 2) of a map of symbolic size; GridSample of an image of any
    size at a grid of symbolic size (each mode, each padding mode; a 1-pixel image, whose mirror with
    aligned corners is one point); AffineGrid to a constant size (corners aligned) and to a size read
    from a shape."""
    node = helper.make_node
    nodes = [node("LpPool", ["x"], ["lp3"], kernel_shape=[3, 2], strides=[2, 1], pads=[1, 0, 1, 1], p=3),
             node("LpPool", ["x"], ["lp2"], kernel_shape=[2, 2], pads=[0, 0, 1, 1], p=2),
             node("GridSample", ["image", "grid"], ["linear"], padding_mode="border"),
             node("GridSample", ["image", "grid"], ["nearest"], mode="nearest", align_corners=1),
             node("GridSample", ["image", "grid"], ["cubic"], mode="cubic", padding_mode="reflection"),
             node("GridSample", ["image", "grid"], ["mirror"], padding_mode="reflection", align_corners=1),
             node("AffineGrid", ["theta_of_2", "size"], ["fixed"], align_corners=1),
             node("Shape", ["x"], ["shape"]),
             node("AffineGrid", ["theta", "shape"], ["sized"])]
    model = _model(nodes, [("x", np.float32, ["N", 3, "H", "W"]), ("image", np.float32, ["N", 2, "A", "B"]),
                           ("grid", np.float32, ["N", "P", "Q", 2]), ("theta", np.float32, ["N", 2, 3]),
                           ("theta_of_2", np.float32, [2, 2, 3])],
                   [(o, np.float32, 4) for o in ("lp3", "lp2", "linear", "nearest", "cubic", "mirror", "fixed",
                                                    "sized")],
                   initializers=[("size", np.array([2, 1, 3, 4], np.int64))], opset=20)
    exe = _compiled_once(model, ["poly_lp_pool", "poly_grid_sample", "poly_affine_grid"])
    rng = np.random.default_rng(2)
    _matches(model, exe, [{"x": rng.standard_normal((n, 3, h, w)).astype(np.float32),
                           "image": rng.standard_normal((n, 2, a, b)).astype(np.float32),
                           "grid": rng.uniform(-1.3, 1.3, (n, p, q, 2)).astype(np.float32),
                           "theta": rng.standard_normal((n, 2, 3)).astype(np.float32),
                           "theta_of_2": rng.standard_normal((2, 2, 3)).astype(np.float32)}
                          for n, h, w, p, q, a, b in ((1, 1, 1, 1, 1, 1, 1), (3, 5, 7, 3, 2, 4, 5),
                                                      (2, 2, 3, 2, 3, 1, 6))], exact=False)


def test_losses_compile_once():
    """NegativeLogLikelihoodLoss and SoftmaxCrossEntropyLoss (its log-softmax output too) with each
    reduction, class weights and an ignored class, over a batch and an extra axis of symbolic size."""
    node = helper.make_node
    nodes = [node("NegativeLogLikelihoodLoss", ["x", "target"], ["each"], reduction="none"),
             node("NegativeLogLikelihoodLoss", ["x", "target", "weight"], ["mean"], ignore_index=1),
             node("NegativeLogLikelihoodLoss", ["x", "target"], ["sum"], reduction="sum"),
             node("SoftmaxCrossEntropyLoss", ["x", "target", "weight"], ["ce", "log_prob"], reduction="sum",
                  ignore_index=2),
             node("SoftmaxCrossEntropyLoss", ["x", "target"], ["ce_mean"])]
    model = _model(nodes, [("x", np.float32, ["N", 4, "D"]), ("target", np.int64, ["N", "D"])],
                   [("each", np.float32, 2), ("mean", np.float32, 0), ("sum", np.float32, 0), ("ce", np.float32, 0),
                    ("log_prob", np.float32, 3), ("ce_mean", np.float32, 0)],
                   initializers=[("weight", np.array([0.5, 1.0, 2.0, 0.25], np.float32))], opset=13)
    exe = _compiled_once(model, ["poly_loss", "poly_log_softmax"])
    rng = np.random.default_rng(3)
    feeds = []
    for n, d in ((1, 1), (3, 5)):
        target = rng.integers(0, 4, (n, d))
        target[-1, -1] = 1      # (one ignored at least)
        feeds.append({"x": rng.standard_normal((n, 4, d)).astype(np.float32), "target": target})
    _matches(model, exe, feeds, exact=False)


def test_what_the_index_and_sampling_kernels_refuse_is_said_by_name():
    """Coordinates of a symbolic depth, a Compress whose output size would depend on the binding: each
    named (the model compiles per shape instead)."""
    node = helper.make_node
    nodes = [node("GatherND", ["x", "coordinates"], ["picked"]),
             node("Compress", ["x", "keep"], ["kept"], axis=1)]
    model = _model(nodes, [("x", np.float32, ["N", "S", "H", "W"]), ("coordinates", np.int64, ["K", "D"])],
                   [("picked", np.float32, 2), ("kept", np.float32, 4)],
                   initializers=[("keep", np.array([1, 0, 1], bool))], opset=16)
    with pytest.raises(OnnxImportError, match=r"(?s)GatherND: GatherND coordinates of the symbolic depth D.*"
                                              r"Compress: a Compress along the axis 1 of symbolic size S"):
        lw.compile(lw.from_onnx(model), polymorphic=True)
