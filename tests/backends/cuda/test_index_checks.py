"""Index checks in CUDA kernels: a gather's checked index, or any data-dependent load with
``checks="bounds"``, reports a bad index through the call's device error slot, and the module
raises ``IndexOutOfRangeError`` after the call, with the CPU's message; the kernel reads
element 0 instead of memory outside the tensor.  Run on the CPU through ``simt`` (the
generated CUDA C with its error slot), assembled by ptxas, and (marker ``gpu``) on a GPU."""
import shutil
import subprocess

import numpy as np
import pytest

import loopweave as lw
from loopweave.dsl.expr import checked_index

from .simt import HostMemoryDriver


def _gather(n=8, m=64, wrap=True):
    A = lw.placeholder((n,), name="A", dtype="float32")
    idx = lw.placeholder((m,), name="idx", dtype="int64")
    C = lw.compute((m,), lambda i: A[checked_index(idx[i], n, "axis 0 of 'A'", wrap=wrap)], name="C")
    s = lw.create_schedule(C)
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, lw.thread_axis("blockIdx.x"))
    s[C].bind(tx, lw.thread_axis("threadIdx.x"))
    return lw.build(s, [A, idx, C], target="cuda:sm_80")


def _rows_by_index():
    """``C[i, j] = A[idx[i], j]`` (int32 indices), checked only by ``checks="bounds"``; then doubled by a
    second kernel that gathers too: two kernels, one numbering of check sites."""
    A = lw.placeholder((8, 5), name="A", dtype="float32")
    idx = lw.placeholder((6,), name="idx", dtype="int32")
    C = lw.compute((6, 5), lambda i, j: A[idx[i], j], name="C")
    D = lw.compute((6, 5), lambda i, j: C[i, j] * 2.0 + A[idx[5 - i], j], name="D")
    s = lw.create_schedule(D)
    for t in (C, D):
        i, j = s[t].op.axis
        s[t].bind(i, lw.thread_axis("blockIdx.x"))
        s[t].bind(j, lw.thread_axis("threadIdx.x"))
    return lw.build(s, [A, idx, D], target="cuda:sm_80", checks="bounds")


def test_only_checking_kernels_take_an_error_slot():
    f = _gather()
    source = f.get_source("cuda")
    assert "unsigned long long* __restrict__ lw_err)" in source and "lw_checked_index<" in source
    assert f.checks_indices
    A, B = lw.placeholder((64,), name="A"), lw.placeholder((64,), name="B")
    C = lw.compute((64,), lambda i: A[i] + B[i], name="C")
    s = lw.create_schedule(C)
    bx, tx = s[C].split(C.op.axis[0], factor=32)
    s[C].bind(bx, lw.thread_axis("blockIdx.x"))
    s[C].bind(tx, lw.thread_axis("threadIdx.x"))
    plain = lw.build(s, [A, B, C], target="cuda")
    assert "lw_err" not in plain.get_source("cuda") and not plain.checks_indices


def test_a_bad_gather_index_raises_after_the_call(simt):
    run = simt(_gather())
    a = np.arange(8, dtype="float32") * 10
    good = np.random.default_rng(0).integers(-8, 8, 64)
    c = np.zeros(64, "float32")
    run(a, good, c)
    np.testing.assert_array_equal(c, a[good])
    for bad_value in (8, -9, 40000, 10**12, -2**63):
        bad = good.copy()
        bad[37] = bad_value
        with pytest.raises(lw.IndexOutOfRangeError, match=rf"main: index {bad_value} is out of range for axis 0 "
                                                          rf"of 'A', of size 8 \(valid: -8 to 7") as info:
            run(a, bad, c)
        assert (info.value.index, info.value.extent, info.value.what) == (bad_value, 8, "axis 0 of 'A'")
    run(a, good, c)       # the error slot was cleared: the next call runs
    np.testing.assert_array_equal(c, a[good])


def test_without_wrap_a_negative_index_is_out_of_range(simt):
    run = simt(_gather(wrap=False))
    with pytest.raises(lw.IndexOutOfRangeError, match=r"index -1 is out of range .* \(valid: 0 to 7\)"):
        run(np.zeros(8, "float32"), np.full(64, -1), np.zeros(64, "float32"))


def test_checks_bounds_on_cuda_names_the_kernel_and_the_load(simt):
    f = _rows_by_index()
    assert f.get_source("cuda").count("lw_checked_index<") >= 2
    run = simt(f)
    a = np.arange(40, dtype="float32").reshape(8, 5)
    idx = np.array([0, 7, 3, 3, 1, 6], "int32")
    d = np.zeros((6, 5), "float32")
    run(a, idx, d)
    np.testing.assert_array_equal(d, a[idx] * 2 + a[idx[::-1]])
    idx[2] = 8
    with pytest.raises(lw.IndexOutOfRangeError, match=r"index 8 is out of range for dimension 0 of 'A' \(read as "
                                                      r"A\[.*\] in 'main'\), of size 8 \(valid: 0 to 7\)"):
        run(a, idx, d)


