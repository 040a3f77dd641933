from dlbench.measure.timer import Protocol, time_callable


class FakeClock:
    """Each call to the timed function advances time by its step; the clock never moves otherwise."""

    def __init__(self, steps_ns):
        self.now, self.steps, self.calls = 0, list(steps_ns), 0

    def clock(self):
        return self.now

    def fn(self):
        step = self.steps[min(self.calls, len(self.steps) - 1)]
        self.calls += 1
        self.now += step


def test_warmup_kept_apart_and_min_iters_honoured():
    c = FakeClock([50_000_000] + [5_000_000] * 1000)  # first call slow (compile), then 5 ms
    t = time_callable(c.fn, lambda out: None, Protocol(warmup=3, min_iters=7, min_time_s=0.0), clock=c.clock)
    assert t.first_call_ns == 50_000_000
    assert len(t.warmup_ns) == 3 and t.loop_k == 1
    assert len(t.samples_ns) == 7 and set(t.samples_ns) == {5_000_000}


def test_min_time_extends_sampling():
    c = FakeClock([10_000_000] * 1000)
    t = time_callable(c.fn, lambda out: None, Protocol(warmup=1, min_iters=2, min_time_s=0.1), clock=c.clock)
    assert len(t.samples_ns) == 10  # 10 x 10 ms reaches 0.1 s


def test_fast_iterations_are_looped():
    c = FakeClock([100_000] * 100_000)  # 0.1 ms
    t = time_callable(c.fn, lambda out: None, Protocol(warmup=2, min_iters=5, min_time_s=0.0), clock=c.clock)
    assert t.loop_k == 10
    assert t.samples_ns == [100_000.0] * 5


def test_sync_called_after_each_timed_call():
    synced = []
    c = FakeClock([2_000_000] * 100)
    time_callable(c.fn, synced.append, Protocol(warmup=2, min_iters=3, min_time_s=0.0), clock=c.clock)
    assert len(synced) == 5


def test_max_time_truncates_with_flag():
    c = FakeClock([1_000_000_000] * 100)
    t = time_callable(c.fn, lambda out: None, Protocol(warmup=1, min_iters=50, min_time_s=0.0, max_time_s=3.0),
                      clock=c.clock)
    assert t.truncated and len(t.samples_ns) == 3


def test_slow_calls_end_the_warmup_at_a_quarter_of_max_time():
    """Ten warm-up calls of 20 s each would outlast a 600 s cell timeout (H2O epochs did)."""
    c = FakeClock([60_000_000_000] + [20_000_000_000] * 100)  # first call 60 s, then 20 s
    t = time_callable(c.fn, lambda out: None, Protocol(warmup=10, min_iters=20, min_time_s=0.0, max_time_s=120.0),
                      clock=c.clock)
    assert t.warmup_truncated and len(t.warmup_ns) == 3  # first call, then 2 x 20 s reach 30 s
    assert t.first_call_ns == 60_000_000_000


def test_fast_calls_keep_every_warmup_call():
    c = FakeClock([50_000_000] * 100)
    t = time_callable(c.fn, lambda out: None, Protocol(warmup=10, min_iters=2, min_time_s=0.0), clock=c.clock)
    assert not t.warmup_truncated and len(t.warmup_ns) == 10
