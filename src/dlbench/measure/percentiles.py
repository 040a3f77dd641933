"""Tail latency: percentiles of single-call times with bootstrap intervals, and the refusal to
print one that the samples cannot support.

A q-th percentile is estimated from the few samples above it: with ``n`` samples, ``n * (1 - q)``
of them lie in the tail. Below :data:`TAIL_SAMPLES` such samples the estimate is one or two order
statistics and its interval says nothing, so it is refused with the reason (a p99.9 needs 10,000
calls, a p99 1,000). The interval is a percentile bootstrap of the pooled samples (resampled with
replacement ``resamples`` times, in chunks so 10^5 samples stay cheap), seeded: the same samples
always give the same interval.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

#: the percentiles a latency cell reports
QUANTILES = (50.0, 90.0, 99.0, 99.9)
#: samples a percentile needs in its tail (above it) before it is printed
TAIL_SAMPLES = 10
RESAMPLES = 1000


def samples_needed(q: float) -> int:
    """Samples a ``q``-th percentile needs: :data:`TAIL_SAMPLES` of them above it."""
    if not 0 < q < 100:
        raise ValueError(f"a percentile is in (0, 100), got {q}")
    return math.ceil(round(TAIL_SAMPLES / (1 - q / 100), 6))


@dataclass
class Percentile:
    q: float
    n: int  # samples behind it
    value: float | None = None  # None: refused
    ci_low: float | None = None
    ci_high: float | None = None
    refused: str = ""  # why no value is given

    @property
    def label(self) -> str:
        return f"p{self.q:g}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def percentiles(values, qs: tuple[float, ...] = QUANTILES, level: float = 0.95, resamples: int = RESAMPLES,
                seed: int = 0) -> list[Percentile]:
    """Each percentile of ``values`` with its bootstrap interval, or refused with the reason."""
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    out = []
    rng = np.random.default_rng(seed)
    boots: np.ndarray | None = None
    for q in qs:
        need = samples_needed(q)
        if n < need:
            out.append(Percentile(q, n, refused=f"{n} samples; a p{q:g} needs at least {need} "
                                                f"({TAIL_SAMPLES} above it)"))
            continue
        if boots is None:  # one set of resamples serves every percentile
            boots = _resampled_percentiles(x, qs, resamples, rng)
        row = boots[:, qs.index(q)]
        alpha = (1 - level) / 2
        out.append(Percentile(q, n, float(np.percentile(x, q)), float(np.quantile(row, alpha)),
                              float(np.quantile(row, 1 - alpha))))
    return out


def _resampled_percentiles(x: np.ndarray, qs: tuple[float, ...], resamples: int, rng) -> np.ndarray:
    """(resamples, len(qs)) percentiles of bootstrap resamples of ``x``."""
    chunk = max(1, min(resamples, 2_000_000 // max(x.size, 1)))
    rows = []
    done = 0
    while done < resamples:
        k = min(chunk, resamples - done)
        idx = rng.integers(0, x.size, size=(k, x.size))
        rows.append(np.percentile(x[idx], qs, axis=1).T)
        done += k
    return np.vstack(rows)
