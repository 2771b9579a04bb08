"""ONNX backend node tests (from the ``onnx`` package) for every op the importer converts.

Each case whose nodes all have converters and whose inputs are float32 (int64 inputs,
such as axes or starts, are baked in as initializers: loopweave compiles static shapes)
is imported, compiled and run; outputs must match the reference within the
case's tolerances.  Cases that use something loopweave rejects on purpose must raise
``OnnxImportError`` naming it (never a crash): ``EXPECTED_UNSUPPORTED`` lists them.
"""
import numpy as np
import pytest

onnx = pytest.importorskip("onnx")

import loopweave as lw  # noqa: E402
from loopweave.errors import OnnxImportError  # noqa: E402
from loopweave.nn_ops.onnx_import.context import CONVERTERS  # noqa: E402
from loopweave.nn_ops.onnx_import.fold import FOLDERS  # noqa: E402

EXPECTED_UNSUPPORTED = {
    # 1-d / 3-d pooling, training-mode batch norm, integer tensors,
    # empty tensors: each must be reported by name in an OnnxImportError
    "test_averagepool_1d_default",
    "test_averagepool_3d_default",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_False",
    "test_averagepool_3d_dilations_large_count_include_pad_is_0_ceil_mode_is_True",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_False",
    "test_averagepool_3d_dilations_large_count_include_pad_is_1_ceil_mode_is_True",
    "test_averagepool_3d_dilations_small",
    "test_batchnorm_epsilon_training_mode",
    "test_batchnorm_example_training_mode",
    "test_maxpool_1d_default",
    "test_maxpool_3d_default",
    "test_maxpool_3d_dilations",
    "test_maxpool_3d_dilations_use_ref_impl",
    "test_maxpool_3d_dilations_use_ref_impl_large",
    "test_pow_types_float32_int64",
    "test_reduce_max_empty_set",
    "test_reduce_min_empty_set",
    "test_reduce_sum_empty_set",
    "test_reduce_sum_empty_set_non_reduced_axis_zero",
    "test_reshape_allowzero_reordered",
    "test_slice_start_out_of_bounds",
    "test_split_zero_size_splits_opset13",
    "test_split_zero_size_splits_opset18",
}


def _cases():
    import warnings
    from onnx.backend.test.case.node import collect_testcases
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        cases = collect_testcases()
    selected = []
    for case in cases:
        if case.name.endswith("_expanded") or "_expanded_" in case.name:
            continue
        ops = {n.op_type for n in case.model.graph.node}
        if not ops or not ops <= set(CONVERTERS):
            continue
        if not case.data_sets:
            continue
        inputs, outputs = case.data_sets[0]
        if not all(isinstance(a, np.ndarray) and a.dtype == np.float32 for a in list(outputs)):
            continue
        if not all(isinstance(a, np.ndarray) and a.dtype in (np.float32, np.int64) for a in inputs):
            continue
        selected.append(case)
    return selected


def _bake_integer_inputs(case):
    """Integer inputs (axes, starts, shapes...) become initializers: loopweave needs them static."""
    from onnx import numpy_helper
    inputs, _ = case.data_sets[0]
    model = onnx.ModelProto()
    model.CopyFrom(case.model)
    graph_inputs = list(model.graph.input)
    kept, feeds = [], []
    for vi, arr in zip(graph_inputs, inputs):
        if arr.dtype == np.int64:
            model.graph.initializer.append(numpy_helper.from_array(arr, vi.name))
        else:
            kept.append(vi)
            feeds.append(arr)
    del model.graph.input[:]
    model.graph.input.extend(kept)
    return model, feeds


def run_case(case):
    """(status, detail): 'pass', 'unsupported' (clean OnnxImportError) or 'fail'."""
    _, outputs = case.data_sets[0]
    model, inputs = _bake_integer_inputs(case)
    try:
        g = lw.from_onnx(model)
    except OnnxImportError as exc:
        return "unsupported", str(exc).splitlines()[-1]
    exe = lw.compile(g, progress=False)
    feed = {name: arr for name, arr in zip(g.inputs, inputs)}
    got = exe.run(feed)
    for a, b in zip(got, outputs):
        if a.shape != b.shape or not np.allclose(a, b, rtol=max(case.rtol, 1e-4), atol=max(case.atol, 1e-5),
                                                 equal_nan=True):
            return "fail", f"max abs diff {float(np.abs(a - b).max()) if a.shape == b.shape else a.shape}"
    return "pass", ""


_CASES = _cases() if __name__ != "__main__" else []


@pytest.mark.parametrize("case", _CASES, ids=[c.name for c in _CASES])
def test_onnx_backend_node_case(case):
    status, detail = run_case(case)
    if case.name in EXPECTED_UNSUPPORTED:
        assert status == "unsupported", detail
    else:
        assert status == "pass", detail


if __name__ == "__main__":
    counts = {}
    for case in _cases():
        try:
            status, detail = run_case(case)
        except Exception as exc:  # noqa: BLE001 - a report, not a test
            status, detail = "crash", f"{type(exc).__name__}: {exc}"
        counts[status] = counts.get(status, 0) + 1
        if status != "pass":
            print(f"{case.name:<50} {status:<12} {detail[:150]}")
    print(counts)
