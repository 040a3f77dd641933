"""Step changes in a figure's history: where a figure moved and stayed moved, across releases and runs.

Consecutive points of a series (:mod:`dlbench.report.versions`) are compared one pair at a time by
``history``; a slowdown that came in small steps, or one hidden by one noisy night, escapes that. Here
the whole series is segmented at once, as asv and Conbench do for one project's history:

1. *Where*: ``ruptures``' PELT (exact optimal segmentation, least squares on the logarithm of each
   point's median, since timings change multiplicatively), with a penalty of ``2 sigma^2 ln n``
   (BIC for a change in mean) from a robust estimate of the point-to-point noise (the median absolute
   deviation of the first differences, which one step does not inflate). A segment may be one point
   long, so a step at the newest point, the one a nightly job wants to hear about, can be found.
2. *Whether*: each boundary is tested on the points of the segment before against those after
   (:func:`segment_test`: the point, a run's cell, is the unit, since points differ by the run-to-run
   drift as well as by process noise) in the series' own spread (the larger of the robust estimate
   above and the segments' pooled residual), with ``compare``'s bar made honest for the search: the
   segmentation chose the boundary among every position, so p must be below
   :data:`~dlbench.report.compare.ALPHA` divided by the positions (Bonferroni), and the change above
   :data:`~dlbench.report.compare.THRESHOLD`; and the processes behind the two sides must agree (the
   process-level test ``compare`` uses, p < :data:`~dlbench.report.compare.ALPHA`), so a point whose own
   processes spread across both levels is no step. A single point that moved and came back is an outlier,
   not a step. Boundaries that do not pass are dropped one at a time, weakest first, and the rest re-tested.

Each change carries its size (the ratio of the segments' geometric means with its 95% interval) and
its significance (p). Pure over analysed series.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

import numpy as np

from dlbench.core.errors import UsageError
from dlbench.measure.stats import process_p_value
from dlbench.report.compare import ALPHA, THRESHOLD

__all__ = ["Change", "breakpoints", "detect", "detect_series"]


@dataclass
class Change:
    index: int  # the first point after the change
    before: str  # label of the last point before it
    after: str  # label of the first point after it
    median_before_ms: float  # geometric mean of the segment's points
    median_after_ms: float
    ratio: float  # after / before
    ci_low: float
    ci_high: float
    p_value: float
    points_before: int
    points_after: int
    verdict: str  # slower, faster

    @property
    def change_pct(self) -> float:
        return (self.ratio - 1.0) * 100.0

    @property
    def text(self) -> str:
        return (f"step {self.change_pct:+.1f}% [{(self.ci_low - 1) * 100:+.1f}%, {(self.ci_high - 1) * 100:+.1f}%] "
                f"(p={self.p_value:.2g})")

    def to_dict(self) -> dict[str, Any]:
        return {**asdict(self), "change_pct": self.change_pct}


def _ruptures():
    try:
        import ruptures
    except ImportError:
        raise UsageError("change detection needs the ruptures package: pip install 'dlbench[history]'") from None
    return ruptures


def noise(values: np.ndarray) -> float:
    """The point-to-point spread of a series without its steps: the MAD of the first differences,
    scaled to a standard deviation (a difference of two points has twice a point's variance)."""
    if values.size < 3:
        return 0.0
    d = np.diff(values)
    return float(1.4826 * np.median(np.abs(d - np.median(d))) / math.sqrt(2))


#: the least point-to-point spread assumed (log scale, about 1%): a perfectly flat series would otherwise make
#: every wiggle a step
FLOOR = 0.01


def breakpoints(values: list[float], floor: float = FLOOR) -> list[int]:
    """Where a new segment starts in ``values`` (log medians), by PELT with a BIC penalty; ``floor`` is
    the least noise assumed (a perfectly flat series would otherwise make every wiggle a step)."""
    x = np.asarray(values, np.float64)
    if x.size < 2:
        return []
    sigma = max(noise(x), floor)
    algo = _ruptures().Pelt(model="l2", min_size=1, jump=1).fit(x.reshape(-1, 1))
    ends = algo.predict(pen=2 * sigma ** 2 * math.log(x.size))
    return [e for e in ends if e < x.size]


def segment_test(a: list[float], b: list[float], sigma: float, df: int) -> tuple[float, float, float, float]:
    """Segment ``b`` against segment ``a`` (each a list of point levels, ms): (ratio b/a, its 95% interval,
    p). The point is the unit (points differ by the run-to-run drift as well as by process noise, so a
    segment's processes are not independent draws), and the spread is the whole series' ``sigma`` (log
    scale), not each segment's own: a short segment the segmentation picked because its few points
    happen to agree would otherwise look far more certain than it is. t with ``df`` degrees of freedom."""
    from scipy.stats import t as student_t

    la, lb = np.log(np.asarray(a, np.float64)), np.log(np.asarray(b, np.float64))
    d = float(lb.mean() - la.mean())
    se = sigma * math.sqrt(1 / la.size + 1 / lb.size)
    p = float(2 * student_t.sf(abs(d) / se, df))
    q = float(student_t.ppf(0.975, df))
    return math.exp(d), math.exp(d - q * se), math.exp(d + q * se), p


def _processes_agree(before: list[list[float]], after: list[list[float]], alpha: float) -> bool:
    """Whether the processes behind a step say the same as its points: ``compare``'s Welch test on the
    log per-process medians of the two sides, p < ``alpha``. A point is one run's cell, and the point-level
    test sees only its centre: a newest point whose own processes spread from the old level to far above
    it (one slow process on a busy machine) moves the centre without being a step."""
    a, b = [v for m in before for v in m], [v for m in after for v in m]
    if len(a) < 2 or len(b) < 2:
        return True  # one process a side: no process-level test to ask
    return process_p_value(a, b) < alpha


def detect(medians: list[list[float]], labels: list[str], alpha: float = ALPHA,
           threshold: float = THRESHOLD) -> list[Change]:
    """The significant steps of a series whose point ``i`` has the per-process medians ``medians[i]``.

    The segmentation's boundaries are tested together and pruned one at a time (the weakest first),
    each pruning merging two segments and re-estimating the spread from what is left, until every
    boundary left passes: a spurious boundary must not lend its neighbours a spread it shrank."""
    level = [float(np.exp(np.mean(np.log(m)))) for m in medians]  # a point: the geometric mean of its processes
    if len(level) < 3:
        return []  # no spread to judge a step by
    logs = np.log(level)
    bar = alpha / (len(level) - 1)  # the segmentation looked at every position: Bonferroni over them
    cuts = breakpoints(list(logs))
    while cuts:
        bounds = [0, *cuts, len(level)]
        df = len(level) - len(cuts) - 1
        residual = np.concatenate([logs[a:b] - logs[a:b].mean() for a, b in zip(bounds, bounds[1:], strict=False)])
        sigma = max(noise(logs), float(np.sqrt((residual ** 2).sum() / df)), FLOOR)
        found, weakest = [], None
        for k, cut in enumerate(cuts):
            before, after = level[bounds[k]:cut], level[cut:bounds[k + 2]]
            ratio, lo, hi, p = segment_test(before, after, sigma, df)
            outlier = (len(after) == 1 and bounds[k + 2] < len(level)) or (len(before) == 1 and bounds[k] > 0)
            if not (outlier or p >= bar or abs(ratio - 1.0) <= threshold) and not _processes_agree(
                    medians[bounds[k]:cut], medians[cut:bounds[k + 2]], alpha):
                outlier = True  # the points moved, but their own processes do not say so
            if outlier or p >= bar or abs(ratio - 1.0) <= threshold:
                strength = (not outlier, abs(ratio - 1.0) > threshold, -p)
                if weakest is None or strength < weakest[0]:
                    weakest = (strength, cut)
                continue
            found.append(Change(cut, labels[cut - 1], labels[cut], float(np.exp(np.mean(np.log(before)))),
                                float(np.exp(np.mean(np.log(after)))), ratio, lo, hi, p, len(before), len(after),
                                "slower" if ratio > 1 else "faster"))
        if weakest is None:
            return found
        cuts.remove(weakest[1])
    return []


def point_medians(cell) -> list[float]:
    """A stored cell's per-process medians (its one median where it ran one process)."""
    return list(cell.repeat_medians_ms) or [cell.time_ms.median]


def detect_series(series, alpha: float = ALPHA, threshold: float = THRESHOLD) -> list[Change]:
    """The steps of a :class:`dlbench.report.versions.Series`, each point labelled as ``history`` shows it."""
    labels = [f"{p.label} {p.date}" if len({q.label for q in series.points}) < len(series.points) else p.label
              for p in series.points]
    return detect([point_medians(p.cell) for p in series.points], labels, alpha, threshold)
