"""backends/timing.py: samples are sized from warm calls, not from the one cold call after a peer's."""
import time

from loopweave.backends.timing import calls_per_sample, interleaved


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
