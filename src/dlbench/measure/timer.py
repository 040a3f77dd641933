"""One timing protocol for every backend.

Each iteration is timed on its own with ``perf_counter_ns`` around ``fn()`` followed by the
backend's ``sync`` (an asynchronous engine timed without a sync measures how fast it queues
work, the bug behind early wrong MXNet figures). Warm-up iterations are timed and kept, flagged,
then dropped from the statistics; the warm-up ends after ``warmup`` calls, or earlier once the calls
after the first (which holds compilation) have taken ``max_time_s / 4``: a call of tens of seconds
(an H2O epoch, a CPU ResNet-50 step at a large batch) is warm after one or two calls, and ten of
them would outlast the cell's timeout. Then iterations run until there are at least ``min_iters``
samples *and* ``min_time_s`` seconds have passed. When one iteration takes under ``loop_below_ns``,
a sample is a loop of ``k`` iterations (one sync at the end) divided by ``k``, and ``k`` is recorded.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


@dataclass(frozen=True)
class Protocol:
    warmup: int = 10
    min_iters: int = 20
    min_time_s: float = 2.0
    repeats: int = 3
    loop_below_ns: int = 1_000_000
    max_time_s: float = 120.0  # stop sampling after this, even below min_iters (a warning says so)


@dataclass
class Timing:
    warmup_ns: list[float] = field(default_factory=list)
    samples_ns: list[float] = field(default_factory=list)  # per iteration (loop time / k)
    loop_k: int = 1
    first_call_ns: float | None = None
    truncated: bool = False
    warmup_truncated: bool = False  # the warm-up stopped at its time budget, before ``warmup`` calls

    def to_dict(self) -> dict:
        return {"warmup_ns": self.warmup_ns, "samples_ns": self.samples_ns, "loop_k": self.loop_k,
                "first_call_ns": self.first_call_ns, "truncated": self.truncated,
                "warmup_truncated": self.warmup_truncated}


def time_callable(fn: Callable[[], Any], sync: Callable[[Any], None], protocol: Protocol,
                  clock: Callable[[], int] = time.perf_counter_ns) -> Timing:
    """Measure ``fn`` under ``protocol``; the first warm-up call (compilation, lazy init) is kept apart."""
    timing = Timing()
    calls = max(protocol.warmup, 1)
    for i in range(calls):
        t0 = clock()
        sync(fn())
        dt = clock() - t0
        if i == 0:
            timing.first_call_ns = float(dt)
        timing.warmup_ns.append(float(dt))
        if i + 1 < calls and sum(timing.warmup_ns[1:]) / 1e9 >= protocol.max_time_s / 4:
            timing.warmup_truncated = True
            break
    steady = timing.warmup_ns[-1] if len(timing.warmup_ns) == 1 else min(timing.warmup_ns[1:])
    k = 1
    if steady < protocol.loop_below_ns:
        k = max(1, math.ceil(protocol.loop_below_ns / max(steady, 1.0)))
    timing.loop_k = k
    started = clock()
    while True:
        t0 = clock()
        out = None
        for _ in range(k):
            out = fn()
        sync(out)
        timing.samples_ns.append((clock() - t0) / k)
        elapsed = (clock() - started) / 1e9
        if len(timing.samples_ns) >= protocol.min_iters and elapsed >= protocol.min_time_s:
            break
        if elapsed >= protocol.max_time_s:
            timing.truncated = True
            break
    return timing
