"""A run's cells as flat rows: the CSV of ``dlbench export`` and of a report's cells.csv (one definition).

Beside the per-call time, each cell's own figures (a scenario's :attr:`CellResult.figures`, ``generate``'s
TTFT, TPOT and tokens/s) get columns of their own, named after the figure; a cell without one leaves
them empty. Where a cell's processes disagree beyond what its interval resolves
(:func:`dlbench.measure.stats.processes_disagree`) the row says so beside the interval and lists each
process's median, as every other view does."""

from __future__ import annotations

import csv
from typing import IO

from dlbench.measure.stats import Summary
from dlbench.report.results import RunResults

EXPORT_COLUMNS = ("key", "framework", "variant", "model", "scenario", "batch", "threads", "device", "data", "precision",
                  "status",
                  "reason",
                  "verified", "median_ms", "ci_low_ms", "ci_high_ms", "mean_ms", "std_ms", "min_ms", "p5_ms", "p95_ms",
                  "iqr_ms", "n", "process_medians_ms", "processes_disagree", "samples_per_s", "gflops", "pct_peak",
                  "peak", "first_call_ms", "peak_rss_bytes", "rss_growth_bytes", "energy_unit", "j_per_unit", "watts",
                  "warnings")
#: the columns of each of a cell's own figures, after its name (``ttft_ms_median``)
FIGURE_STATS = ("median", "ci_low", "ci_high", "n", "process_medians", "processes_disagree")


def _processes(s: Summary | None) -> str | None:
    """Each process's median, ``;``-separated (None: no figure, or its values were not grouped)."""
    return ";".join(f"{v:.6g}" for v in s.processes) if s is not None and s.processes else None


def figure_columns(res: RunResults) -> list[str]:
    """The columns of the figures the run's cells have, in the order the cells first name them."""
    names = dict.fromkeys(name for c in res.cells for name in c.figures)
    return [f"{name}_{stat}" for name in names for stat in FIGURE_STATS]


def export_rows(res: RunResults) -> list[dict]:
    rows = []
    for c in res.cells:
        d = c.to_dict()
        t = d.pop("time_ms") or {}
        row = {k: d.get(k) for k in EXPORT_COLUMNS if k in d}
        for stat in ("median", "ci_low", "ci_high", "mean", "std", "min", "p5", "p95", "iqr"):
            row[f"{stat}_ms"] = t.get(stat)
        row["n"] = t.get("n")
        row["process_medians_ms"] = _processes(c.time_ms)
        row["processes_disagree"] = t.get("processes_disagree")
        for name, f in c.figures.items():
            row.update({f"{name}_median": f.median, f"{name}_ci_low": f.ci_low, f"{name}_ci_high": f.ci_high,
                        f"{name}_n": f.n, f"{name}_process_medians": _processes(f),
                        f"{name}_processes_disagree": f.disagree})
        # energy per sample (generation: per token) and watts; blank where no counter was read
        row.update(energy_unit=c.energy.get("unit"), j_per_unit=c.energy.get("j_per_unit"), watts=c.energy.get("watts"))
        row["warnings"] = "; ".join([*c.cell.warnings, *c.rate_warnings])
        rows.append(row)
    return rows


def write_csv(res: RunResults, out: IO[str]) -> None:
    writer = csv.DictWriter(out, fieldnames=[*EXPORT_COLUMNS, *figure_columns(res)])
    writer.writeheader()
    writer.writerows(export_rows(res))
