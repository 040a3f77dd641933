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

The warm-up count is a floor, not an assumption (``find_warmup``): the samples are then searched for
the end of a slow start (:mod:`dlbench.measure.warmup`, change-point detection). Samples before it
join the warm-up, and sampling goes on until ``min_iters`` samples follow it; ``warmup_found`` says
how many samples were moved, ``settled`` whether the process reached a level at all.

A ``meter`` (:class:`dlbench.measure.energy.Meter`) is read right before the first sampled call and
right after each round of sampling (the last reading ends its window): the window holds every sampled call (those
later found to be warm-up included, :func:`sampled_calls`) and no warm-up call.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from dlbench.measure.warmup import warmup_end

if TYPE_CHECKING:
    from dlbench.measure.energy import Meter

#: searches for the end of the warm-up (each after sampling ``min_iters`` more)
MAX_LOOKS = 4


@dataclass(frozen=True)
class Protocol:
    warmup: int = 10
    min_iters: int = 20
    min_time_s: float = 2.0
    repeats: int = 3
    loop_below_ns: int = 1_000_000
    max_time_s: float = 120.0  # stop sampling after this, even below min_iters (a warning says so)
    find_warmup: bool = True  # look for the warm-up's end in the samples (dlbench.measure.warmup)


@dataclass
class Timing:
    warmup_ns: list[float] = field(default_factory=list)
    samples_ns: list[float] = field(default_factory=list)  # per iteration (loop time / k)
    loop_k: int = 1
    first_call_ns: float | None = None
    truncated: bool = False
    warmup_truncated: bool = False  # the warm-up stopped at its time budget, before ``warmup`` calls
    warmup_found: int = 0  # samples found to be warm-up (moved to ``warmup_ns``, after the fixed calls)
    settled: bool = True  # False: the samples never reached a level (their warm-up never ended)
    warmup_s: float = 0.0  # wall time of the warm-up calls (the fixed ones)
    sampling_s: float = 0.0  # wall time of the sampling (found warm-up included)

    def to_dict(self) -> dict:
        return {"warmup_ns": self.warmup_ns, "samples_ns": self.samples_ns, "loop_k": self.loop_k,
                "first_call_ns": self.first_call_ns, "truncated": self.truncated,
                "warmup_truncated": self.warmup_truncated, "warmup_found": self.warmup_found,
                "settled": self.settled, "warmup_s": self.warmup_s, "sampling_s": self.sampling_s}


def sampled_calls(timing: Timing) -> int:
    """The calls made between the sampling's start and its end (the meter's window): every sample's
    loop, those moved to the warm-up by ``find_warmup`` included."""
    return (len(timing.samples_ns) + timing.warmup_found) * timing.loop_k


def time_callable(fn: Callable[[], Any], sync: Callable[[Any], None], protocol: Protocol,
                  clock: Callable[[], int] = time.perf_counter_ns, meter: Meter | None = None) -> Timing:
    """Measure ``fn`` under ``protocol``; the first warm-up call (compilation, lazy init) is kept apart.
    ``meter``: energy counters read around the sampling (:func:`sampled_calls` calls)."""
    timing = Timing()
    calls = max(protocol.warmup, 1)
    began = clock()
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
    if meter is not None:
        meter.start()
    started = clock()
    timing.warmup_s = (started - began) / 1e9

    def sample(min_time_s: float) -> bool:
        """Sample until ``min_iters`` samples and ``min_time_s``; True if ``max_time_s`` stopped it."""
        while True:
            t0 = clock()
            out = None
            for _ in range(k):
                out = fn()
            sync(out)
            timing.samples_ns.append((clock() - t0) / k)
            elapsed = (clock() - started) / 1e9
            done = len(timing.samples_ns) >= protocol.min_iters and elapsed >= min_time_s
            if done or elapsed >= protocol.max_time_s:
                if meter is not None:  # the window's end, until a later sampling moves it
                    meter.stop()
                return not done

    timing.truncated = sample(protocol.min_time_s)
    looks = 0
    while protocol.find_warmup and looks < MAX_LOOKS:
        looks += 1
        end = warmup_end(timing.samples_ns)
        if end == 0:
            break
        timing.warmup_ns += timing.samples_ns[:end]
        timing.samples_ns = timing.samples_ns[end:]
        timing.warmup_found += end
        if timing.truncated:
            timing.settled = len(timing.samples_ns) >= protocol.min_iters
            break
        timing.truncated = sample(0.0)
    else:
        timing.settled = not protocol.find_warmup or warmup_end(timing.samples_ns) == 0
    timing.sampling_s = (clock() - started) / 1e9
    return timing
