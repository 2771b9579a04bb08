"""matmul / dense / batch_matmul with their default CPU schedules, against numpy."""
import numpy as np
import pytest

import loopweave as lw
from loopweave import nn_ops


def _run(outputs, inputs, arrays):
    s = nn_ops.schedule(outputs)
    out = outputs if isinstance(outputs, lw.Tensor) else outputs[0]
    result = np.empty([int(x.value) for x in out.shape], out.dtype)
    lw.build(s, list(inputs) + [out])(*arrays, result)
    return result


@pytest.mark.parametrize("m,n,k", [(1, 1, 1), (8, 32, 16), (127, 255, 511), (33, 70, 9), (64, 64, 64),
                                   (128, 96, 300)])
def test_matmul_matches_numpy(m, n, k):
    rng = np.random.default_rng(m * 7 + n)
    A = lw.placeholder((m, k), name="A")
    B = lw.placeholder((k, n), name="B")
    a = rng.standard_normal((m, k), dtype=np.float32)
    b = rng.standard_normal((k, n), dtype=np.float32)
    got = _run(nn_ops.matmul(A, B), [A, B], [a, b])
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))


def test_matmul_with_symbolic_sizes_runs_any_shape():
    m, n, k = lw.var("m"), lw.var("n"), lw.var("k")
    A = lw.placeholder((m, k), name="A")
    B = lw.placeholder((k, n), name="B")
    C = nn_ops.matmul(A, B)
    f = lw.build(nn_ops.schedule(C), [A, B, C])
    rng = np.random.default_rng(1)
    for (mm, nn, kk) in [(5, 7, 3), (40, 64, 17), (9, 33, 128)]:
        a = rng.standard_normal((mm, kk), dtype=np.float32)
        b = rng.standard_normal((kk, nn), dtype=np.float32)
        c = np.empty((mm, nn), np.float32)
        f(a, b, c)
        np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(kk))


@pytest.mark.parametrize("bias", [False, True])
def test_dense_is_gemm_with_transposed_weight(bias):
    rng = np.random.default_rng(2)
    X = lw.placeholder((20, 48), name="X")
    W = lw.placeholder((70, 48), name="W")
    b = lw.placeholder((70,), name="b") if bias else None
    Y = nn_ops.dense(X, W, b)
    x = rng.standard_normal((20, 48), dtype=np.float32)
    w = rng.standard_normal((70, 48), dtype=np.float32)
    arrays = [x, w] + ([rng.standard_normal(70, dtype=np.float32)] if bias else [])
    inputs = [X, W] + ([b] if bias else [])
    expected = x @ w.T + (arrays[2] if bias else 0)
    np.testing.assert_allclose(_run(Y, inputs, arrays), expected, rtol=1e-4, atol=1e-4)


def test_batch_matmul_matches_numpy():
    rng = np.random.default_rng(3)
    A = lw.placeholder((3, 20, 16), name="A")
    B = lw.placeholder((3, 16, 40), name="B")
    a = rng.standard_normal((3, 20, 16), dtype=np.float32)
    b = rng.standard_normal((3, 16, 40), dtype=np.float32)
    np.testing.assert_allclose(_run(nn_ops.batch_matmul(A, B), [A, B], [a, b]), a @ b, rtol=1e-4, atol=1e-4)


def test_matmul_rejects_mismatched_shapes():
    A = lw.placeholder((4, 5), name="A")
    B = lw.placeholder((6, 7), name="B")
    with pytest.raises(lw.ExprError, match="A's columns must equal B's rows"):
        nn_ops.matmul(A, B)


def test_default_schedule_keeps_the_block_in_vector_registers():
    """The inner loop of the default schedule is straight-line FMAs on whole vectors."""
    A = lw.placeholder((64, 64), name="A")
    B = lw.placeholder((64, 64), name="B")
    C = nn_ops.matmul(A, B)
    text = str(lw.lower(nn_ops.schedule(C), [A, B, C]))
    assert "matmul.local[i.inner, ramp(" in text and "not_vectorized" not in text
    assert "if " not in text   # shifted tiles: no guards at all


@pytest.mark.parametrize("target, rows", [("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3", 6),
                                          ("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v2", 6),
                                          ("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v4", 8),
                                          ("llvm -mtriple=aarch64-linux-gnu -mcpu=neoverse-n1", 8)])
def test_the_register_tile_fills_the_targets_registers(target, rows):
    """Rows x two vectors of accumulators, two B vectors and a broadcast of A within the registers
    (16 on AVX2 and SSE, 32 on AVX-512 and NEON), at most MAX_TILE_ROWS; the lowered tile has them."""
    from loopweave.nn_ops.ops.matmul import register_tile_rows
    from loopweave.target import compiling_for, parse_target
    tgt = parse_target(target)
    assert register_tile_rows(tgt, "float32") == rows and 2 * rows + 3 <= tgt.vector_registers
    with compiling_for(tgt):
        A, B = lw.placeholder((64, 64), name="A"), lw.placeholder((64, 64), name="B")
        C = nn_ops.matmul(A, B)
        text = str(lw.lower(nn_ops.schedule(C, tgt), [A, B, C]))
    assert f"matmul.local = allocate(({rows}, {2 * tgt.lanes('float32')})" in text, text[:1500]


