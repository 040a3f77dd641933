"""A run's cells as flat rows: the CSV of ``dlbench export`` and of a report's cells.csv (one definition)."""

from __future__ import annotations

import csv
from typing import IO

from dlbench.report.results import RunResults

EXPORT_COLUMNS = ("key", "framework", "variant", "model", "scenario", "batch", "threads", "device", "data", "precision",
                  "status",
                  "reason",
                  "verified", "median_ms", "ci_low_ms", "ci_high_ms", "mean_ms", "std_ms", "min_ms", "p5_ms", "p95_ms",
                  "iqr_ms", "n", "samples_per_s", "gflops", "pct_peak", "peak", "first_call_ms", "peak_rss_bytes",
                  "rss_growth_bytes", "energy_unit", "j_per_unit", "watts", "warnings")


def export_rows(res: RunResults) -> list[dict]:
    rows = []
    for c in res.cells:
        d = c.to_dict()
        t = d.pop("time_ms") or {}
        row = {k: d.get(k) for k in EXPORT_COLUMNS if k in d}
        for stat in ("median", "ci_low", "ci_high", "mean", "std", "min", "p5", "p95", "iqr"):
            row[f"{stat}_ms"] = t.get(stat)
        row["n"] = t.get("n")
        # energy per sample (generation: per token) and watts; blank where no counter was read
        row.update(energy_unit=c.energy.get("unit"), j_per_unit=c.energy.get("j_per_unit"), watts=c.energy.get("watts"))
        row["warnings"] = "; ".join([*c.cell.warnings, *c.rate_warnings])
        rows.append(row)
    return rows


def write_csv(res: RunResults, out: IO[str]) -> None:
    writer = csv.DictWriter(out, fieldnames=EXPORT_COLUMNS)
    writer.writeheader()
    writer.writerows(export_rows(res))