def test_checking_kernels_assemble(cuda_compilers):
    ptx = _rows_by_index().get_source("ptx")
    assert "atom.global.cas.b64" in ptx
    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas to assemble the PTX")
    proc = subprocess.run([ptxas, "-arch=sm_80", "-o", "/dev/null", "-"], input=ptx, capture_output=True, text=True)
    assert proc.returncode == 0, proc.stderr[:2000]


def _embedding_network(checks=None):
    """Gather rows of an embedding table (the BERT case) and scale them: one checking kernel
    among others."""
    onnx = pytest.importorskip("onnx")
    from onnx import TensorProto, helper
    vocab, hidden = 50, 8
    nodes = [helper.make_node("Gather", ["table", "ids"], ["emb"], name="embeddings/Gather"),
             helper.make_node("Mul", ["emb", "emb"], ["out"], name="square"),
             helper.make_node("Relu", ["ids_f"], ["pos"], name="relu")]
    graph = helper.make_graph(nodes, "g", [
        helper.make_tensor_value_info("table", TensorProto.FLOAT, [vocab, hidden]),
        helper.make_tensor_value_info("ids", TensorProto.INT64, [2, 16]),
        helper.make_tensor_value_info("ids_f", TensorProto.FLOAT, [2, 16])], [
        helper.make_tensor_value_info("out", TensorProto.FLOAT, [2, 16, hidden]),
        helper.make_tensor_value_info("pos", TensorProto.FLOAT, [2, 16])])
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)], ir_version=8)
    assert onnx.checker.check_model(model) is None
    return lw.compile(lw.from_onnx(model), target="cuda", progress=False, checks=checks)


@pytest.mark.parametrize("checks", [None, "bounds"])
def test_a_network_names_the_node_of_a_bad_index(checks, simt_compiler, monkeypatch):
    """The network's kernels run through ``simt`` behind a host-memory driver, launch by launch."""
    from loopweave.backends.cuda import driver as cuda_driver
    exe = _embedding_network(checks)
    drv = HostMemoryDriver(*simt_compiler)
    for module in exe.modules.values():
        drv.load_kernels(module)
    monkeypatch.setattr(cuda_driver, "get_driver", lambda: drv)
    exe.cuda_graph = False
    rng = np.random.default_rng(0)
    table, ids = rng.standard_normal((50, 8)).astype("f4"), rng.integers(-50, 50, (2, 16))
    feed = {"table": table, "ids": ids, "ids_f": np.ones((2, 16), "f4")}
    np.testing.assert_array_equal(exe.run(feed)[0], table[ids] ** 2)
    for bad in (50, -51, 10**9):
        wrong = ids.copy()
        wrong[1, 7] = bad
        with pytest.raises(lw.IndexOutOfRangeError, match=rf"node 'embeddings/Gather' \(gather.*\): index {bad} is "
                                                          rf"out of range for axis 0 of 'table'") as info:
            exe.run(dict(feed, ids=wrong))
        assert info.value.node == "embeddings/Gather" and info.value.index == bad
    np.testing.assert_array_equal(exe.run(feed)[0], table[ids] ** 2)     # the slots were cleared


@pytest.mark.gpu
def test_a_bad_index_raises_on_the_gpu():
    f = _gather()
    a = np.arange(8, dtype="float32") * 10
    good = np.random.default_rng(0).integers(-8, 8, 64)
    c = np.zeros(64, "float32")
    f(a, good, c)
    np.testing.assert_array_equal(c, a[good])
    bad = good.copy()
    bad[37] = 40000
    with pytest.raises(lw.IndexOutOfRangeError, match=r"index 40000 is out of range for axis 0 of 'A'"):
        f(a, bad, c)
    da, dgood, dc = (lw.device_array(x) for x in (a, good, c))
    f(da, dgood, dc)                                   # the replayed path checks too
    with pytest.raises(lw.IndexOutOfRangeError, match=r"index 40000 is out of range"):
        f(da, lw.device_array(bad), dc)
    with pytest.raises(lw.IndexOutOfRangeError, match=r"index 40000 is out of range"):
        f.time(da, lw.device_array(bad), dc)          # timing bad indices says so, once
    f(da, dgood, dc)
    np.testing.assert_array_equal(dc.numpy(), a[good])


@pytest.mark.gpu
def test_a_network_names_the_node_of_a_bad_index_on_the_gpu():
    exe = _embedding_network()
    rng = np.random.default_rng(0)
    table, ids = rng.standard_normal((50, 8)).astype("f4"), rng.integers(-50, 50, (2, 16))
    feed = {"table": table, "ids": ids, "ids_f": np.ones((2, 16), "f4")}
    np.testing.assert_array_equal(exe.run(feed)[0], table[ids] ** 2)      # through the CUDA graph
    wrong = ids.copy()
    wrong[1, 7] = 10**9
    with pytest.raises(lw.IndexOutOfRangeError, match=r"node 'embeddings/Gather' .*index 1000000000 is out of range"):
        exe.run(dict(feed, ids=wrong))
    np.testing.assert_array_equal(exe.run(feed)[0], table[ids] ** 2)
