"""Results at a stated precision: the two-stage design behind ``--target-ci``, and the variance split.

The unit of replication is the process (two fresh processes of the same step differ by 5-15%, far
more than calls within one), so the precision asked for is that of a *process-level* interval: on
the log scale, each process contributes one value ``y`` (the log of its median call, or of a
percentile for latency cells), and the cell's figure is ``exp(mean(y))`` with a Student-t interval.

Optional stopping ("add processes until the interval is narrow enough") shrinks intervals below
their stated coverage: it stops when the spread happens to look small. So the design is two-stage
(Stein's, 1945, in its simplest valid form):

1. **Pilot.** ``n0`` processes (the protocol's ``repeats``) of ``c0`` calls each. From them:
   the within-process variance of one process's statistic (from the order statistics around it:
   distribution-free, :func:`within_variance`), the between-process variance (what the spread of
   the process values holds beyond that, :func:`components`), the fixed cost of a process (start,
   imports, build, warm-up) and the cost of one call.
2. **Plan** (:func:`plan`), on an *upper confidence bound* of the between-process variance
   (:data:`PLAN_LEVEL`; chi-square with the pilot's ``n0 - 1`` degrees of freedom): 3 processes give
   it 2 degrees of freedom, and a plan on the estimate itself misses its target whenever the pilot's
   processes happened to agree (half the time). The calls per process ``c`` that minimise the cost of
   that variance (``sqrt(start * within / (call * between))``, the classic two-level allocation), then
   the fewest processes ``p`` whose interval meets the target with 80% probability at that variance,
   both cut to fit what is left of the cell's time cap.
3. **Second stage.** ``p`` *fresh* processes of ``c`` calls. The reported interval comes from
   these alone (:func:`interval`). Since ``p`` and ``c`` were fixed by the pilot, which is
   independent of the second stage's processes, the second stage is a fixed-size sample and its
   t-interval has its stated coverage whatever the pilot said; the pilot's data only cost time.
   The planner's model (how variance falls with ``c``) affects how often the target is met, never
   whether the interval is valid.

SciPy is imported where it is used: the measuring processes of frameworks in their own environments
import this module (through the scenarios) without it.

``tests/test_adaptive.py`` simulates 1,000 cells with realistic process-to-process spread, each
through :func:`dlbench.scenarios.processes.run_processes` (the code a run calls), and checks the
reported 95% intervals cover the true median in at least 93% of them; another simulates cells whose
between-process share is the one measured (90-96% of a process median's variance) and checks that at
least 80% of those whose plan fitted the cap met their target (the planner's promise).
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from functools import lru_cache

import numpy as np

from dlbench.core.cell import key_kind

#: processes in the second stage at least (a t-interval from 2 has t = 12.7)
MIN_PROCESSES = 3
#: the chance the planned second stage meets the target at the planned variance (the margin on the planned width)
PLAN_POWER = 0.8
#: the confidence of the upper bound on the pilot's between-process variance that a plan is made on, chosen by
#: simulation (tests/test_adaptive.py, benchmarks/planner_simulation.py): of the simulated cells whose plan fits
#: the cap, 88-92% meet their target at 90% (over seeds), 81-85% at 80% (too close to the promise), 66-70% on
#: the median-unbiased estimate the planner used before. Cells whose plan fits are those whose pilot looked
#: quiet, so no level promises 80% whatever the cells: docs/measurement.md
PLAN_LEVEL = 0.9
#: the fewest finished cells of the run whose between-process variances make a floor under a plan
#: (:func:`run_floor`)
FLOOR_CELLS = 3
#: the most processes a plan asks for, whatever the cap allows
MAX_PROCESSES = 200
#: a floor under the between-process variance a pilot estimates (a log-scale sd of 0.2%): a pilot
#: whose three processes happen to agree must not plan millions of calls
MIN_BETWEEN = 0.002 ** 2


def percent(x: float) -> str:
    """A relative half-width as a percentage with the digits it deserves: 0.0123 -> "1.2%", 4.3 -> "430%"."""
    return f"{100 * x:.2g}%" if abs(x) < 1 else f"{100 * x:.0f}%"


def process_statistic(values, q: float = 50.0) -> float:
    """One process's value on the log scale: the log of its ``q``-th percentile call."""
    return float(np.log(np.percentile(np.asarray(values, np.float64), q)))


