"""``benchmarks.train_cost_model``: the one-thread CPU timing the cost model's data is made of."""
import time

from loopweave.benchmarks.train_cost_model import _cpu_seconds


def _spin(seconds: float) -> None:
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_a_candidate_is_timed_by_the_cpu_time_it_got_not_the_wall_clock():
    """A call that waits 3 ms off the CPU (as a kernel descheduled on a loaded machine does) reads
    near zero; one that computes for 1 ms reads 1 ms, whatever the wall clock says."""
    assert _cpu_seconds(lambda: time.sleep(0.003), repeat=3) < 0.0005
    spun = _cpu_seconds(lambda: _spin(0.001), repeat=3)
    assert 0.0009 < spun < 0.002
