"""double_buffer: two slots per shared buffer, next tile prefetched into registers, one barrier per step."""
import pytest

import loopweave as lw
from loopweave.lowering.ir import Allocate, Evaluate, For, IfThenElse

from .test_gpu_lowering import _is_sync, _nodes, _tiled_matmul


def _syncs(stmt):
    return [n for n in _nodes(stmt, Evaluate) if _is_sync(n)]


def _double_buffered(n=256, k_tile=8):
    s, args, _ = _tiled_matmul(n=n, k_tile=k_tile)
    for stage in s.stages:
        if stage.scope == "shared":
            stage.double_buffer()
    return s, args


def test_shared_buffers_get_two_slots_and_registers_for_the_next_tile():
    s, args = _double_buffered()
    plain_s, plain_args, _ = _tiled_matmul()
    plain = {a.buffer.name: a.extent.value for a in _nodes(lw.lower(plain_s, plain_args, target="cuda").body, Allocate)
             if a.buffer.scope == "shared"}
    body = lw.lower(s, args, target="cuda").body
    allocs = {a.buffer.name: a for a in _nodes(body, Allocate)}
    assert {n: allocs[n].extent.value for n in plain} == {n: 2 * v for n, v in plain.items()}
    for name in plain:   # 32x8 panel, 64 threads: 4 elements per thread
        assert allocs[name + ".prefetch"].buffer.scope == "local" and allocs[name + ".prefetch"].extent.value == 4


def test_one_barrier_per_step_and_the_prefetch_guarded_by_the_next_step():
    s, args = _double_buffered()
    body = lw.lower(s, args, target="cuda").body
    [loop] = [f for f in _nodes(body, For) if dict(f.annotations).get("double_buffered")]
    assert loop.var.name == "k.outer" and loop.extent.value == 32
    assert len(_syncs(loop.body)) == 1 and loop.body.stmts[-1] in _syncs(loop.body)
    guarded = [n for n in loop.body.stmts if isinstance(n, IfThenElse)]
    assert len(guarded) == 2 and all("k.outer + 1 < 32" in str(g).splitlines()[0] for g in guarded)
    # the prologue fills slot 0 before the loop, fenced by barriers
    assert len(_syncs(body)) == 3


def test_source_reads_the_current_slot(cuda_compilers):
    from loopweave.backends.cuda.compiler import compile_ptx
    s, args = _double_buffered()
    source = lw.build(s, args, target="cuda:sm_80").get_source("cuda")
    assert "(k_outer & 1) * 256" in source and "long long" not in source   # 32-bit indices (index_width)
    for compiler in cuda_compilers:
        compile_ptx(source, "sm_80", compiler)


def test_only_shared_stages_can_be_double_buffered():
    A = lw.placeholder((16,), name="A")
    B = lw.compute((16,), lambda i: A[i] * 2.0, name="B")
    s = lw.create_schedule(B)
    with pytest.raises(lw.ScheduleError, match=r"double_buffer on stage 'B': the stage lives in 'global' memory"
                                               r"(.|\n)*fix: call it on the stage made by s.cache_read"):
        s[B].double_buffer()


def test_every_shared_stage_of_the_loop_must_be_double_buffered():
    s, args, _ = _tiled_matmul()
    s.stage_by_name("A.shared").double_buffer()
    with pytest.raises(lw.LoweringError, match=r"double_buffer on 'A.shared'.*also fills other shared memory"
                                               r"(.|\n)*call double_buffer\(\) on every shared stage"):
        lw.lower(s, args, target="cuda")


def test_partial_tiles_are_refused_with_the_reason():
    s, args, _ = _tiled_matmul(n=250)
    for stage in s.stages:
        if stage.scope == "shared":
            stage.double_buffer()
    with pytest.raises(lw.LoweringError, match=r"double_buffer on '.\.shared'.*(partial tile|non-constant range)"):
        lw.lower(s, args, target="cuda")


def test_a_stage_outside_any_loop_is_refused():
    A = lw.placeholder((64,), name="A")
    C = lw.compute((64,), lambda i: A[i] + 1.0, name="C")
    s = lw.create_schedule(C)
    AA = s.cache_read(A, "shared", [C])
    bx, tx = s[C].split(C.op.axis[0], factor=64)
    s[C].bind(bx, lw.thread_axis("blockIdx.x"))
    s[C].bind(tx, lw.thread_axis("threadIdx.x"))
    s[AA].compute_at(s[C], bx)
    s[AA].bind(s[AA].op.axis[0], lw.thread_axis("threadIdx.x"))
    s[AA].double_buffer()
    with pytest.raises(lw.LoweringError, match=r"double_buffer on 'A.shared'"):
        lw.lower(s, [A, C], target="cuda")


def test_ignored_on_the_cpu(emulate):
    """A CPU build of the schedule computes the same values; the pipelined CUDA C itself is run with
    real barriers by tests/backends/cuda/test_kernels.py (case shared_matmul_double_buffered)."""
    import numpy as np
    s, args = _double_buffered(n=64)
    a, b = np.random.default_rng(0).standard_normal((2, 64, 64)).astype("float32")
    c = np.full((64, 64), np.nan, "float32")
    emulate(s, args)(a, b, c)
    np.testing.assert_allclose(c, a @ b, rtol=1e-4, atol=1e-4)