def within_variance(values, q: float = 50.0, level: float = 0.95) -> float:
    """Variance of the log of one process's ``q``-th percentile, from its own calls: the distribution-
    free interval of a quantile (the order statistics ``n q -+ z sqrt(n q (1 - q))``) read as +- z
    standard errors. No assumption on the shape of the calls' distribution."""
    x = np.sort(np.log(np.asarray(values, np.float64)))
    n = x.size
    if n < 2:
        return float("nan")
    p = q / 100
    z = _z(level)
    half = z * math.sqrt(n * p * (1 - p))
    lo = min(max(int(math.floor(n * p - half)), 0), n - 1)
    hi = min(max(int(math.ceil(n * p + half)), 0), n - 1)
    return float(((x[hi] - x[lo]) / (2 * z)) ** 2)


@dataclass(frozen=True)
class Components:
    """Variance of the log process statistic, split: ``between`` processes, and ``within`` one process
    *per call* (a process of ``c`` calls adds ``within / c``)."""

    between: float
    within: float
    calls: int  # the calls per process the split was estimated at

    @property
    def between_share(self) -> float:
        """The share of one process's variance (at ``calls``) that is between processes."""
        total = self.between + self.within / self.calls
        return self.between / total if total > 0 else 0.0


def components(groups: list, q: float = 50.0, upper: float | None = None) -> Components:
    """Method-of-moments split of the process values' variance: what the process values vary by,
    less what their own calls explain, is between processes (floored at 0).

    With ``upper`` (a confidence level, for planning) the process values' variance is its upper
    chi-square bound at that level (``s2 * df / chi2.ppf(1 - upper, df)``, df the processes less one:
    9.5x from 3 processes at 90%) before the calls' part is taken off: a pilot of a few processes
    underestimates the between part more often than not, and a plan on an underestimate misses its
    target."""
    groups = [np.asarray(g, np.float64) for g in groups if len(g)]
    if len(groups) < 2:
        raise ValueError("a variance split needs at least 2 processes")
    y = np.array([process_statistic(g, q) for g in groups])
    w = np.array([within_variance(g, q) for g in groups])
    sizes = np.array([g.size for g in groups])
    calls = int(np.median(sizes))
    within_per_call = float(np.nanmean(w * sizes))
    df = len(groups) - 1
    spread = float(y.var(ddof=1)) * (df / _chi2(1 - upper, df) if upper is not None else 1.0)
    return Components(max(spread - within_per_call / calls, 0.0), within_per_call, calls)


@dataclass(frozen=True)
class Floor:
    """A floor under a plan's between-process variance (:func:`run_floor`): its value, the run's cells it
    is the median of, and which of them (``scope``: :data:`FLOOR_SCOPES`)."""

    between: float
    cells: int
    scope: str


#: the groups of a run's finished cells a floor is taken from, the closest kind first: a cell's floor comes from
#: the first with :data:`FLOOR_CELLS` cells (its framework on its thread count; its thread count; the whole run)
FLOOR_SCOPES = ("framework and threads", "threads", "run")


