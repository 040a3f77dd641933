"""Statistics from raw samples. Nothing here is stored: it is recomputed from the raw values.

The median is the headline (robust to the odd slow iteration a shared machine adds); its 95%
confidence interval is a seeded percentile bootstrap, so the same samples give the same interval.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

NOISY_CV = 0.10  # std >= 10% of the mean
OUTLIER_DEV = 0.50  # min or max >= 50% away from the mean
MIN_SAMPLES = 10
BOOTSTRAP = 2000


@dataclass
class Summary:
    n: int
    median: float
    mean: float
    std: float
    min: float
    max: float
    p5: float
    p95: float
    iqr: float
    ci_low: float
    ci_high: float
    warnings: list[str] = field(default_factory=list)

    def to_dict(self) -> dict:
        return asdict(self)

    def scaled(self, factor: float) -> Summary:
        """The same summary in other units (e.g. ns -> ms); warnings unchanged."""
        d = {k: (v * factor if isinstance(v, float) else v) for k, v in asdict(self).items()}
        return Summary(**d)


def bootstrap_ci(values: np.ndarray, stat=np.median, level: float = 0.95, resamples: int = BOOTSTRAP,
                 seed: int = 0) -> tuple[float, float]:
    """Percentile bootstrap interval of ``stat`` (seeded: deterministic for the same data)."""
    values = np.asarray(values, dtype=np.float64)
    if values.size < 2:
        v = float(values[0]) if values.size else float("nan")
        return v, v
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, values.size, (resamples, values.size))
    stats = stat(values[idx], axis=1)
    alpha = (1 - level) / 2
    return float(np.quantile(stats, alpha)), float(np.quantile(stats, 1 - alpha))


def summarize(values, min_samples: int = MIN_SAMPLES) -> Summary:
    """Median, mean, spread, percentiles, CI of the median, and the warnings the values deserve."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("no samples to summarise")
    mean = float(v.mean())
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    q25, q75 = np.quantile(v, [0.25, 0.75])
    lo, hi = bootstrap_ci(v)
    warnings = []
    if mean > 0 and std >= NOISY_CV * mean:
        warnings.append(f"noisy: std is {100 * std / mean:.0f}% of the mean")
    if mean > 0 and (abs(v.min() - mean) >= OUTLIER_DEV * mean or abs(v.max() - mean) >= OUTLIER_DEV * mean):
        warnings.append(f"outlier: min {v.min() / mean:.2f}x / max {v.max() / mean:.2f}x the mean")
    if v.size < min_samples:
        warnings.append(f"too few samples: {v.size} < {min_samples}")
    return Summary(
        n=int(v.size), median=float(np.median(v)), mean=mean, std=std, min=float(v.min()), max=float(v.max()),
        p5=float(np.quantile(v, 0.05)), p95=float(np.quantile(v, 0.95)), iqr=float(q75 - q25),
        ci_low=lo, ci_high=hi, warnings=warnings,
    )


def ratio_ci(a, b, level: float = 0.95, resamples: int = BOOTSTRAP, seed: int = 0) -> tuple[float, float, float]:
    """median(b) / median(a) with a bootstrap interval (each side resampled independently)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    rng = np.random.default_rng(seed)
    ma = np.median(a[rng.integers(0, a.size, (resamples, a.size))], axis=1)
    mb = np.median(b[rng.integers(0, b.size, (resamples, b.size))], axis=1)
    r = mb / ma
    alpha = (1 - level) / 2
    return float(np.median(b) / np.median(a)), float(np.quantile(r, alpha)), float(np.quantile(r, 1 - alpha))
