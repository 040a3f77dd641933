"""The report's "Latency and load" section: tail-latency percentiles of ``latency`` cells, LoadGen's
verdicts and figures of ``loadgen-*`` cells, a latency CDF per model and the server's achieved QPS
against its 99th percentile with the bound.

Plain data (:class:`~dlbench.core.document.Table`) and plots, like the rest of the report: the HTML
and Markdown writers render them. Reached through the latency and LoadGen scenarios' report hooks; it
reads only the cells' stored metrics, so it imports no scenario.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dlbench.core.document import DASH, Column, Section, Table, Value, fmt_num
from dlbench.core.figures import Plot, Skipped
from dlbench.core.figures import by as _by
from dlbench.core.figures import figure as _figure
from dlbench.core.figures import finish as _finish
from dlbench.core.figures import safe as _safe
from dlbench.core.figures import svg as _svg
from dlbench.storage.cell_result import CellResult, RunResults

#: what the section says before its tables
INTRO = ("Latency: single forward calls timed one by one (no loop averaging), pooled over the fresh processes; "
         "95% interval in brackets, over the processes (processes, then calls); a percentile with fewer than 10 "
         "samples above it is not given. LoadGen: MLPerf LoadGen's own verdict and figures for the cell; its rules "
         "are met only by a VALID result under LoadGen's own minimum duration and query count (“short”: settings "
         "below them, --loadgen-min-duration/--loadgen-min-queries). An offline run is one query holding every "
         "sample, so it has no per-sample latency to show: its percentiles are the whole run's length. The harness "
         "floor is the same LoadGen settings against a system under test that completes every query at once, on "
         "the same cores: latency below it is LoadGen's and the serving thread's, not the framework's. It is "
         "measured once per run and setting (scenario, threads, batch, LoadGen's settings) by the first such cell, "
         "and shown beside each cell of that setting.")


def tail(metrics: dict[str, Any]) -> list[dict[str, Any]]:
    """A latency cell's pooled percentiles, as stored."""
    return metrics.get("latency", {}).get("pooled", [])


def _latency_cells(res: RunResults) -> list[CellResult]:
    """Cells with pooled tail percentiles (the latency scenario's)."""
    return [c for c in res.cells if c.ok and tail(c.cell.metrics)]


def _loadgen_cells(res: RunResults) -> list[CellResult]:
    """Cells with LoadGen's figures (the loadgen-* scenarios')."""
    return [c for c in res.cells if c.ok and c.cell.metrics.get("loadgen")]


def _mode(c: CellResult) -> str | None:
    """The LoadGen scenario a cell ran (``Server``, ``Offline``, ``SingleStream``: LoadGen's summary names it)."""
    f = c.cell.metrics["loadgen"]
    return (f.get("settings") or {}).get("scenario", f.get("scenario"))


def _server(c: CellResult) -> bool:
    """A LoadGen run of its Server scenario."""
    return _mode(c) == "Server"


def section(res: RunResults) -> Section:
    """The section the latency and LoadGen scenarios share (each asks for it; the report shows it once)."""
    return Section("Latency and load", INTRO, latency_tables(res))


