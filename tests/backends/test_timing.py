"""backends/timing.py: samples are sized from warm calls, not from the one cold call after a peer's; the two
orders an executable's ``profile`` times its calls in."""
import time

from loopweave.backends.timing import calls_per_sample, interleaved, per_call_medians


def test_calls_per_sample_ignores_a_cold_first_call():
    calls = []

    def fn():                       # the first call 20 ms (cold), then 1 ms
        calls.append(None)
        time.sleep(0.02 if len(calls) == 1 else 0.001)

    n = calls_per_sample(fn, 0.02)
    assert 8 <= n <= 20             # about 20 ms of warm calls, not the single one the cold call gives


def test_interleaved_ratio_of_a_slower_peer():
    c = interleaved(lambda: time.sleep(0.001), lambda: time.sleep(0.003), pairs=3, min_seconds=0.01, pause=0.0)
    assert c.ratio > 1.5
    assert c.theirs_s > c.ours_s


def _spin(seconds):
    end = time.thread_time() + seconds
    while time.thread_time() < end:
        pass


def test_interleaved_by_cpu_time_does_not_count_time_off_the_core():
    """By ``thread_time`` a peer that waits 4 ms and computes 1 ms is faster than one computing 2 ms
    (as a kernel descheduled on a loaded machine is not slowed); by wall time it is slower."""
    ours, theirs = (lambda: _spin(0.002)), (lambda: (time.sleep(0.004), _spin(0.001)))
    by_cpu = interleaved(ours, theirs, pairs=3, min_seconds=0.01, pause=0.0, clock=time.thread_time)
    by_wall = interleaved(ours, theirs, pairs=3, min_seconds=0.01, pause=0.0)
    assert by_cpu.ratio < 0.8 and by_wall.ratio > 1.2


def test_each_call_repeated_or_the_sequence_in_order():
    seen = []
    calls = [(name, lambda name=name: seen.append(name)) for name in "abc"]
    ticks = iter(range(1, 100))
    clock = lambda fn: (fn(), next(ticks))[1]       # noqa: E731 - a fake clock: 1, 2, 3, ... per call
    rows = per_call_medians(calls, 3, clock=clock)
    assert seen == list("aaabbbccc") and rows == [("a", 2.0), ("b", 5.0), ("c", 8.0)]
    seen.clear()
    rows = per_call_medians(calls, 3, in_order=True, clock=clock)
    assert seen == list("abcabcabc") and rows == [("a", 13.0), ("b", 14.0), ("c", 15.0)]