def test_a_long_epilogue_is_unrolled_in_the_schedule_a_cheap_one_is_left_to_llvm(x86_level):
    """A dense + tanh GELU kept as an 8-row loop by LLVM put the accumulator in memory through
    the whole reduction (2.2x the dense's time): its epilogue rows are unrolled by the schedule.
    A bias + ReLU epilogue stays a loop (LLVM unrolls it; unrolling here only costs compile time).
    The rows of a register block depend on the vector width (8 on 16 lanes, 6 on 8)."""
    import re
    import numpy as np
    from loopweave.nn_ops.ops.norm import gelu
    from loopweave.nn_ops.ops.elementwise import relu
    X = lw.placeholder((64, 48), name="X")
    W = lw.placeholder((96, 48), name="W")
    b = lw.placeholder((96,), name="b")
    long_out = gelu(nn_ops.dense(X, W, b), "tanh")
    cheap_out = relu(nn_ops.dense(X, W, b))
    long_ir = str(lw.lower(nn_ops.schedule(long_out, x86_level), [X, W, b, long_out]))
    cheap_ir = str(lw.lower(nn_ops.schedule(cheap_out, x86_level), [X, W, b, cheap_out]))
    rows = int(re.search(r"dense = allocate\(\((\d+), \d+\), float32, 'local'\)", long_ir).group(1))
    assert rows >= 4 and long_ir.count("tanh(") >= rows and "ax0.inner in range" not in long_ir, long_ir
    assert f"ax0.inner in range({rows})" in cheap_ir, cheap_ir
    if not x86_level.runs_here():
        return
    x, w, bb = (np.random.default_rng(k).standard_normal(s).astype("float32") for k, s in
                enumerate([(64, 48), (96, 48), (96,)]))
    got = np.empty((64, 96), "float32")
    lw.build(nn_ops.schedule(long_out, x86_level), [X, W, b, long_out], target=x86_level)(x, w, bb, got)
    y = x @ w.T + bb
    want = 0.5 * y * (1 + np.tanh(np.sqrt(2 / np.pi) * (y + 0.044715 * y ** 3)))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_matmul_panels_refuses_a_column_count_its_panels_do_not_hold():
    """Columns beyond the panels would be read out of bounds; fewer than the last panel's first
    would leave a panel unused: both are refused before anything is built."""
    from loopweave.nn_ops.ops.matmul import matmul_panels
    A = lw.placeholder((4, 8), name="A")
    Bp = lw.placeholder((3, 8, 16), name="Bp")
    assert [int(d.value) for d in matmul_panels(A, Bp, 40).shape] == [4, 40]
    for columns in (49, 32):
        with pytest.raises(lw.ExprError, match="do not fit 3 panels of 16"):
            matmul_panels(A, Bp, columns)


