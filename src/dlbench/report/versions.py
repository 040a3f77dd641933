"""One figure across framework releases and across stored runs: the report's "Versions" section and
``dlbench history``.

A *series* is one figure (model, scenario, batch, threads, device, variant) of one framework (its base
name: ``jax``, whatever version) followed over points: one timed cell each, from one run, at the exact
version that run recorded (``jax 0.4.38``). Points go in release order, then by date. Between
consecutive points the change is tested exactly as ``dlbench compare`` tests two cells
(:func:`dlbench.report.compare.compare_cells`: the process-level test, p < 0.01 and more than 5%), and
marked only when significant, with its size; anything else reads "same". Only cells that passed
the gate and measured count (a version that failed the gate has no time to show).

Pure over analysed results, except :func:`history`, which reads the store (only the matching cells).
"""

from __future__ import annotations

import importlib.util
from collections import Counter
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime

from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.envs import versions
from dlbench.envs.companions import release_key
from dlbench.measure.stats import interval_text
from dlbench.report.compare import CellChange, compare_cells
from dlbench.report.plots import Plot, Skipped, _figure, _safe, _svg
from dlbench.report.results import CellResult, RunResults, analyse_or_set_aside
from dlbench.report.tables import Column, Section, Table, Value, fmt_num
from dlbench.scenarios import registry
from dlbench.storage.store import Store

#: what the section says before its tables
INTRO = ("Each table follows one figure across the versions of a framework measured in this run, oldest release "
         "first: the median time per batch with its 95% interval, and the change from the version before it, "
         "shown only when significant by the test `dlbench compare` uses (process-level, p < 0.01 and more "
         "than 5%). Every version passed the equivalence gate before its time counts.")


@dataclass
class Point:
    run_id: str
    started_at: float  # the run's start, seconds since the epoch
    host: str
    framework: str  # as named in the run (jax==0.4.38, or jax)
    version: str | None  # as the run recorded it
    cell: CellResult
    change: CellChange | None = None  # against the point before (None: the first point)

    @property
    def label(self) -> str:
        return versions.label(self.framework, self.version)

    @property
    def date(self) -> str:
        return datetime.fromtimestamp(self.started_at, UTC).strftime("%Y-%m-%d %H:%M")

    @property
    def change_text(self) -> str:
        m = self.change
        if m is None:
            return ""
        return f"{m.verdict} {m.change_pct:+.1f}% (p={m.p_value:.2g})" if m.significant else "same"


@dataclass
class Series:
    base: str
    model: str
    scenario: str
    batch: int
    threads: int
    device: str
    variant: str
    precision: str = DEFAULT_PRECISION
    points: list[Point] = field(default_factory=list)

    @property
    def title(self) -> str:
        at = f", {self.precision}" if self.precision != DEFAULT_PRECISION else ""
        return (f"{self.base}/{self.variant} {self.model} {self.scenario}, batch {self.batch}, "
                f"{self.threads} thread(s), {self.device}{at}")

    @property
    def flagged(self) -> list[Point]:
        """Points significantly slower than the point before them."""
        return [p for p in self.points if p.change is not None and p.change.verdict == "slower"]


def _order(p: Point) -> tuple:
    try:
        key = (0, release_key(p.version or ""))
    except ValueError:  # no version recorded: after every release, by name
        key = (1, ())
    return (*key, p.started_at, p.framework)


def build_series(points: Iterable[Point]) -> list[Series]:
    """Points grouped by figure and base framework, ordered (release, date), changes marked."""
    out: dict[tuple, Series] = {}
    for p in points:
        c = p.cell.cell
        k = (versions.base_of(p.framework), c.model, c.scenario, c.batch, c.threads, c.device, c.variant, c.precision)
        out.setdefault(k, Series(*k)).points.append(p)
    for s in out.values():
        s.points.sort(key=_order)
        for prev, cur in zip(s.points, s.points[1:], strict=False):
            cur.change = compare_cells(prev.cell, cur.cell)
    return list(out.values())


def _timed(c: CellResult) -> bool:
    return c.ok and c.verified == "pass" and bool(c.samples_ms) and c.cell.scenario in registry.per_batch()


def run_points(res: RunResults) -> list[Point]:
    recorded = res.environment.get("frameworks") or {}
    host = res.environment.get("hostname", "")
    return [Point(res.run_id, res.run["started_at"], host, c.cell.framework, recorded.get(c.cell.framework), c)
            for c in res.cells if _timed(c)]


def run_series(res: RunResults) -> list[Series]:
    """The run's series that hold several versions of a framework (the report's section)."""
    return [s for s in build_series(run_points(res)) if len({p.framework for p in s.points}) > 1]


def history(store: Store, base: str, model: str, scenario: str, batch: int | None = None,
            threads: int | None = None, variant: str | None = None, precision: str = DEFAULT_PRECISION) -> list[Series]:
    """Every stored run's timed cells of the figure, for every version of ``base``, at ``precision``."""
    points = []
    for run in store.list_runs():
        run_id = run["id"]
        cells = [c for c in store.cells(run_id) if versions.base_of(c.framework) == base and c.model == model
                 and c.scenario == scenario and (batch is None or c.batch == batch)
                 and (threads is None or c.threads == threads) and (variant is None or c.variant == variant)
                 and c.precision == precision]
        if not cells:
            continue
        env, verdicts, peaks = store.environment(run_id), store.verifications(run_id), store.peaks(run_id)
        for cell in cells:
            verdict = verdicts.get((cell.framework, cell.variant, cell.model, cell.device, cell.precision),
                                   {}).get("verdict", "unknown")
            res = analyse_or_set_aside(store, cell, verdict, peaks.get(cell.threads))
            if res is not None and _timed(res):
                points.append(Point(run_id, run["started_at"], env.get("hostname", ""), cell.framework,
                                    (env.get("frameworks") or {}).get(cell.framework), res))
    return build_series(points)