def run_floor(stored: dict[str, dict], key: str | None = None) -> Floor | None:
    """A floor under the between-process variance a cell's plan is made on: the median of those the run's
    finished cells of its kind measured on this machine (their stored ``variance`` split, from all their
    processes), or None before :data:`FLOOR_CELLS` of them. ``key``: the planned cell's (its kind:
    :func:`dlbench.core.cell.key_kind`); the floor is taken from the run's cells of its framework on its
    thread count, else of its thread count, else from all of them, the first group with FLOOR_CELLS.

    The upper bound of a 3-process pilot is still low when its three processes happen to agree, and such
    a pilot makes a small plan, the kind that fits the cap: the quick suite's two misses among its fitted
    plans (issue 45) had pilots of almost no spread on a machine whose cells' processes typically
    disagreed several times more. Process-to-process spread comes mostly from the machine (memory
    layout, frequency, neighbours), so a quiet pilot on a noisy machine is more likely luck than a quiet
    cell. The floor only raises a plan: a truly quiet cell pays more processes, never a worse interval
    (the second stage alone is reported, whatever was planned). How much the machine spreads a process
    depends on the cell's kind: a cell on all the cores shares them with everything else, and on the AMD
    EPYC machine the quick suite's 2-thread cells' processes spread 3 to 17 times more than its 1-thread
    ones' (docs/measurement.md); one floor for the whole run, set by its noisy half, put the quiet cells'
    plans over the cap."""
    betweens = {k: float(m["variance"]["between"]) for k, m in stored.items()
                if isinstance(m, dict) and isinstance(m.get("variance"), dict) and "between" in m["variance"]}
    kinds = {k: key_kind(k) for k in betweens}
    mine = key_kind(key) if key is not None else None
    alike = (lambda k: kinds[k] == mine, lambda k: mine is not None and kinds[k][1] == mine[1], lambda k: True)
    for scope, keep in zip(FLOOR_SCOPES, alike, strict=True):
        group = [b for k, b in betweens.items() if keep(k)]
        if len(group) >= FLOOR_CELLS:
            return Floor(float(np.median(group)), len(group), scope)
    return None


def variance_split(groups: list) -> dict[str, float]:
    """What a cell stores: the variance of the log of a process's median call split into the part
    between processes and the part its own calls explain (``within``, per call: a process of ``calls``
    calls has ``within / calls``), from the same order statistics as the plan (robust to the odd
    slow call), and the between shares: of one call's variance, and of one process's median's."""
    groups = [g for g in groups if len(g) > 1]
    if len(groups) < 2:
        return {}
    comp = components(groups)
    per_call = comp.between + comp.within
    return {"between": comp.between, "within": comp.within, "calls": comp.calls, "processes": len(groups),
            "between_share": comp.between / per_call if per_call > 0 else 0.0,
            "process_between_share": comp.between_share}


@dataclass(frozen=True)
class Plan:
    """The second stage: ``processes`` fresh processes of ``calls`` calls each."""

    processes: int
    calls: int
    expected_half_width: float  # relative, at PLAN_POWER
    capped: bool  # the cap cut the plan short of the target

    def to_dict(self) -> dict:
        return asdict(self)


@lru_cache(maxsize=16)
def _z(level: float) -> float:
    from scipy.stats import norm

    return float(norm.ppf(0.5 + level / 2))


@lru_cache(maxsize=4096)
def _t(p: int, level: float = 0.95) -> float:
    from scipy.stats import t as student_t

    return float(student_t.ppf(0.5 + level / 2, max(p - 1, 1)))


@lru_cache(maxsize=4096)
def _chi2(q: float, df: int) -> float:
    from scipy.stats import chi2

    return float(chi2.ppf(q, df))


def expected_half_width(comp: Components, processes: int, calls: int, level: float = 0.95,
                        power: float = PLAN_POWER) -> float:
    """The relative half-width ``p`` processes of ``c`` calls reach with probability ``power`` (the
    sample sd of ``p`` values is below ``sigma * sqrt(chi2_power(p - 1) / (p - 1))`` that often)."""
    sd = math.sqrt(max(comp.between, MIN_BETWEEN) + comp.within / calls)
    df = max(processes - 1, 1)
    margin = math.sqrt(_chi2(power, df) / df)
    return math.expm1(_t(processes, level) * sd * margin / math.sqrt(processes))


