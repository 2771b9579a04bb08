"""Launch overhead of lw_parallel_for with an empty body.

Run from the repository root::

    python -m benchmarks.parallel_launch [--batches 40] [--launches 2000]

Rows:

* native loop -- a JIT driver calls lw_parallel_for K times back to back; the
  batch is timed from Python, so the ctypes cost is spread over K launches.
* ctypes call -- one launch per ctypes call, minus the median cost of a ctypes
  call to the same driver that launches nothing.
* after idle  -- one launch (ctypes, baseline subtracted) after sleeping 2 ms,
  when the workers have stopped spinning and block in futex_wait.

Work is shared dynamically (pieces claimed with an atomic counter), so with an
empty body the caller often claims every piece before a woken worker gets to
one, and does not wait for it: "after idle" then mostly measures the
futex_wake system call, not a worker's wake-up.
"""

import argparse
import ctypes
import statistics
import time

import llvmlite.binding as llvm

try:
    from loopweave.backends.llvm import thread_pool
except ImportError:  # run from the repository root without the package installed
    from backends.llvm import thread_pool

DRIVER_IR = r"""
declare void @lw_parallel_for(ptr, ptr, i64)

define void @empty_body(i64 %begin, i64 %end, ptr %closure) {
  ret void
}

define void @launch_empty(i64 %n, i64 %times) {
entry:
  %none = icmp sle i64 %times, 0
  br i1 %none, label %done, label %loop
loop:
  %k = phi i64 [ 0, %entry ], [ %next, %loop ]
  call void @lw_parallel_for(ptr @empty_body, ptr null, i64 %n)
  %next = add i64 %k, 1
  %more = icmp slt i64 %next, %times
  br i1 %more, label %loop, label %done
done:
  ret void
}
"""

ITERATIONS = 1 << 20  # n given to lw_parallel_for; the body ignores it


def compile_driver():
    thread_pool.install()
    module = llvm.parse_assembly(DRIVER_IR)
    module.verify()
    engine = llvm.create_mcjit_compiler(module, thread_pool.host_target_machine())
    engine.finalize_object()
    launch = ctypes.CFUNCTYPE(None, ctypes.c_int64, ctypes.c_int64)(
        engine.get_function_address("launch_empty"))
    return engine, launch


def native_loop_us(launch, batches, launches):
    """Median over batches of (batch time / launches), in microseconds."""
    launch(ITERATIONS, launches)  # warm up: creates the workers
    per_launch = []
    for _ in range(batches):
        start = time.perf_counter()
        launch(ITERATIONS, launches)
        per_launch.append((time.perf_counter() - start) / launches)
    return statistics.median(per_launch) * 1e6


def ctypes_call_us(launch, calls, times):
    """Median time of one ctypes call of launch(ITERATIONS, times), in us."""
    samples = []
    for _ in range(calls):
        start = time.perf_counter()
        launch(ITERATIONS, times)
        samples.append(time.perf_counter() - start)
    return statistics.median(samples) * 1e6


def after_idle_us(launch, samples, baseline_us):
    timings = []
    for _ in range(samples):
        time.sleep(0.002)
        start = time.perf_counter()
        launch(ITERATIONS, 1)
        timings.append(time.perf_counter() - start)
    return statistics.median(timings) * 1e6 - baseline_us


def measure(launch, num_threads, batches, launches):
    thread_pool.set_num_threads(num_threads)
    baseline = ctypes_call_us(launch, launches * 5, 0)
    return {
        "native loop": native_loop_us(launch, batches, launches),
        "ctypes call": ctypes_call_us(launch, launches * 5, 1) - baseline,
        "after idle": after_idle_us(launch, 50, baseline),
        "ctypes baseline": baseline,
    }


def launch_overhead_us(num_threads: int, batches: int = 20, launches: int = 2000) -> float:
    """Median launch cost of lw_parallel_for with an empty body, timed in native code."""
    _engine, launch = compile_driver()
    previous = thread_pool.get_num_threads()
    thread_pool.set_num_threads(num_threads)
    try:
        return native_loop_us(launch, batches, launches)
    finally:
        thread_pool.set_num_threads(previous)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, default=40)
    parser.add_argument("--launches", type=int, default=2000,
                        help="launches per timed native batch")
    args = parser.parse_args(argv)

    _engine, launch = compile_driver()
    default = thread_pool.get_num_threads()
    counts = sorted({1, 2, default})
    try:
        results = {count: measure(launch, count, args.batches, args.launches)
                   for count in counts}
    finally:
        thread_pool.set_num_threads(default)

    print(f"lw_parallel_for launch overhead, empty body, median (us); "
          f"host cpu {llvm.get_host_cpu_name()}, default threads {default}, "
          f"spin {thread_pool.SPIN_NS // 1000} us, "
          f"{thread_pool.PIECES_PER_THREAD} pieces per thread")
    print(f"{'threads':>7} {'native loop':>12} {'ctypes call':>12} "
          f"{'after idle':>11} {'ctypes baseline':>16}")
    for count, row in results.items():
        print(f"{count:>7} {row['native loop']:>12.3f} {row['ctypes call']:>12.3f} "
              f"{row['after idle']:>11.2f} {row['ctypes baseline']:>16.3f}")


if __name__ == "__main__":
    main()
