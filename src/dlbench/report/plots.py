"""The report's plots, drawn with matplotlib as SVG text.

* time vs batch size per framework (Bahrampour et al., Figures 1-2),
* time vs CPU threads (Shi et al., Figures 2-8),
* peak memory vs batch size (Liu et al., Figure 2),
* time of every iteration in the order it ran, warm-up included (Liu et al., Figure 1).

A plot is drawn only when the run has the axis it needs (two batch sizes, two thread counts...);
otherwise a :class:`Skipped` says why. matplotlib is imported here only, lazily, and only the
``Figure`` object API is used (no pyplot, no GUI backend, no global state); SVG output is made
reproducible (fixed hash salt, no date).
"""

from __future__ import annotations

from dlbench.core.figures import Plot, Skipped, by, figure, finish, safe, svg
from dlbench.report.results import CellResult, RunResults
from dlbench.report.summary import summary_rows
from dlbench.report.tables import row_memory_bytes
from dlbench.scenarios import registry

MAX_LINES = 10
# the names the report's modules have used
_by, _figure, _safe, _svg = by, figure, safe, svg
__all__ = ["Plot", "Skipped", "make_plots"]


def _label(c: CellResult, *axes: str) -> str:
    parts = [f"{c.cell.framework}/{c.cell.variant}"]
    for a in axes:
        parts.append({"batch": f"b={c.cell.batch}", "threads": f"t={c.cell.threads}", "device": c.cell.device}[a])
    return " ".join(parts)


def _timed_ok(res: RunResults) -> list[CellResult]:
    return [c for c in res.cells if c.ok and c.cell.scenario in registry.per_batch() and c.time_ms is not None]


def _sweep(res: RunResults, axis: str, title: str, xlabel: str, what: str) -> tuple[list[Plot], list[Skipped]]:
    """Median time (error bars: 95% CI) against ``axis`` (batch or threads); one line per other setting."""
    others = [a for a in ("batch", "threads", "device") if a != axis]
    plots, lacking = [], []
    for model, cells in _by(_timed_ok(res), lambda c: (c.cell.model,)).items():
        scenarios = [s for s in registry.per_batch() if any(c.cell.scenario == s for c in cells)]
        lines = _by(cells, lambda c: (c.cell.scenario, c.cell.framework, c.cell.variant,
                                      *(getattr(c.cell, a) for a in others)))
        if not any(len({getattr(c.cell, axis) for c in line}) >= 2 for line in lines.values()):
            values = sorted({getattr(c.cell, axis) for c in cells})
            lacking.append(f"{model[0]}: {axis} {', '.join(map(str, values))}")
            continue
        fig, axes = _figure(len(scenarios))
        shown = 0
        for ax, scenario in zip(axes, scenarios, strict=True):
            for key, line in lines.items():
                if key[0] != scenario:
                    continue
                line.sort(key=lambda c: getattr(c.cell, axis))
                xs = [getattr(c.cell, axis) for c in line]
                med = [c.time_ms.median for c in line]
                err = [[c.time_ms.median - c.time_ms.ci_low for c in line],
                       [c.time_ms.ci_high - c.time_ms.median for c in line]]
                ax.errorbar(xs, med, yerr=err, marker="o", capsize=3, label=_label(line[0], *others))
                shown += 1
            ax.set_xscale("log", base=2)
            ax.set_xticks(sorted({getattr(c.cell, axis) for c in cells if c.cell.scenario == scenario}))
            ax.get_xaxis().set_major_formatter("{x:g}")
            finish(ax, xlabel, f"{scenario} time per batch (ms)", f"{model[0]}: {scenario}")
        plots.append(Plot(f"{what}-{_safe(model[0])}", f"{model[0]}: {title}",
                          f"Median time per batch of each framework/variant; error bars are the 95% bootstrap "
                          f"confidence interval of the median. {shown} line(s).", _svg(fig)))
    skipped = []
    if lacking:
        skipped.append(Skipped(title, f"needs at least two values of {axis} for one framework/variant and model; "
                                      f"this run has " + "; ".join(lacking)))
    return plots, skipped


