"""Tail latency: percentiles of single-call times with bootstrap intervals, and the refusal to
print one that the samples cannot support.

A q-th percentile is estimated from the few samples above it: with ``n`` samples, ``n * (1 - q)``
of them lie in the tail. Below :data:`TAIL_SAMPLES` such samples the estimate is one or two order
statistics and its interval says nothing, so it is refused with the reason (a p99.9 needs 10,000
calls, a p99 1,000). The interval is a percentile bootstrap, seeded: the same samples always give
the same interval. When the samples come from several processes it is *hierarchical*, as the
medians' interval is (:mod:`dlbench.measure.stats`): each resample draws the processes first and the
calls within each chosen process second, because two fresh processes serving the same model differ
far more than the calls of one (a p50 of 0.095 ms in one process and 0.134 ms in the other was seen);
a bootstrap of the pooled calls would say what more calls of the same processes give, not what a
re-run gives. Where every process has enough calls of its own for the percentile, the interval is
also never narrower than Student's t interval over the processes' own values
(:func:`dlbench.measure.stats.process_ci`): a bootstrap over 2 or 3 processes has too few distinct
draws to be trusted alone. :func:`disagreement` names the percentiles on which the processes disagree.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dlbench.measure.stats import process_ci

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
                seed: int = 0, groups=None) -> list[Percentile]:
    """Each percentile of ``values`` with its bootstrap interval, or refused with the reason.

    ``groups`` (one process index per value) makes the interval hierarchical over the processes
    when there are two or more of them."""
    x = np.asarray(values, dtype=float)
    n = int(x.size)
    parts = _groups(x, groups)
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
            boots = (_resampled_percentiles(x, qs, resamples, rng) if len(parts) < 2
                     else hierarchical_percentiles(parts, qs, resamples, rng))
        row = boots[:, qs.index(q)]
        alpha = (1 - level) / 2
        value, lo, hi = float(np.percentile(x, q)), float(np.quantile(row, alpha)), float(np.quantile(row, 1 - alpha))
        if len(parts) >= 2 and all(p.size >= need for p in parts):  # never narrower than the processes allow
            plo, phi = process_ci([float(np.percentile(p, q)) for p in parts], level)
            lo, hi = min(lo, plo), max(hi, phi)
        out.append(Percentile(q, n, value, lo, hi))
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


def _groups(x: np.ndarray, groups) -> list[np.ndarray]:
    if groups is None:
        return [x]
    g = np.asarray(groups)
    if g.shape != x.shape:
        raise ValueError(f"groups has shape {g.shape}, values {x.shape}")
    return [x[g == k] for k in np.unique(g) if np.any(g == k)]


def hierarchical_percentiles(parts: list[np.ndarray], qs: tuple[float, ...], resamples: int, rng) -> np.ndarray:
    """(resamples, len(qs)) percentiles of hierarchical resamples: ``len(parts)`` processes drawn with
    replacement, then each chosen process's calls drawn with replacement from its own. Processes of
    one size (the usual case) are drawn in vectorised chunks; others one resample at a time."""
    k = len(parts)
    sizes = np.array([p.size for p in parts])
    out = np.empty((resamples, len(qs)))
    if np.all(sizes == sizes[0]):
        n = int(sizes[0])
        flat = np.concatenate(parts)
        chunk = max(1, min(resamples, 2_000_000 // max(k * n, 1)))
        for start in range(0, resamples, chunk):
            r = min(chunk, resamples - start)
            chosen = rng.integers(0, k, (r, k, 1))
            idx = chosen * n + rng.integers(0, n, (r, k, n))
            out[start:start + r] = np.percentile(flat[idx].reshape(r, k * n), qs, axis=1).T
        return out
    for i in range(resamples):
        chosen = rng.integers(0, k, k)
        drawn = np.concatenate([parts[c][rng.integers(0, parts[c].size, parts[c].size)] for c in chosen])
        out[i] = np.percentile(drawn, qs)
    return out


#: per-process values of one percentile more than this far apart (as a share of the pooled value)
PROCESS_SPREAD = 0.10


def disagreement(pooled: list[Percentile], per_process: list[list[Percentile]],
                 spread: float = PROCESS_SPREAD) -> list[str]:
    """A warning per percentile whose per-process values span more than ``spread`` of the pooled value
    (only percentiles every process could give): the cell's processes do not agree, and a re-run may
    land anywhere between them."""
    out = []
    if len(per_process) < 2:
        return out
    for j, p in enumerate(pooled):
        values = [pp[j].value for pp in per_process]
        if p.value is None or not p.value or any(v is None for v in values):
            continue
        lo, hi = min(values), max(values)  # type: ignore[type-var]
        if (hi - lo) / p.value > spread:
            out.append(f"processes disagree on {p.label}: {', '.join(f'{v:.3g}' for v in values)} ms in its "
                       f"{len(values)} processes ({100 * (hi - lo) / p.value:.0f}% of the pooled {p.value:.3g} ms)")
    return out
