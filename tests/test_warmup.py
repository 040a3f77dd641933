"""Warm-up found, not assumed (dlbench.measure.warmup and the timer's use of it)."""

from __future__ import annotations

import numpy as np
import pytest

from dlbench.measure.timer import Protocol, time_callable
from dlbench.measure.warmup import change_points, settled, warmup_end


class NoisyClock:
    """A fake clock whose n-th call takes ``step(n)`` ns, with seeded lognormal noise of 3%."""

    def __init__(self, step, seed: int = 0):
        self.now, self.calls, self.step = 0, 0, step
        self.rng = np.random.default_rng(seed)

    def clock(self):
        return self.now

    def fn(self):
        self.now += int(self.step(self.calls) * np.exp(self.rng.normal(0, 0.03)))
        self.calls += 1


def _series(n, slow, seed=0):
    rng = np.random.default_rng(seed)
    base = np.full(n, 5e6)
    base[:slow] *= 1.6
    return base * np.exp(rng.normal(0, 0.03, n))


def test_a_slow_start_is_found_where_it_ends():
    assert warmup_end(_series(200, 50)) == 50


def test_steady_calls_have_no_warmup():
    assert warmup_end(_series(200, 0)) == 0
    assert warmup_end([5e6] * 100) == 0


def test_a_burst_of_noise_mid_run_is_not_warmup():
    x = _series(300, 0)
    x[150:170] *= 1.8
    assert warmup_end(x) == 0


def test_agrees_with_ruptures_binseg():
    """The same segmentation as ruptures' binary segmentation with an l2 cost and our penalty."""
    ruptures = pytest.importorskip("ruptures")
    x = _series(300, 60, seed=3)
    x[200:] *= 0.9
    logs = np.log(x)
    d = np.diff(logs)
    sd = np.median(np.abs(d - np.median(d))) / (np.sqrt(2) * 0.6745)
    theirs = ruptures.Binseg(model="l2", min_size=5, jump=1).fit(logs).predict(pen=2 * sd**2 * np.log(logs.size))
    assert change_points(x) == theirs[:-1]  # ruptures ends its list with the series' length


def test_planted_slow_warmup_of_50_calls_is_detected_and_excluded():
    """A closure whose first 50 calls are 60% slower; the protocol's 10 warm-up calls do not cover it."""
    c = NoisyClock(lambda n: 8e6 if n < 50 else 5e6)
    t = time_callable(c.fn, lambda out: None, Protocol(warmup=10, min_iters=60, min_time_s=0.0), clock=c.clock)
    assert t.warmup_found == 40  # the 40 slow calls after the 10 fixed ones
    assert len(t.warmup_ns) == 50 and t.settled
    assert len(t.samples_ns) >= 60 and max(t.samples_ns) < 6e6  # every kept sample is warm


def test_without_finding_the_warmup_the_slow_calls_stay():
    c = NoisyClock(lambda n: 8e6 if n < 50 else 5e6)
    t = time_callable(c.fn, lambda out: None, Protocol(warmup=10, min_iters=60, min_time_s=0.0, find_warmup=False),
                      clock=c.clock)
    assert t.warmup_found == 0 and max(t.samples_ns) > 7e6


def test_a_process_that_keeps_getting_faster_never_settles():
    c = NoisyClock(lambda n: 5e6 * 0.99 ** n + 1e6)  # faster every call for hundreds of calls
    t = time_callable(c.fn, lambda out: None, Protocol(warmup=2, min_iters=30, min_time_s=0.0), clock=c.clock)
    assert not t.settled


def test_settled_needs_a_quarter_of_the_calls_after_the_end():
    assert settled(list(range(100)), 70) and not settled(list(range(100)), 80)


@pytest.mark.parametrize("slow", [10, 15, 50, 120])
@pytest.mark.parametrize("factor", [1.1, 1.2, 2.0])
def test_the_end_is_found_within_a_call_for_slow_starts_of_any_length_and_size(slow, factor):
    """Seeded series of 300 calls with 3% noise whose first ``slow`` calls are ``factor`` x slower."""
    for seed in range(10):
        rng = np.random.default_rng(seed)
        x = np.full(300, 5e6)
        x[:slow] *= factor
        assert abs(warmup_end(x * np.exp(rng.normal(0, 0.03, 300))) - slow) <= 1
