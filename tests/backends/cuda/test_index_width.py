"""32-bit index arithmetic where every index value provably fits, 64-bit otherwise."""
import loopweave as lw
from loopweave import nn_ops
from loopweave.backends.cuda.index_width import fits_int32
from loopweave.backends.cuda.codegen import kernels_of


def _elementwise(shape, name="C"):
    A = lw.placeholder(shape, name="A")
    C = lw.compute(shape, lambda *i: A[i] * 2.0, name=name)
    s = lw.create_schedule(C)
    fused = s[C].fuse(*C.op.axis) if len(shape) > 1 else C.op.axis[0]
    bx, tx = s[C].split(fused, factor=256)
    s[C].bind(bx, lw.thread_axis("blockIdx.x"))
    s[C].bind(tx, lw.thread_axis("threadIdx.x"))
    return s, [A, C]


def _narrow(s, args):
    func = lw.lower(s, args, target="cuda")
    return [fits_int32(k) for k in kernels_of(func)]


def test_static_kernels_use_int():
    A, B = lw.placeholder((512, 256), name="A"), lw.placeholder((256, 512), name="B")
    C = nn_ops.matmul(A, B)
    s = nn_ops.schedule(C, "cuda")
    assert _narrow(s, [A, B, C]) == [True]
    assert "long long" not in lw.build(s, [A, B, C], target="cuda:sm_80").get_source("cuda")


def test_run_time_sizes_keep_64_bits():
    n = lw.var("n")
    s, args = _elementwise((n,))
    assert _narrow(s, args) == [False]
    assert "long long" in lw.build(s, args, target="cuda:sm_80").get_source("cuda")


def test_more_elements_than_int32_counts_keep_64_bits():
    s, args = _elementwise((1 << 16, 1 << 16))    # 2**32 elements: lowered, never allocated
    assert _narrow(s, args) == [False]
    s, args = _elementwise((1 << 15, 1 << 15))    # 2**30: fits
    assert _narrow(s, args) == [True]


def test_indices_read_from_memory_keep_64_bits():
    data = lw.placeholder((100, 8), name="data")
    idx = lw.placeholder((30,), dtype="int64", name="idx")
    C = lw.compute((30, 8), lambda i, j: data[idx[i], j], name="C")
    s = lw.create_schedule(C)
    s[C].bind(C.op.axis[0], lw.thread_axis("blockIdx.x"))
    s[C].bind(C.op.axis[1], lw.thread_axis("threadIdx.x"))
    assert _narrow(s, [data, idx, C]) == [False]