def _shown(points: list[Point]) -> dict[int, str]:
    """Each point's label, told apart where one run measured the same release twice: a pinned release
    in its own environment beside the main Python's (``jax==0.10.2`` and ``jax``, both 0.10.2)."""
    seen = Counter((p.run_id, p.label) for p in points)
    return {id(p): p.label + ("" if seen[(p.run_id, p.label)] == 1 else
                              " (own environment)" if versions.SEP in p.framework else " (main Python)")
            for p in points}


def series_table(s: Series, across_runs: bool = False, changes: list | None = None) -> Table:
    """The series as rows; with ``changes`` (:func:`dlbench.report.changes.detect_series`), a column marks
    the first point after each detected step with its size and significance."""
    steps = {c.index: c.text for c in changes or []}
    cols = [Column("version", "version", numeric=False)]
    if across_runs:
        cols += [Column("date", "date (UTC)", numeric=False), Column("host", "host", numeric=False),
                 Column("run", "run", numeric=False)]
    cols += [Column("time", "ms per batch (median [95% CI])", "low"), Column("processes", "processes"),
             Column("change", "change from the row above", numeric=False)]
    if changes is not None:
        cols.append(Column("step", "step change (history)", numeric=False))
    rows = []
    shown = _shown(s.points)
    for i, p in enumerate(s.points):
        t = p.cell.time_ms
        row = [Value(shown[id(p)])]
        if across_runs:
            row += [Value(p.date), Value(p.host), Value(p.run_id)]
        row += [Value(interval_text(t, fmt_num), None if t.disagree else t.median),
                Value(str(len(p.cell.repeat_medians_ms) or 1)), Value(p.change_text)]
        if changes is not None:
            row.append(Value(steps.get(i, "")))
        rows.append(row)
    return Table(s.title, cols, rows)


def section(res: RunResults) -> Section:
    return Section("Versions", INTRO, versions_tables(res))


def series_changes(s: Series) -> list | None:
    """The detected steps (:mod:`dlbench.report.changes`) of a series long enough to hold one (4 points or
    more); None for a shorter one, or where ruptures is not installed (the report then shows no column)."""
    if len(s.points) < 4 or importlib.util.find_spec("ruptures") is None:
        return None
    from dlbench.report.changes import detect_series

    return detect_series(s)


def versions_tables(res: RunResults) -> list[Table]:
    return [series_table(s, changes=series_changes(s)) for s in run_series(res)]


def series_figure(s: Series, across_runs: bool = False, changes: list | None = None):
    """The series' medians with their intervals; a significant change is marked with its size, and each
    detected step (``changes``) by a dashed line before its first point, with the step's size."""
    fig, (ax,) = _figure(1)
    x = list(range(len(s.points)))
    med = [p.cell.time_ms.median for p in s.points]
    lo = [p.cell.time_ms.median - p.cell.time_ms.ci_low for p in s.points]
    hi = [p.cell.time_ms.ci_high - p.cell.time_ms.median for p in s.points]
    ax.errorbar(x, med, yerr=[lo, hi], marker="o", capsize=3)
    for i, p in enumerate(s.points):
        if p.change is not None and p.change.significant:
            color = "red" if p.change.verdict == "slower" else "green"
            ax.plot([i], [med[i]], marker="o", markersize=10, markerfacecolor="none", color=color)
            ax.annotate(f"{p.change.change_pct:+.0f}%", (i, med[i]), textcoords="offset points", xytext=(6, 6),
                        color=color, fontsize="small")
    for c in changes or []:
        color = "red" if c.verdict == "slower" else "green"
        ax.axvline(c.index - 0.5, color=color, linestyle="--", alpha=0.7)
        ax.annotate(f"step {c.change_pct:+.0f}%", (c.index - 0.5, min(med)), textcoords="offset points",
                    xytext=(4, 2), color=color, fontsize="small")
    crowded = len(s.points) > 6  # many runs: slanted labels that do not run into each other
    sep = " " if crowded else "\n"
    ax.set_xticks(x, [p.label + (f"{sep}{p.date[:10]}" if across_runs else "") for p in s.points], fontsize="small",
                  rotation=45 if crowded else 0, ha="right" if crowded else "center")
    if crowded:
        fig.subplots_adjust(bottom=0.32)
    ax.set_ylabel("ms per batch (median, 95% CI)")
    ax.set_title(s.title, fontsize="small")
    ax.grid(True, alpha=0.3)
    return fig


def trend_plots(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    plots = []
    for s in run_series(res):
        name = _safe(f"versions-{s.base}-{s.variant}-{s.model}-{s.scenario}-b{s.batch}-t{s.threads}-{s.device}")
        plots.append(Plot(name, f"{s.title}: across versions",
                          "Oldest release on the left; circled points changed significantly from the one before "
                          "(red slower, green faster), by the test `dlbench compare` uses; a dashed line marks a step "
                          "change over the whole series.", _svg(series_figure(s, changes=series_changes(s)))))
    return plots, []
