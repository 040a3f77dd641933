"""Where a process's warm-up ends, found in its call times rather than assumed.

A fixed count of warm-up calls (10) is right for most closures and wrong for the rest: a JIT that
re-specialises after its 20th call, an allocator that grows its pools over the first 50 steps, a
CPU whose frequency settles late. So the timer asks the call times themselves.

The method is change-point detection of the mean of the *log* call times (a slow phase is a
multiplicative shift), by binary segmentation with a BIC penalty (as ``ruptures.Binseg`` with an
``l2`` cost and ``pen = 2 sigma^2 log n``; tests/test_warmup.py checks the two agree). The noise
``sigma`` is estimated from the first differences' median absolute deviation, which a level shift
barely moves. Segments shorter than :data:`MIN_SEGMENT` are not split off.

The warm-up ends where the leading run of segments slower than the final level (by more than
:data:`SETTLE_MARGIN`) ends: a burst of noise in the middle of a run is kept, not called warm-up. A
process **never settles** when what follows that end is shorter than a quarter of its calls
(:func:`settled`): the run's last level is then too short to tell a level from a trend.

NumPy only: it runs inside every framework's measuring process, in environments without ruptures.
"""

from __future__ import annotations

import math

import numpy as np

#: the fewest calls a segment holds
MIN_SEGMENT = 5
#: a segment slower than the final level by less than this (relative) is at that level
SETTLE_MARGIN = 0.02
#: the most change points looked for
MAX_CHANGES = 8


def noise_sd(x: np.ndarray) -> float:
    """Robust sd of the values' noise: MAD of first differences / (sqrt 2 * 0.6745)."""
    if x.size < 3:
        return 0.0
    d = np.diff(x)
    return float(np.median(np.abs(d - np.median(d))) / (math.sqrt(2) * 0.6745))


def _best_split(lo: int, hi: int, csum: np.ndarray) -> tuple[float, int]:
    """The split of x[lo:hi] that lowers the squared error most: (gain, index)."""
    n = hi - lo
    if n < 2 * MIN_SEGMENT:
        return 0.0, -1
    k = np.arange(lo + MIN_SEGMENT, hi - MIN_SEGMENT + 1)
    left_n, right_n = k - lo, hi - k
    left_s, right_s = csum[k] - csum[lo], csum[hi] - csum[k]
    total = csum[hi] - csum[lo]
    # squared error falls by  left_s^2/left_n + right_s^2/right_n - total^2/n
    gain = left_s**2 / left_n + right_s**2 / right_n - total**2 / n
    i = int(np.argmax(gain))
    return float(gain[i]), int(k[i])


def change_points(times, penalty: float | None = None) -> list[int]:
    """Indices where the mean of log ``times`` changes (sorted), by binary segmentation."""
    x = np.log(np.asarray(times, np.float64))
    n = x.size
    if n < 2 * MIN_SEGMENT:
        return []
    sd = noise_sd(x)
    if sd == 0:  # most differences are exactly 0 (a coarse clock): the plain sd, conservatively
        sd = float(np.std(x))
    if sd == 0:
        return []
    pen = penalty if penalty is not None else 2 * sd**2 * math.log(n)
    csum = np.concatenate([[0.0], np.cumsum(x)])
    cps: list[int] = []
    segments = [(0, n)]
    while len(cps) < MAX_CHANGES:
        best = max(((*_best_split(lo, hi, csum), lo, hi) for lo, hi in segments), default=(0.0, -1, 0, 0))
        gain, k, lo, hi = best
        if k < 0 or gain <= pen:
            break
        cps.append(k)
        segments.remove((lo, hi))
        segments += [(lo, k), (k, hi)]
    return sorted(cps)


def warmup_end(times) -> int:
    """How many leading calls of ``times`` are warm-up: the end of the leading segments slower than
    the last one by more than :data:`SETTLE_MARGIN` (0: none)."""
    x = np.log(np.asarray(times, np.float64))
    cps = change_points(times)
    if not cps:
        return 0
    bounds = [0, *cps, x.size]
    final = float(np.mean(x[bounds[-2]:]))
    end = 0
    for lo, hi in zip(bounds[:-1], bounds[1:], strict=False):
        if float(np.mean(x[lo:hi])) - final > math.log1p(SETTLE_MARGIN):
            end = hi
        else:
            break
    return end


def settled(times, end: int) -> bool:
    """Whether what follows the warm-up is long enough to be a level: a quarter of the calls, and at
    least :data:`MIN_SEGMENT`."""
    rest = len(times) - end
    return rest >= max(MIN_SEGMENT, len(times) / 4)