@pytest.mark.parametrize("n", [16, 31, 33, 47, 64])
def test_a_batch_matmul_short_of_whole_panels_takes_one_vector_panels(n):
    """31 or 33 columns: panels of one vector (the last shifted in), not a 31-lane vector (558 us
    for 64 heads of 31 x 64 x 31) or two 32-wide panels; whole panels stay 32 wide."""
    A = lw.placeholder((3, 9, 64), name="A")
    B = lw.placeholder((3, 64, n), name="B")
    C = nn_ops.batch_matmul(A, B)
    s = nn_ops.schedule(C)
    from loopweave.nn_ops.ops.matmul import panel_width
    from loopweave.target import resolve_target
    lanes = resolve_target("llvm").lanes("float32")
    nr = panel_width(lanes)
    narrow = n % nr != 0 and lanes <= n < 2 * nr
    assert (f"split(j, factor={lanes if narrow else nr}, tail='shift')" in str(s.trace)), str(s.trace)
    rng = np.random.default_rng(n)
    a = rng.standard_normal((3, 9, 64)).astype(np.float32)
    b = rng.standard_normal((3, 64, n)).astype(np.float32)
    c = np.empty((3, 9, n), np.float32)
    lw.build(s, [A, B, C])(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("transposed", [True, False])
def test_a_transposed_operand_read_through_its_prologue_is_packed_by_register_transposes(transposed):
    """Q K^T with K's head split fused into the kernel (fuse_operators): B[h, d, s] = K[s, h * 64 + d]
    reads along the reduction axis, so each panel is packed from rows of K transposed in registers
    (pragma "transpose"), not one gather per vector; a B read along its columns keeps the plain pack."""
    from loopweave.nn_ops.ops.shape import reshape, transpose
    heads, seq, depth = 2, 40, 32
    Q = lw.placeholder((heads, seq, depth), name="Q")
    K2 = lw.placeholder((seq, heads * depth), name="K")
    K4 = reshape(K2, (1, seq, heads, depth))
    B = reshape(transpose(K4, (0, 2, 3, 1)), (heads, depth, seq)) if transposed else \
        reshape(transpose(reshape(K2, (1, heads, depth, seq)), (0, 1, 2, 3)), (heads, depth, seq))
    Y = nn_ops.batch_matmul(Q, B)
    s = nn_ops.schedule(Y)
    assert ("'transpose'" in str(s.trace)) == transposed, s.trace
    f = lw.build(s, [Q, K2, Y])
    rng = np.random.default_rng(0)
    q = rng.standard_normal((heads, seq, depth), dtype=np.float32)
    k = rng.standard_normal((seq, heads * depth), dtype=np.float32)
    y = np.empty((heads, seq, seq), np.float32)
    f(q, k, y)
    b = k.reshape(seq, heads, depth).transpose(1, 2, 0) if transposed else k.reshape(heads, depth, seq)
    np.testing.assert_allclose(y, q @ b, rtol=1e-4, atol=1e-4)
    if transposed:
        assert "masked.gather" not in f.get_source("ll")


def test_a_run_time_batch_of_little_work_runs_on_the_calling_thread_below_serial_work():
    """One token's attention product over a symbolic batch (1 x 64 by 64 x 1 a batch): the batch loop
    is parallel with ``serial_below`` = SERIAL_WORK / 64; right at both sides of it."""
    from loopweave.nn_ops.ops.registry import SERIAL_WORK
    b = lw.var("b")
    A = lw.placeholder((b, 1, 64), name="A")
    B = lw.placeholder((b, 64, 1), name="B")
    C = nn_ops.batch_matmul(A, B)
    s = nn_ops.schedule([C])
    assert f"serial_below={SERIAL_WORK // 64}" in str(lw.lower(s, [A, B, C]))
    f = lw.build(s, [A, B, C])
    rng = np.random.default_rng(0)
    for batch in (3, SERIAL_WORK // 64 + 5):
        a = rng.standard_normal((batch, 1, 64), dtype=np.float32)
        w = rng.standard_normal((batch, 64, 1), dtype=np.float32)
        c = np.empty((batch, 1, 1), np.float32)
        f(a, w, c)
        np.testing.assert_allclose(c, a @ w, rtol=1e-4, atol=1e-5)


def _caches(l2: int, l3: int):
    from loopweave.backends.llvm.cpu_facts import CoreSummary
    return lambda target: CoreSummary("", None, None, (("L1d", 32768), ("L2", l2), ("L3", l3)), 256)


@pytest.mark.parametrize("size, group", [(4096, 2), (3072, 2), (2048, 1)])
def test_a_matrix_a_larger_than_l3_is_read_once_per_group_of_panels(monkeypatch, size, group):
    """Panels of 16 columns (AVX2) over a depth of 4096 take 256 KiB: two fit half of a 1 MiB L2.
    A of 4096 x 4096 (64 MiB) and 3072 x 3072 (36 MiB) outgrow a 32 MiB L3, 2048 x 2048 does not."""
    from loopweave.nn_ops.ops import matmul
    from loopweave.target import parse_target
    monkeypatch.setattr(matmul, "core_facts", _caches(1 << 20, 32 << 20))
    out = nn_ops.matmul(lw.placeholder((size, size), name="A"), lw.placeholder((size, size), name="B"))
    target = parse_target("llvm -mtriple=x86_64-linux-gnu -mcpu=x86-64-v3")
    assert matmul._panel_group(target, out, lw.const(size), 16) == group


def test_a_group_of_panels_is_packed_together_and_computes_the_product(monkeypatch, x86_level):
    """Caches small enough that a 256 x 320 A outgrows L3 and two panels of 320 x 32 fill half of L2:
    each row tile runs two column panels, packed together at the group's loop (two groups per
    thread), and the product equals numpy's."""
    from loopweave.nn_ops.ops import matmul
    monkeypatch.setattr(matmul, "core_facts", _caches(192 << 10, 128 << 10))
    nr = 2 * x86_level.lanes("float32")
    m, k, n = 256, 320, 4 * max(1, x86_level.num_threads) * nr
    A, B = lw.placeholder((m, k), name="A"), lw.placeholder((k, n), name="B")
    C = nn_ops.matmul(A, B)
    s = nn_ops.schedule(C, x86_level)
    assert f"B.local = allocate(({k}, {2 * nr})" in str(lw.lower(s, [A, B, C]))
    if not x86_level.runs_here():
        return
    rng = np.random.default_rng(3)
    a, b = rng.standard_normal((m, k), dtype=np.float32), rng.standard_normal((k, n), dtype=np.float32)
    got = np.empty((m, n), np.float32)
    lw.build(s, [A, B, C], target=x86_level)(a, b, got)
    np.testing.assert_allclose(got, a @ b, rtol=1e-4, atol=1e-4 * np.sqrt(k))