def plots(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    cdf, skipped = latency_cdf(res)
    qps, more = server_qps_p99(res)
    return cdf + qps, skipped + more


def latency_tables(res: RunResults) -> list[Table]:
    out = []
    cells = _latency_cells(res)
    for model, mcells in _by(cells, lambda c: (c.cell.model,)).items():
        labels = [f"p{p['q']:g}" for p in tail(mcells[0].cell.metrics)]
        cols = [Column("framework", "framework", numeric=False), Column("variant", "variant", numeric=False),
                Column("threads", "threads"), Column("batch", "batch"), Column("calls", "calls")]
        cols += [Column(label, f"{label} ms", better="low") for label in labels]
        rows, groups = [], []
        for c in mcells:
            row = [Value(c.cell.framework), Value(c.cell.variant), Value(str(c.cell.threads)), Value(str(c.cell.batch)),
                   Value(f"{sum(c.cell.metrics['latency']['calls']):,}")]
            for p in tail(c.cell.metrics):
                if p["value"] is None:
                    row.append(Value(DASH, detail=p["refused"]))
                else:
                    row.append(Value(fmt_num(p["value"]), p["value"],
                                     detail=f"[{fmt_num(p['ci_low'])}, {fmt_num(p['ci_high'])}]"))
            rows.append(row)
            groups.append((c.cell.batch, c.cell.threads, c.cell.device))
        out.append(_bold(Table(f"{model[0]}: latency percentiles", cols, rows, groups)))
    lg = _loadgen_cells(res)
    if lg:
        cols = [Column(k, label, numeric=k in ("threads", "batch", "rate", "p50", "p90", "p99", "qps", "bound"),
                       better={"rate": "high"}.get(k)) for k, label in (
            ("model", "model"), ("scenario", "scenario"), ("framework", "framework"), ("threads", "threads"),
            ("batch", "batch"), ("result", "LoadGen result"), ("rate", "samples/s"), ("p50", "p50 ms"),
            ("p90", "p90 ms"), ("p99", "p99 ms"), ("qps", "target QPS"), ("bound", "p99 bound ms"),
            ("rules", "LoadGen's rules"))]
        rows = []
        for c in sorted(lg, key=lambda c: (c.cell.model, c.cell.scenario, c.cell.threads, c.cell.framework)):
            f = c.cell.metrics["loadgen"]
            pct, settings = f.get("percentiles_ms", {}), f.get("settings", {})
            server, offline = _mode(c) == "Server", _mode(c) == "Offline"
            floor = (f.get("floor") or {}).get("percentiles_ms", {})
            rows.append([Value(c.cell.model), Value(c.cell.scenario.removeprefix("loadgen-")),
                         Value(f"{c.cell.framework}/{c.cell.variant}"), Value(str(c.cell.threads)),
                         Value(str(c.cell.batch)), Value(str(f.get("result", DASH))),
                         Value(fmt_num(c.samples_per_s), c.samples_per_s)]
                        + [Value(DASH, detail=OFFLINE) if offline else
                           Value(fmt_num(pct.get(q)), detail=f"floor {fmt_num(floor[q])}" if q in floor else "")
                           for q in ("50", "90", "99")]
                        + [Value(fmt_num(settings.get("server_target_qps")) if server else DASH),
                           Value(fmt_num(settings.get("server_target_latency_ns", 0) / 1e6) if server else DASH),
                           Value(rules_text(f))])
        out.append(Table("MLPerf LoadGen", cols, rows))
    return out


#: why an offline cell shows no latency percentiles
OFFLINE = "offline: one query of every sample; its latency is the run's length, not a sample's"


def rules_text(figures: dict) -> str:
    """Whether a LoadGen cell meets LoadGen's rules: a VALID result under LoadGen's own settings."""
    if not figures.get("meets_rules"):
        return "short (settings below LoadGen's)"
    if figures.get("valid") is False:
        return "not met (INVALID)"
    return "met"


def _bold(t: Table) -> Table:
    """Bold the lowest value of each percentile column among rows of the same batch, threads and device."""
    for j, col in enumerate(t.columns):
        if col.better != "low":
            continue
        best: dict[tuple, float] = {}
        for row, group in zip(t.rows, t.groups, strict=True):
            if row[j].number is not None:
                best[group] = min(best.get(group, row[j].number), row[j].number)
        for row, group in zip(t.rows, t.groups, strict=True):
            row[j].best = row[j].number is not None and row[j].number == best.get(group)
    return t


def latency_cdf(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    """The distribution of single-call latencies, one line per framework, per model and thread count."""
    plots = []
    for (model, threads), cells in _by(_latency_cells(res), lambda c: (c.cell.model, c.cell.threads)).items():
        fig, (ax,) = _figure(1)
        for c in cells:
            x = np.sort(np.asarray(c.samples_ms))
            ax.plot(x, np.arange(1, x.size + 1) / x.size, label=f"{c.cell.framework}/{c.cell.variant} (b{c.cell.batch})")
        ax.set_xscale("log")
        _finish(ax, "latency of one call (ms, log scale)", "fraction of calls at or below",
                f"{model}, {threads} thread(s): latency CDF")
        plots.append(Plot(f"latency-cdf-{_safe(model)}-t{threads}", f"{model}, {threads} thread(s): latency CDF",
                          "Every timed single call of the cell's processes; the tail is the right end.", _svg(fig)))
    return plots, []


def server_qps_p99(res: RunResults) -> tuple[list[Plot], list[Skipped]]:
    """LoadGen server cells: the QPS reached against the 99th percentile latency, with the bound."""
    cells = [c for c in _loadgen_cells(res) if _server(c) and "99" in c.cell.metrics["loadgen"].get("percentiles_ms", {})]
    plots = []
    for (model,), mcells in _by(cells, lambda c: (c.cell.model,)).items():
        fig, (ax,) = _figure(1)
        for (fw,), fcells in _by(mcells, lambda c: (f"{c.cell.framework}/{c.cell.variant}",)).items():
            pts = sorted((c.samples_per_s or 0.0, c.cell.metrics["loadgen"]["percentiles_ms"]["99"]) for c in fcells)
            ax.plot([p[0] for p in pts], [p[1] for p in pts], marker="o", label=fw)
        bounds = {c.cell.metrics["loadgen"]["settings"]["server_target_latency_ns"] / 1e6 for c in mcells}
        for b in sorted(bounds):
            ax.axhline(b, color="grey", ls="--", lw=0.8, label=f"p99 bound {fmt_num(b)} ms")
        ax.set_yscale("log")
        _finish(ax, "completed samples/s (LoadGen)", "99th percentile latency (ms, log scale)",
                f"{model}: LoadGen server, QPS vs p99")
        plots.append(Plot(f"loadgen-server-{_safe(model)}", f"{model}: LoadGen server, QPS vs p99",
                          "One point per server cell (its target QPS is --qps, or half one stream's rate); points "
                          "above the dashed bound fail it. Several runs at different --qps trace the curve.",
                          _svg(fig)))
    return plots, []
