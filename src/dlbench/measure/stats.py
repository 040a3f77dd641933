"""Statistics from raw samples. Nothing here is stored: it is recomputed from the raw values.

The median is the headline (robust to the odd slow iteration a shared machine adds); its 95%
confidence interval is a seeded percentile bootstrap, so the same samples give the same interval.

Iterations of one process are not independent draws: on the machines we measured, two fresh
processes running the identical step differ by 10-20% (placement, allocator and cache state), far
more than iterations within one process. When the samples come from several processes the
interval must say what a re-run would give, not what more iterations of the same processes would
give. With two or more processes it is therefore built on the processes: Student's t interval of
the mean of the per-process medians' logarithms (timings change multiplicatively), the interval
``dlbench compare`` uses for a ratio, widened where needed to hold the pooled median it is shown
beside. A hierarchical bootstrap (processes first, iterations within each chosen process second)
says the same in spirit but, with the 3 processes a cell has, covers the true median in about 71%
of simulated cells for a nominal 95% (only 10 distinct draws of 3 processes);
``tests/test_stats.py::test_the_95_interval_covers_the_true_median_95_times_in_100`` pins the
coverage. With one process that spread is invisible and the interval (a plain bootstrap) is
optimistic; the runner warns about it.

An interval over few processes that disagree is valid but says nothing: two processes of which one
ran beside other load gave a TTFT of 189 ms with the interval [0.000119, 1,910,736,919] ms (Student's t
with one degree of freedom has a 97.5% quantile of 12.7). :func:`processes_disagree` is the one rule
that says so (the interval's upper end more than :data:`UNRESOLVED_RATIO` times its lower end); every
view (the summary, the report, the JSON outputs, the cost table) then shows each process's median and
the verdict "processes disagree" with the command that measures more (:func:`interval_text`), not
the interval.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import asdict, dataclass, field

import numpy as np

from dlbench.core.document import DASH, Value, fmt_num

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
    #: the median of each process, in process order (empty: the values were not grouped by process)
    processes: list[float] = field(default_factory=list)

    @property
    def disagree(self) -> bool:
        """The processes disagree beyond what the interval can resolve (:func:`processes_disagree`)."""
        return processes_disagree(self.ci_low, self.ci_high, self.processes)

    def to_dict(self) -> dict:
        """The figures, with the verdict of :func:`processes_disagree` and, where the processes
        disagree, the command that measures more."""
        return {**asdict(self), "processes_disagree": self.disagree,
                "measure_more": measure_more(len(self.processes)) if self.disagree else None}

    def scaled(self, factor: float) -> Summary:
        """The same summary in other units (e.g. ns -> ms; a rate times a batch); warnings unchanged."""
        d = {k: (v * factor if isinstance(v, float) else v) for k, v in asdict(self).items()}
        d["processes"] = [v * factor for v in self.processes]
        return Summary(**d)


#: an interval over processes whose upper end is more than this many times its lower end resolves
#: nothing the processes' own medians do not show: the processes disagree beyond what so few of them
#: can average out. Two processes 5% apart give a ratio of 1.9, 10% apart 3.4 (t with one degree of
#: freedom); three processes whose medians span 20% about 1.6.
UNRESOLVED_RATIO = 3.0


def processes_disagree(ci_low: float, ci_high: float, processes: list[float]) -> bool:
    """The one rule every view applies: two or more processes, and an interval of their centre that
    spans more than :data:`UNRESOLVED_RATIO` (or reaches zero). One process has no spread to judge."""
    return len(processes) >= 2 and not (ci_low > 0 and ci_high <= UNRESOLVED_RATIO * ci_low)


def measure_more(processes: int) -> str:
    """The command-line flags that measure a cell whose processes disagree to an interval that says
    something: more processes (a t quantile falls from 12.7 at 2 processes to 2.6 at 6), or a target."""
    return f"measure more processes: --repeats {max(6, 2 * processes)}, or --target-ci 10"


def interval_text(s: Summary, fmt: Callable[[float], str], shown: Callable[[float], float] = float,
                  unit: str = "") -> str:
    """``median [low, high] unit``, or where the processes disagree (:func:`processes_disagree`), each
    process's median and the verdict with the command that measures more. ``shown`` maps a value into
    the unit shown (a time into a rate: ``lambda ms: n / ms``; the ends are put in order)."""
    unit = f" {unit}" if unit else ""
    if s.disagree:
        return (f"processes disagree: {' / '.join(fmt(shown(v)) for v in s.processes)}{unit} per process "
                f"({measure_more(len(s.processes))})")
    low, high = sorted((shown(s.ci_low), shown(s.ci_high)))
    return f"{fmt(shown(s.median))} [{fmt(low)}, {fmt(high)}]{unit}"


def interval_value(s: Summary | None) -> Value:
    """A report table's cell of a figure: its median ranked, the interval as the detail; where the
    processes disagree, :func:`interval_text`'s verdict, ranked by nothing (no figure to rank by)."""
    if s is None:
        return Value(DASH)
    if s.disagree:
        return Value(interval_text(s, fmt_num))
    return Value(fmt_num(s.median), s.median, detail=f"[{fmt_num(s.ci_low)}, {fmt_num(s.ci_high)}]")


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


