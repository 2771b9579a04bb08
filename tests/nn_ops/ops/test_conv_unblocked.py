"""A blocked conv whose result leaves the blocked layout (a lone conv) stores NCHW rows from its own
kernel: one kernel for conv, epilogue and from_blocked, on rows that split into transpose tiles or
not, and the same values as onnxruntime."""
import numpy as np
import pytest

import loopweave as lw
from loopweave.nn_ops.network.passes import fuse_operators, optimize
from loopweave.nn_ops.testing.model_zoo import OnnxBuilder

onnx = pytest.importorskip("onnx")
ort = pytest.importorskip("onnxruntime")


def _kernels(model):
    return [tuple(n.op_type for n in grp.nodes) for grp in fuse_operators(optimize(lw.from_onnx(model)))
            if grp.kind != "alias"]


def _check(model, shape):
    exe = lw.compile(lw.from_onnx(model), progress=False)
    x = np.random.default_rng(1).standard_normal(shape).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    np.testing.assert_allclose(exe.run({"input": x})[0], want[0], rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("hw, stride, relu", [(13, 1, True), (32, 2, False), (9, 2, True), (4, 1, True), (7, 1, False)])
def test_a_lone_blocked_conv_is_one_kernel_with_its_from_blocked(hw, stride, relu):
    """3x3 convs (direct, blocked after one to_blocked) whose output rows are 13, 16, 5, 4 and 7 pixels
    wide: whole transpose tiles, a shifted last tile, one tile of 4."""
    b = OnnxBuilder()
    y = b.conv("input", 16, 32, 3, stride=stride, bias=True)
    y = b.relu(y) if relu else y
    out = (hw - 1) // stride + 1
    model = b.model((1, 16, hw, hw), y, (1, 32, out, out))
    kernels = _kernels(model)
    assert ("from_blocked",) not in kernels and any(k[0] == "conv2d_blocked" and k[-1] == "from_blocked"
                                                    for k in kernels), kernels
    _check(model, (1, 16, hw, hw))


def test_rows_under_four_pixels_and_dropped_padding_keep_the_from_blocked_apart():
    """A row of 3 pixels holds no transpose tile; a result padded to whole vectors (24 channels with
    16-lane vectors) loses its padding in the from_blocked: both stay two kernels, with the same values."""
    b = OnnxBuilder()
    model = b.model((1, 16, 3, 3), b.relu(b.conv("input", 16, 32, 3, bias=True)), (1, 32, 3, 3))
    kernels = _kernels(model)
    assert ("from_blocked",) in kernels, kernels
    _check(model, (1, 16, 3, 3))
    b = OnnxBuilder()
    model = b.model((1, 16, 12, 12), b.conv("input", 16, 24, 3, bias=True), (1, 24, 12, 12))
    _check(model, (1, 16, 12, 12))


def test_a_conv_result_also_read_blocked_keeps_its_from_blocked_apart():
    """A result another conv reads blocked and a graph output reads in NCHW: the conv writes it blocked
    once, and the from_blocked copies it out."""
    b = OnnxBuilder()
    y = b.relu(b.conv("input", 16, 32, 3, bias=True))
    z = b.conv(y, 32, 32, 1)
    model = b.model((1, 16, 10, 10), z, (1, 32, 10, 10))
    model.graph.output.append(onnx.helper.make_tensor_value_info(y, onnx.TensorProto.FLOAT, [1, 32, 10, 10]))
    kernels = _kernels(model)
    assert ("from_blocked",) in kernels, kernels
    exe = lw.compile(lw.from_onnx(model), progress=False)
    x = np.random.default_rng(1).standard_normal((1, 16, 10, 10)).astype("float32")
    want = ort.InferenceSession(model.SerializeToString(), providers=["CPUExecutionProvider"]).run(None, {"input": x})
    for got, ref in zip(exe.run({"input": x}), want):
        np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-4)


def test_as_avx2_code_with_16_registers_the_conv_stores_nchw_rows_itself():
    """AVX2 code (16 vector registers, ``UNBLOCKED_MIN_REGISTERS``): one kernel for the conv, its
    epilogue and the from_blocked, on rows of whole 8-pixel tiles and a shifted last one, with the same
    values as onnxruntime."""
    from loopweave.target import compiling_for, resolve_target
    avx2 = resolve_target("llvm -mcpu=x86-64-v3")
    if not avx2.runs_here():
        pytest.skip("this machine does not run x86-64-v3 code")
    b = OnnxBuilder()
    model = b.model((1, 16, 13, 13), b.relu(b.conv("input", 16, 32, 3, bias=True)), (1, 32, 13, 13))
    with compiling_for(avx2):
        kernels = _kernels(model)
        assert ("from_blocked",) not in kernels and any(k[0] == "conv2d_blocked" and k[-1] == "from_blocked"
                                                        for k in kernels), kernels
        _check(model, (1, 16, 13, 13))


def test_a_map_whose_weights_stream_keeps_its_from_blocked_apart():
    """A 7x7 map with channel-block pairs enough for the threads: the blocked schedule computes the whole
    map per pair as its weights stream by (each read once), which a row-by-row kernel would lose."""
    from loopweave.nn_ops.ops.conv_unblocked import UNBLOCKED_MIN_REGISTERS
    from loopweave.nn_ops.ops.nchwc import runs_unblocked
    from loopweave.target import resolve_target
    target = resolve_target("llvm")
    if target.vector_registers < UNBLOCKED_MIN_REGISTERS:
        pytest.skip(f"{target.vector_registers} registers: never unblocked in the conv's kernel")
    b = OnnxBuilder()
    model = b.model((1, 64, 7, 7), b.relu(b.conv("input", 64, 512, 1, bias=True)), (1, 512, 7, 7))
    lanes = target.lanes("float32")
    assert not runs_unblocked((1, 512 // lanes, 7, 7, lanes), (512 // lanes, 8, 1, 1, 8, lanes), target)
    assert runs_unblocked((1, 512 // lanes, 14, 14, lanes), (512 // lanes, 8, 1, 1, 8, lanes), target)
    kernels = _kernels(model)
    assert ("from_blocked",) in kernels, kernels
    _check(model, (1, 64, 7, 7))