def time_vs_batch(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    return _sweep(res, "batch", "time vs batch size", "batch size (samples, log scale)", "time-vs-batch")


def time_vs_threads(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    return _sweep(res, "threads", "time vs CPU threads", "CPU threads (log scale)", "time-vs-threads")


def memory_vs_batch(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    """Peak memory of each row (max over its scenarios) against batch size."""
    plots, lacking = [], []
    for model, rows in summary_rows(res).items():
        points = [(r, m) for r in rows if (m := row_memory_bytes(r))]
        lines: dict[tuple, list] = {}
        for r, m in points:
            lines.setdefault((r.framework, r.variant, r.threads, r.device), []).append((r.batch, m / 2**20))
        if not any(len({b for b, _ in pts}) >= 2 for pts in lines.values()):
            lacking.append(f"{model}: batch {', '.join(map(str, sorted({r.batch for r, _ in points})) ) or 'no memory'}")
            continue
        fig, (ax,) = _figure(1)
        for (fw, variant, threads, device), pts in lines.items():
            pts.sort()
            ax.plot([b for b, _ in pts], [m for _, m in pts], marker="o", label=f"{fw}/{variant} t={threads} {device}")
        ax.set_xscale("log", base=2)
        ax.set_xticks(sorted({b for pts in lines.values() for b, _ in pts}))
        ax.get_xaxis().set_major_formatter("{x:g}")
        finish(ax, "batch size (samples, log scale)", "peak memory (MiB)", f"{model}: peak memory")
        plots.append(Plot(f"memory-vs-batch-{_safe(model)}", f"{model}: peak memory vs batch size",
                          "Peak resident memory of the measuring process (CPU) or the allocator's peak (GPU), the "
                          "largest over the row's scenarios. One process per value, so no confidence interval.",
                          _svg(fig)))
    skipped = []
    if lacking:
        skipped.append(Skipped("peak memory vs batch size",
                               "needs memory measured at two batch sizes or more; this run has " + "; ".join(lacking)))
    return plots, skipped


def warmup_series(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    """Every iteration's time in the order it ran, one line per framework/variant (its largest batch and
    thread count); warm-up iterations as hollow markers, process boundaries as dotted lines."""
    plots = []
    cells = [c for c in _timed_ok(res) if c.series_ms]
    for model, mcells in _by(cells, lambda c: (c.cell.model,)).items():
        scenarios = [s for s in registry.per_batch() if any(c.cell.scenario == s for c in mcells)]
        fig, axes = _figure(len(scenarios))
        for ax, scenario in zip(axes, scenarios, strict=True):
            per_fw = _by((c for c in mcells if c.cell.scenario == scenario),
                         lambda c: (c.cell.framework, c.cell.variant, c.cell.device))
            for line in list(per_fw.values())[:MAX_LINES]:
                c = max(line, key=lambda c: (c.cell.batch, c.cell.threads))
                xs = list(range(len(c.series_ms)))
                ys = [ms for _, _, ms in c.series_ms]
                (drawn,) = ax.plot(xs, ys, lw=1, label=_label(c, "batch", "threads"))
                warm = [(x, y) for x, (_, phase, y) in zip(xs, c.series_ms, strict=True) if phase == "warmup"]
                ax.plot([x for x, _ in warm], [y for _, y in warm], "o", mfc="none", color=drawn.get_color())
                for x in range(1, len(xs)):
                    if c.series_ms[x][0] != c.series_ms[x - 1][0]:
                        ax.axvline(x - 0.5, color=drawn.get_color(), ls=":", lw=0.8)
            ax.set_yscale("log")
            finish(ax, "iteration, in the order run (dotted: next process)",
                   f"{scenario} time per iteration (ms, log scale)", f"{model[0]}: {scenario}")
        plots.append(Plot(f"iterations-{_safe(model[0])}", f"{model[0]}: time of each iteration, warm-up included",
                          "Hollow markers are warm-up iterations (timed, stored, left out of the statistics); the first "
                          "includes compilation and lazy initialisation. A sample that times a loop of k short "
                          "iterations shows the loop's time / k.", _svg(fig)))
    skipped = [] if plots else [Skipped("time of each iteration", "no cell of this run has timed iterations")]
    return plots, skipped


PLOTTERS = (time_vs_batch, time_vs_threads, memory_vs_batch, warmup_series)


def make_plots(res: RunResults, extra: tuple = ()) -> tuple[list[Plot], list[Skipped]]:
    """Every plot the run has the data for (``extra``: plotters of report sections kept in their own
    modules); without matplotlib, none, and the reason."""
    import importlib.util

    if importlib.util.find_spec("matplotlib") is None:
        return [], [Skipped("all plots", "matplotlib is not installed (pip install 'dlbench[report]')")]
    plots: list[Plot] = []
    skipped: list[Skipped] = []
    for plotter in (*PLOTTERS, *extra):
        p, s = plotter(res)
        plots += p
        skipped += s
    return plots, skipped