PROCESS_SPREAD = 0.10  # per-process medians more than 10% apart


def _as_groups(values, groups) -> list[np.ndarray]:
    v = np.asarray(values, dtype=np.float64)
    if groups is None:
        return [v]
    g = np.asarray(groups)
    if g.shape != v.shape:
        raise ValueError(f"groups has shape {g.shape}, values {v.shape}")
    return [v[g == k] for k in np.unique(g)]


#: values drawn at once by :func:`hierarchical_medians` (memory: 8 bytes each, twice)
BOOTSTRAP_BLOCK = 2_000_000
#: the widest resample (groups x largest group) :func:`hierarchical_medians` draws vectorised; past it,
#: sorting the padded rows gains little on, or loses to, one Python iteration per resample
#: (benchmarks/bootstrap_speed.py times both)
VECTORISED_WIDTH = 2_000


def hierarchical_medians(groups: list[np.ndarray], resamples: int = BOOTSTRAP,
                         rng: np.random.Generator | None = None) -> np.ndarray:
    """Bootstrap distribution of the pooled median: resample the groups (processes), then the
    values within each chosen group. With a single group it is the plain bootstrap.

    Vectorised over resamples (up to :data:`VECTORISED_WIDTH` values a resample; wider ones one at a
    time), in blocks of :data:`BOOTSTRAP_BLOCK` values: a resample's chosen groups
    are drawn into a row padded to the largest group (padding sorts last as +inf), and the median is
    read at the row's own middle. It draws what :func:`hierarchical_medians_by_definition` draws;
    ``benchmarks/bootstrap_speed.py`` times the two (docs/performance/bootstrap_speed.md)."""
    rng = rng or np.random.default_rng(0)
    groups = [np.asarray(g, dtype=np.float64) for g in groups if len(g)]
    if len(groups) == 1:
        g = groups[0]
        return np.median(g[rng.integers(0, g.size, (resamples, g.size))], axis=1)
    k = len(groups)
    sizes = np.array([g.size for g in groups])
    width = int(sizes.max())
    if k * width > VECTORISED_WIDTH:
        return hierarchical_medians_by_definition(groups, resamples, rng)
    offsets = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    flat = np.concatenate(groups)
    block = max(1, BOOTSTRAP_BLOCK // (k * width))
    out = np.empty(resamples)
    for start in range(0, resamples, block):
        r = min(block, resamples - start)
        chosen = rng.integers(0, k, (r, k))
        n = sizes[chosen][..., None]  # (r, k, 1): each chosen group's size
        draws = np.minimum((rng.random((r, k, width)) * n).astype(np.int64), n - 1)
        values = flat[offsets[chosen][..., None] + draws]
        values[np.arange(width) >= n] = np.inf  # past a group's own size: padding
        values = np.sort(values.reshape(r, k * width), axis=1)
        total, rows = n.sum(axis=(1, 2)), np.arange(r)
        out[start:start + r] = (values[rows, (total - 1) // 2] + values[rows, total // 2]) / 2
    return out


def hierarchical_medians_by_definition(groups: list[np.ndarray], resamples: int = BOOTSTRAP,
                                       rng: np.random.Generator | None = None) -> np.ndarray:
    """The hierarchical bootstrap one resample at a time, as its definition reads: the reference the
    vectorised :func:`hierarchical_medians` is checked and timed against (about 56 us a resample)."""
    rng = rng or np.random.default_rng(0)
    groups = [np.asarray(g, dtype=np.float64) for g in groups if len(g)]
    out = np.empty(resamples)
    for i in range(resamples):
        chosen = rng.integers(0, len(groups), len(groups))
        out[i] = np.median(np.concatenate([groups[c][rng.integers(0, groups[c].size, groups[c].size)]
                                           for c in chosen]))
    return out


def grouped_ci(values, groups=None, level: float = 0.95, resamples: int = BOOTSTRAP,
               seed: int = 0) -> tuple[float, float]:
    """95% interval of the median of ``values``: over the processes (:func:`process_ci`) when
    ``groups`` (a process index per value) names two or more, the plain bootstrap otherwise."""
    parts = _as_groups(values, groups)
    if len(parts) == 1:
        return bootstrap_ci(parts[0], level=level, resamples=resamples, seed=seed)
    lo, hi = process_ci([float(np.median(p)) for p in parts], level)
    pooled = float(np.median(np.concatenate(parts)))
    return min(lo, pooled), max(hi, pooled)


def process_ci(values, level: float = 0.95) -> tuple[float, float]:
    """Student's t interval of the centre of per-process figures (medians, percentiles): on their
    logarithms when all are positive (exp of mean log +- t times its standard error), else on the
    values. Two or more values; the process is the unit of replication."""
    from scipy.stats import t as student_t

    v = np.asarray(values, np.float64)
    if v.size < 2:
        raise ValueError("a process-level interval needs at least 2 processes")
    logs = bool(np.all(v > 0))
    x = np.log(v) if logs else v
    se = float(x.std(ddof=1) / np.sqrt(x.size))
    q = float(student_t.ppf(0.5 + level / 2, x.size - 1))
    lo, hi = float(x.mean() - q * se), float(x.mean() + q * se)
    return (float(np.exp(lo)), float(np.exp(hi))) if logs else (lo, hi)


def summarize(values, min_samples: int = MIN_SAMPLES, groups=None) -> Summary:
    """Median, mean, spread, percentiles, CI of the median, and the warnings the values deserve.

    ``groups`` (optional, one process index per value) makes the interval hierarchical and adds a
    warning when the processes disagree with one another."""
    v = np.asarray(values, dtype=np.float64)
    if v.size == 0:
        raise ValueError("no samples to summarise")
    mean = float(v.mean())
    std = float(v.std(ddof=1)) if v.size > 1 else 0.0
    q25, q75 = np.quantile(v, [0.25, 0.75])
    lo, hi = grouped_ci(v, groups)
    warnings = []
    if mean > 0 and std >= NOISY_CV * mean:
        warnings.append(f"noisy: std is {100 * std / mean:.0f}% of the mean")
    if mean > 0 and (abs(v.min() - mean) >= OUTLIER_DEV * mean or abs(v.max() - mean) >= OUTLIER_DEV * mean):
        warnings.append(f"outlier: min {v.min() / mean:.2f}x / max {v.max() / mean:.2f}x the mean")
    if v.size < min_samples:
        warnings.append(f"too few samples: {v.size} < {min_samples}")
    parts = _as_groups(v, groups)
    meds = [float(np.median(p)) for p in parts] if groups is not None else []
    if len(parts) > 1:
        spread = (max(meds) - min(meds)) / float(np.median(v))
        if spread > PROCESS_SPREAD:
            warnings.append(f"processes disagree: their medians span {100 * spread:.0f}% of the median")
    return Summary(
        n=int(v.size), median=float(np.median(v)), mean=mean, std=std, min=float(v.min()), max=float(v.max()),
        p5=float(np.quantile(v, 0.05)), p95=float(np.quantile(v, 0.95)), iqr=float(q75 - q25),
        ci_low=lo, ci_high=hi, warnings=warnings, processes=meds,
    )


def ratio_ci(a, b, level: float = 0.95, resamples: int = BOOTSTRAP, seed: int = 0,
             groups_a=None, groups_b=None) -> tuple[float, float, float]:
    """median(b) / median(a) with a bootstrap interval (each side resampled independently;
    hierarchically over processes where ``groups_*`` say which process each value came from)."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    rng = np.random.default_rng(seed)
    ma = hierarchical_medians(_as_groups(a, groups_a), resamples, rng)
    mb = hierarchical_medians(_as_groups(b, groups_b), resamples, rng)
    r = mb / ma
    alpha = (1 - level) / 2
    return float(np.median(b) / np.median(a)), float(np.quantile(r, alpha)), float(np.quantile(r, 1 - alpha))


def process_ratio_ci(medians_a, medians_b, level: float = 0.95) -> tuple[float, float, float]:
    """B/A from per-process medians with the interval that matches :func:`process_p_value`:
    exp of the difference of mean logs, +- Welch's t quantile times its standard error. (A
    bootstrap over 3 processes has only 10 distinct resamples and gives intervals far too narrow.)"""
    from scipy.stats import t as student_t

    la, lb = np.log(np.asarray(medians_a, np.float64)), np.log(np.asarray(medians_b, np.float64))
    if la.size < 2 or lb.size < 2:
        raise ValueError("a process-level interval needs at least 2 processes on each side")
    d = float(lb.mean() - la.mean())
    va, vb = la.var(ddof=1) / la.size, lb.var(ddof=1) / lb.size
    se = float(np.sqrt(va + vb))
    if se == 0:
        return float(np.exp(d)), float(np.exp(d)), float(np.exp(d))
    df = (va + vb) ** 2 / ((va**2 / (la.size - 1) if va else 0.0) + (vb**2 / (lb.size - 1) if vb else 0.0))
    q = float(student_t.ppf(0.5 + level / 2, df))
    return float(np.exp(d)), float(np.exp(d - q * se)), float(np.exp(d + q * se))


def process_p_value(medians_a, medians_b) -> float:
    """Two-sided p-value that two sets of per-process medians differ: Welch's t-test on their
    logarithms (timings are positive and change multiplicatively). The process is the unit of
    replication, so with 3 processes a side only a change well beyond the process-to-process
    spread reaches p < 0.01; that is the honest power of the data, not a defect of the test."""
    from scipy.stats import ttest_ind

    la, lb = np.log(np.asarray(medians_a, np.float64)), np.log(np.asarray(medians_b, np.float64))
    if la.size < 2 or lb.size < 2:
        raise ValueError("a process-level test needs at least 2 processes on each side")
    if np.ptp(np.concatenate([la, lb])) == 0:
        return 1.0
    if np.ptp(la) == 0 and np.ptp(lb) == 0:  # no spread on either side but different values
        return 0.0
    return float(ttest_ind(la, lb, equal_var=False).pvalue)