def plan(comp: Components, target: float, start_s: float, call_s: float, budget_s: float,
         min_calls: int = 1, max_calls: int = 100_000, level: float = 0.95) -> Plan:
    """The cheapest second stage expected to reach a relative half-width ``target`` (0.02: +-2%), cut to
    ``budget_s`` seconds (each process costs ``start_s + calls * call_s``)."""
    if not 0 < target < 1:
        raise ValueError(f"target half-width must be in (0, 1), got {target}")
    between = max(comp.between, MIN_BETWEEN)
    optimum = math.sqrt(max(start_s, 1e-6) * comp.within / (max(call_s, 1e-9) * between))
    calls = int(min(max(math.ceil(optimum), min_calls), max_calls))
    # per process at most a third of the budget, so a cap still leaves MIN_PROCESSES
    affordable = int((budget_s / MIN_PROCESSES - start_s) / max(call_s, 1e-9))
    calls = max(min(calls, affordable), min_calls)
    p = MIN_PROCESSES
    while p < MAX_PROCESSES and expected_half_width(comp, p, calls, level) > target:
        p += 1
    fits = max(int(budget_s // (start_s + calls * call_s)), MIN_PROCESSES)
    capped = p > fits or expected_half_width(comp, p, calls, level) > target
    p = min(p, fits)
    return Plan(p, calls, expected_half_width(comp, p, calls, level), capped)


@dataclass(frozen=True)
class Interval:
    """The cell's figure ``exp(mean log)`` of its process values, its 95% interval, and the relative
    half-width reached (half the interval's width over the figure)."""

    center: float
    low: float
    high: float
    processes: int

    @property
    def half_width(self) -> float:
        return (self.high - self.low) / 2 / self.center if self.center else float("inf")

    def to_dict(self) -> dict:
        return {**asdict(self), "half_width": self.half_width}


def interval(values_by_process: list, q: float = 50.0, level: float = 0.95) -> Interval:
    """Student-t interval of the mean log process statistic, back on the time scale."""
    y = np.array([process_statistic(v, q) for v in values_by_process if len(v)])
    if y.size < 2:
        raise ValueError("a process-level interval needs at least 2 processes")
    return log_interval(y, level)


def log_interval(y, level: float = 0.95) -> Interval:
    """The interval from the process values themselves (log scale)."""
    y = np.asarray(y, np.float64)
    m, se = float(y.mean()), float(y.std(ddof=1) / math.sqrt(y.size))
    h = _t(y.size, level) * se
    return Interval(math.exp(m), math.exp(m - h), math.exp(m + h), int(y.size))


#: the variance split assumed before a pilot has measured one (``--dry-run``'s estimate): process
#: medians 5% apart (sd), calls 10% around them
PRIOR = Components(between=0.05**2, within=math.pi / 2 * 0.10**2, calls=1)


#: quantiles of a pilot's variance (its chi-square law) that stand for the pilots a cell may draw (prior_seconds)
PILOT_QUANTILES = tuple((i + 0.5) / 8 for i in range(8))


def prior_seconds(target: float, pilot: int, pilot_process_s: float, start_s: float, call_s: float, cap_s: float,
                  min_calls: int = 1) -> float:
    """A guess at a cell's wall time under the two-stage design before anything is measured: the pilot,
    then the plan for :data:`PRIOR`'s split within the cap, averaged over the pilots a cell may draw (at
    :data:`PILOT_QUANTILES` of their variance), each planned on its upper bound as :func:`components`
    makes it: a plan's cost is far from linear in the variance, and 3 processes' variance is broad."""
    first = pilot * pilot_process_s
    df = max(pilot - 1, 1)
    bound = df / _chi2(1 - PLAN_LEVEL, df)
    second = []
    for u in PILOT_QUANTILES:
        comp = Components(PRIOR.between * _chi2(u, df) / df * bound, PRIOR.within, PRIOR.calls)
        drawn = plan(comp, target, start_s, call_s, max(cap_s - first, 0.0), min_calls=min_calls)
        second.append(drawn.processes * (start_s + drawn.calls * call_s))
    return min(first + sum(second) / len(second), max(cap_s, first))
