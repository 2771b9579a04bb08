"""Tests of the native thread pool (loopweave.backends.llvm.thread_pool).

The kernels below are separate JIT modules that only *declare*
``lw_parallel_for``, like generated code does, and are called through ctypes.
"""

import ctypes
import multiprocessing
import os
import threading
import time

import llvmlite.binding as llvm
import llvmlite.ir as ir
import numpy as np
import pytest

from loopweave.backends.llvm import thread_pool

KERNELS_IR = r"""
declare void @lw_parallel_for(ptr, ptr, i64)
declare i64 @pthread_self()
declare i32 @usleep(i32)

; closure = {ptr out, ptr hits}: out[i] = 2 * i, hits[i] += 1 (atomic)
define void @fill_body(i64 %begin, i64 %end, ptr %closure) {
entry:
  %out = load ptr, ptr %closure
  %hits.field = getelementptr ptr, ptr %closure, i64 1
  %hits = load ptr, ptr %hits.field
  %empty = icmp sge i64 %begin, %end
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ %begin, %entry ], [ %next, %loop ]
  %twice = shl i64 %i, 1
  %out.i = getelementptr i64, ptr %out, i64 %i
  store i64 %twice, ptr %out.i
  %hits.i = getelementptr i64, ptr %hits, i64 %i
  %old = atomicrmw add ptr %hits.i, i64 1 monotonic
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}

; closure = {i64 chunks, ptr ranges}: appends (begin, end) to ranges
define void @record_body(i64 %begin, i64 %end, ptr %closure) {
  %k = atomicrmw add ptr %closure, i64 1 monotonic
  %ranges.field = getelementptr ptr, ptr %closure, i64 1
  %ranges = load ptr, ptr %ranges.field
  %slot = shl i64 %k, 1
  %begin.at = getelementptr i64, ptr %ranges, i64 %slot
  store i64 %begin, ptr %begin.at
  %end.at = getelementptr i64, ptr %begin.at, i64 1
  store i64 %end, ptr %end.at
  ret void
}

; closure = i64[2]: [0] += 1 per iteration (atomic), [1] += 1 per call
define void @count_body(i64 %begin, i64 %end, ptr %closure) {
entry:
  %calls = getelementptr i64, ptr %closure, i64 1
  %old.calls = atomicrmw add ptr %calls, i64 1 monotonic
  %empty = icmp sge i64 %begin, %end
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ %begin, %entry ], [ %next, %loop ]
  %old = atomicrmw add ptr %closure, i64 1 monotonic
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}

; per iteration, a nested lw_parallel_for(count_body, closure, 10)
define void @nested_body(i64 %begin, i64 %end, ptr %closure) {
entry:
  %empty = icmp sge i64 %begin, %end
  br i1 %empty, label %done, label %loop
loop:
  %i = phi i64 [ %begin, %entry ], [ %next, %loop ]
  call void @lw_parallel_for(ptr @count_body, ptr %closure, i64 10)
  %next = add i64 %i, 1
  %more = icmp slt i64 %next, %end
  br i1 %more, label %loop, label %done
done:
  ret void
}

; closure = i64[2]: [1] += 1 (atomic), then spins until [0] != 0
define void @wait_body(i64 %begin, i64 %end, ptr %closure) {
entry:
  %entered = getelementptr i64, ptr %closure, i64 1
  %old = atomicrmw add ptr %entered, i64 1 seq_cst
  br label %spin
spin:
  %go = load atomic i64, ptr %closure acquire, align 8
  %wait = icmp eq i64 %go, 0
  br i1 %wait, label %spin, label %done
done:
  ret void
}

; closure = {i64 count, i64 pieces, ptr records}: appends (begin, pthread_self())
; to records; the piece that starts at 0 then waits (usleep, ~2 s at most)
; until count == pieces, i.e. until the other threads have run all the others
define void @slow_first_body(i64 %begin, i64 %end, ptr %closure) {
entry:
  %k = atomicrmw add ptr %closure, i64 1 seq_cst
  %pieces.field = getelementptr i64, ptr %closure, i64 1
  %records.field = getelementptr i64, ptr %closure, i64 2
  %records = load ptr, ptr %records.field
  %slot = shl i64 %k, 1
  %begin.at = getelementptr i64, ptr %records, i64 %slot
  store i64 %begin, ptr %begin.at
  %thread.at = getelementptr i64, ptr %begin.at, i64 1
  %thread = call i64 @pthread_self()
  store i64 %thread, ptr %thread.at
  %first = icmp eq i64 %begin, 0
  br i1 %first, label %wait, label %done
wait:
  %tries = phi i64 [ 0, %entry ], [ %tries.next, %sleep ]
  %count = load atomic i64, ptr %closure acquire, align 8
  %pieces = load i64, ptr %pieces.field
  %all = icmp sge i64 %count, %pieces
  %tired = icmp sge i64 %tries, 20000
  %stop = or i1 %all, %tired
  br i1 %stop, label %done, label %sleep
sleep:
  %ignored = call i32 @usleep(i32 100)
  %tries.next = add i64 %tries, 1
  br label %wait
done:
  ret void
}

; calls lw_parallel_for(body, closure, n) `times` times
define void @launch(ptr %body, ptr %closure, i64 %n, i64 %times) {
entry:
  %none = icmp sle i64 %times, 0
  br i1 %none, label %done, label %loop
loop:
  %k = phi i64 [ 0, %entry ], [ %next, %loop ]
  call void @lw_parallel_for(ptr %body, ptr %closure, i64 %n)
  %next = add i64 %k, 1
  %more = icmp slt i64 %next, %times
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""

INNER_N = 10  # iterations of the nested launch in nested_body
MAX_PIECES = thread_pool.MAX_THREADS * thread_pool.PIECES_PER_THREAD


class Kernels:
    """The test kernels, compiled in their own MCJIT engine."""

    def __init__(self):
        thread_pool.install()
        module = llvm.parse_assembly(KERNELS_IR)
        module.verify()
        self.engine = llvm.create_mcjit_compiler(module, thread_pool.host_target_machine())
        self.engine.finalize_object()
        address = self.engine.get_function_address
        self.bodies = {name: address(name) for name in
                       ("fill_body", "record_body", "count_body", "nested_body", "wait_body",
                        "slow_first_body")}
        self._launch = ctypes.CFUNCTYPE(
            None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int64, ctypes.c_int64
        )(address("launch"))

    def launch(self, body, closure, n, times=1):
        self._launch(self.bodies[body], closure, n, times)

    def fill(self, n):
        """Runs fill_body over n; returns (out, hits) without the guard."""
        out = np.full(n + 1, -1, dtype=np.int64)  # last element: overrun guard
        hits = np.zeros(n + 1, dtype=np.int64)
        closure = np.array([out.ctypes.data, hits.ctypes.data], dtype=np.uint64)
        self.launch("fill_body", closure.ctypes.data, n)
        assert out[n] == -1 and hits[n] == 0, "wrote past the end"
        return out[:n], hits[:n]

    def record(self, n):
        """Runs record_body over n; returns the pieces (begin, end), sorted."""
        ranges = np.full(2 * MAX_PIECES, -1, dtype=np.int64)
        closure = np.array([0, ranges.ctypes.data], dtype=np.uint64)
        self.launch("record_body", closure.ctypes.data, n)
        chunks = int(closure[0])
        return sorted(map(tuple, ranges[: 2 * chunks].reshape(chunks, 2).tolist()))

    def count(self, body, n, times=1):
        """Runs body with an i64[2] counter closure; returns [iterations, calls]."""
        counter = np.zeros(2, dtype=np.int64)
        self.launch(body, counter.ctypes.data, n, times)
        return counter.tolist()


@pytest.fixture(scope="module")
def kernels():
    return Kernels()


@pytest.fixture
def threads():
    """Lets a test call set_num_threads; restores the previous count."""
    before = thread_pool.get_num_threads()
    yield thread_pool.set_num_threads
    thread_pool.set_num_threads(before)


def expected_pieces(n, num_threads):
    """Pieces of a launch over n: min(n, T * PIECES_PER_THREAD) where
    T = min(num_threads, n); a single one when T <= 1 (serial)."""
    if n <= 0:
        return 0
    threads = min(num_threads, n)
    return 1 if threads <= 1 else min(n, threads * thread_pool.PIECES_PER_THREAD)


def check_chunks(chunks, n, num_threads):
    """Contiguous cover of [0, n) by the expected number of non-empty,
    balanced pieces."""
    if n <= 0:
        assert chunks == []
        return
    assert len(chunks) == expected_pieces(n, num_threads)
    assert chunks[0][0] == 0 and chunks[-1][1] == n
    for (_, end), (begin, _) in zip(chunks, chunks[1:]):
        assert end == begin
    sizes = [end - begin for begin, end in chunks]
    assert min(sizes) >= 1 and max(sizes) - min(sizes) <= 1


SIZES = [0, 1, 2, 3, 7, 8, 9, 1000, 100003]


def test_install_is_idempotent_and_registers_symbols():
    thread_pool.install()
    address = thread_pool.parallel_for_address()
    thread_pool.install()
    assert address == thread_pool.parallel_for_address() != 0
    assert llvm.address_of_symbol("lw_parallel_for") == address
    assert llvm.address_of_symbol("lw_get_num_threads")


def test_install_from_many_threads_at_once():
    addresses = []
    workers = [threading.Thread(target=lambda: addresses.append(
        thread_pool.parallel_for_address())) for _ in range(4)]
    for worker in workers:
        worker.start()
    for worker in workers:
        worker.join()
    assert len(set(addresses)) == 1


class _Range:
    """``for i in [begin, end)`` (begin < end) in an llvmlite builder."""

    def __init__(self, builder, begin, end):
        self.b, self.begin, self.end = builder, begin, end

    def __enter__(self):
        b = self.b
        self.before = b.block
        self.loop = b.append_basic_block("loop")
        b.branch(self.loop)
        b.position_at_end(self.loop)
        self.index = b.phi(self.begin.type, "i")
        self.index.add_incoming(self.begin, self.before)
        return self.index

    def __exit__(self, *exc):
        b = self.b
        following = b.add(self.index, ir.Constant(self.index.type, 1))
        self.index.add_incoming(following, b.block)
        after = b.append_basic_block("after")
        b.cbranch(b.icmp_signed("<", following, self.end), self.loop, after)
        b.position_at_end(after)


def build_triple_kernel():
    """With llvmlite.ir, as generated code does: run(out, n) sets out[i] = 3 * i
    through lw_parallel_for, declared with thread_pool.PARALLEL_FOR_TYPE."""
    i64 = ir.IntType(64)
    module = ir.Module("triple")
    module.triple = llvm.get_process_triple()
    parallel_for = ir.Function(module, thread_pool.PARALLEL_FOR_TYPE, "lw_parallel_for")
    body = ir.Function(module, thread_pool.BODY_TYPE, "triple_body")
    begin, end, closure = body.args
    b = ir.IRBuilder(body.append_basic_block("entry"))
    out = b.bitcast(closure, i64.as_pointer())
    with b.if_then(b.icmp_signed("<", begin, end)):
        with _Range(b, begin, end) as i:
            b.store(b.mul(i, ir.Constant(i64, 3)), b.gep(out, [i]))
    b.ret_void()
    run = ir.Function(module, ir.FunctionType(ir.VoidType(), [closure.type, i64]), "run")
    b = ir.IRBuilder(run.append_basic_block("entry"))
    b.call(parallel_for, [body, *run.args])
    b.ret_void()
    return module


def test_kernel_built_with_llvmlite_ir(threads):
    thread_pool.install()
    module = llvm.parse_assembly(str(build_triple_kernel()))
    module.verify()
    engine = llvm.create_mcjit_compiler(module, thread_pool.host_target_machine())
    engine.finalize_object()
    run = ctypes.CFUNCTYPE(None, ctypes.c_void_p, ctypes.c_int64)(
        engine.get_function_address("run"))
    for num_threads in (1, 2, 3):
        threads(num_threads)
        out = np.zeros(1001, dtype=np.int64)
        run(out.ctypes.data, 1000)
        assert np.array_equal(out[:1000], 3 * np.arange(1000)) and out[1000] == 0


def test_default_num_threads_is_affinity():
    assert thread_pool.default_num_threads() == min(
        len(os.sched_getaffinity(0)), thread_pool.MAX_THREADS)


@pytest.mark.parametrize("bad", [0, -1, 1.5, "2", None, True, thread_pool.MAX_THREADS + 1])
def test_set_num_threads_rejects_bad_values(bad, threads):
    with pytest.raises(ValueError, match="set_num_threads"):
        threads(bad)


def test_set_num_threads_round_trips(threads):
    threads(3)
    assert thread_pool.get_num_threads() == 3


@pytest.mark.parametrize("num_threads", [1, 2, 3, 5])
@pytest.mark.parametrize("n", SIZES)
def test_every_index_written_once(kernels, threads, num_threads, n):
    threads(num_threads)
    out, hits = kernels.fill(n)
    assert np.array_equal(out, 2 * np.arange(n))
    assert np.all(hits == 1)


@pytest.mark.parametrize("num_threads", [1, 2, 3, 5])
@pytest.mark.parametrize("n", SIZES)
def test_chunks_are_balanced_and_contiguous(kernels, threads, num_threads, n):
    threads(num_threads)
    check_chunks(kernels.record(n), n, num_threads)


@pytest.mark.parametrize("num_threads", [1, 2, 5])
def test_atomic_counter(kernels, threads, num_threads):
    threads(num_threads)
    assert kernels.count("count_body", 100003) == [100003, expected_pieces(100003, num_threads)]


@pytest.mark.parametrize("num_threads", [2, 3])
def test_nested_launch_runs_serially(kernels, threads, num_threads):
    threads(num_threads)
    n = 37
    iterations, calls = kernels.count("nested_body", n)
    assert iterations == n * INNER_N
    assert calls == n  # each inner launch: one body call, on its own thread


def test_repeated_launches(kernels, threads):
    threads(2)
    assert kernels.count("count_body", 2, times=10_000) == [20_000, 20_000]
    assert kernels.count("count_body", 5, times=10_000) == [50_000, 50_000]
    assert kernels.count("count_body", 9, times=10_000) == [90_000, 80_000]
    threads(3)
    assert kernels.count("count_body", 1000, times=10_000) == [10_000_000, 120_000]


def test_launches_after_workers_fell_asleep(kernels, threads):
    threads(2)
    for _ in range(5):
        time.sleep(0.003)  # well past the spin time: workers block in futex
        check_chunks(kernels.record(10), 10, 2)


def test_more_threads_after_fewer(kernels, threads):
    for num_threads in (2, 5, 1, 3, 5):
        threads(num_threads)
        check_chunks(kernels.record(100), 100, num_threads)


def test_concurrent_launches_from_python_threads(kernels, threads):
    threads(2)
    results, errors = {}, []

    def run(name):
        try:
            results[name] = kernels.count("count_body", 1000, times=300)
            out, hits = kernels.fill(10_001)
            assert np.array_equal(out, 2 * np.arange(10_001)) and np.all(hits == 1)
        except BaseException as error:  # reported by the main thread
            errors.append(error)

    callers = [threading.Thread(target=run, args=(name,)) for name in "ab"]
    for caller in callers:
        caller.start()
    for caller in callers:
        caller.join(timeout=60)
    assert not any(caller.is_alive() for caller in callers), "launch hung"
    assert not errors, errors
    for iterations, calls in results.values():
        assert iterations == 300_000
        # each launch parallel (8 pieces) or serial (1 call)
        assert 300 <= calls <= 300 * expected_pieces(1000, 2)


def test_pieces_per_thread_is_small():
    assert 1 <= thread_pool.PIECES_PER_THREAD <= 16


@pytest.mark.parametrize("num_threads", [2, 3])
def test_others_take_over_when_one_piece_is_slow(kernels, threads, num_threads):
    """Piece 0 blocks until every other piece has run: the threads that did
    not run it must claim all the others (with static chunks this hangs until
    the body's ~2 s timeout and the test fails)."""
    threads(num_threads)
    pieces = num_threads * thread_pool.PIECES_PER_THREAD
    n = 100 * pieces
    records = np.full(2 * pieces, -1, dtype=np.int64)
    closure = np.array([0, pieces, records.ctypes.data], dtype=np.uint64)
    start = time.monotonic()
    kernels.launch("slow_first_body", closure.ctypes.data, n)
    elapsed = time.monotonic() - start
    assert int(closure[0]) == pieces
    ran = dict(map(tuple, records.reshape(pieces, 2).tolist()))  # begin -> thread
    assert sorted(ran) == [100 * k for k in range(pieces)]
    slow_thread = ran.pop(0)
    assert slow_thread not in ran.values(), ran
    assert elapsed < 1.0, "piece 0 waited for its timeout"


def test_idle_pool_uses_no_cpu(kernels, threads):
    threads(2)
    kernels.count("count_body", 1000, times=100)
    time.sleep(0.01)  # let the workers finish spinning
    cpu_before = time.process_time()
    time.sleep(0.2)
    assert time.process_time() - cpu_before < 0.02


def _child_checks(kernels, queue):
    """Runs in a forked child: parallel launches must work and be parallel."""
    try:
        out, hits = kernels.fill(1001)
        ok = bool(np.array_equal(out, 2 * np.arange(1001)) and np.all(hits == 1))
        queue.put((ok, kernels.record(100)))
    except BaseException as error:
        queue.put((False, repr(error)))


def _run_in_forked_child(kernels):
    context = multiprocessing.get_context("fork")
    queue = context.Queue()
    child = context.Process(target=_child_checks, args=(kernels, queue))
    child.start()
    child.join(timeout=30)
    if child.is_alive():
        child.kill()
        pytest.fail("launch in a forked child hung")
    assert child.exitcode == 0
    return queue.get(timeout=5)


@pytest.mark.filterwarnings("ignore::DeprecationWarning")  # fork with threads
def test_forked_child_gets_fresh_workers(kernels, threads):
    threads(2)
    check_chunks(kernels.record(100), 100, 2)  # the parent's workers exist
    ok, chunks = _run_in_forked_child(kernels)
    assert ok, chunks
    check_chunks(chunks, 100, 2)
    check_chunks(kernels.record(100), 100, 2)  # the parent's pool still works


@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_fork_during_a_launch_in_another_thread(kernels, threads):
    threads(2)
    gate = np.zeros(2, dtype=np.int64)  # [go, bodies entered]
    busy = threading.Thread(
        target=kernels.launch, args=("wait_body", gate.ctypes.data, 2))
    busy.start()
    try:
        deadline = time.monotonic() + 10
        while gate[1] == 0 and time.monotonic() < deadline:
            time.sleep(0.001)
        assert gate[1] > 0, "the busy launch did not start"
        ok, chunks = _run_in_forked_child(kernels)  # forks while the lock is held
    finally:
        gate[0] = 1
        busy.join(timeout=30)
    assert not busy.is_alive()
    assert ok, chunks
    check_chunks(chunks, 100, 2)  # the inherited, stale lock was taken over


def _worker_leaves_the_callers_cpu(kernels, queue):
    """In a forked child (fresh workers): a worker made to share the caller's CPU moves off it."""
    try:
        tasks = lambda: {int(t) for t in os.listdir("/proc/self/task")}  # noqa: E731
        before = tasks()
        kernels.record(100)                                  # creates the child's worker
        (worker,) = tasks() - before
        cpu = min(os.sched_getaffinity(0))
        os.sched_setaffinity(0, {cpu})                       # the caller on one CPU ...
        os.sched_setaffinity(worker, {cpu})                  # ... and the worker forced onto it
        for _ in range(200):        # the worker moves when it next runs; the host may hold it back a while
            kernels.record(100)
            if cpu not in os.sched_getaffinity(worker):
                break
            time.sleep(0.01)
        queue.put((sorted(os.sched_getaffinity(worker)), cpu))
    except BaseException as error:
        queue.put((repr(error), None))


@pytest.mark.skipif(len(os.sched_getaffinity(0)) < 2, reason="needs two CPUs")
@pytest.mark.filterwarnings("ignore::DeprecationWarning")
def test_a_worker_woken_on_the_callers_cpu_moves_to_another(kernels, threads):
    threads(2)
    context = multiprocessing.get_context("fork")
    for _ in range(3):      # a fresh child each try: a worker the scheduler starved stays starved a while
        queue = context.Queue()
        child = context.Process(target=_worker_leaves_the_callers_cpu, args=(kernels, queue))
        child.start()
        child.join(timeout=30)
        assert child.exitcode == 0
        affinity, cpu = queue.get(timeout=5)
        if isinstance(affinity, list) and cpu not in affinity:
            break
    assert isinstance(affinity, list), affinity
    assert cpu not in affinity and affinity, (affinity, cpu)
