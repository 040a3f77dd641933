"""Where a run's wall time went (``dlbench show --cost`` and the report's "Cost and precision" section).

Per cell: its processes' breakdown as stored (:mod:`dlbench.measure.cost`), the gate's share (the
verification process of its (framework, variant, model, device, precision), divided among the
cells it serves; 0 when the verdict was reused), the relative half-width of its interval (the
second stage's with ``--target-ci``, else the stored samples'), whether it met its target, and the
between-process share of its variance. Per run: the sums, and the setup the cells do not hold
(machine peak, environments) as what is left of the run's wall time. A cell stored before these
were recorded shows its wall time as "rest".
"""

from __future__ import annotations

import json
from collections import Counter
from typing import Any

from rich.table import Table as RichTable

from dlbench.measure.adaptive import percent
from dlbench.measure.cost import PARTS
from dlbench.report.tables import DASH, Column, Section, Table, Value, fmt_num
from dlbench.results import CellResult, RunResults

#: column titles of the parts
LABELS = {"start_s": "start+imports", "build_s": "build", "gate_s": "gate", "warmup_s": "warm-up",
          "timed_s": "timed", "rest_s": "rest"}
ORDER = ("start_s", "build_s", "gate_s", "warmup_s", "timed_s", "rest_s")

INTRO = ("Where each cell's wall time went, in seconds: starting its processes and importing the framework, "
         "building (model, export, compile, closure), its share of the equivalence gate, warm-up (fixed calls and "
         "any found in the samples), timed calls, and the rest. ± is the half-width of the cell's 95% interval, "
         "relative; between: the share of the variance that lies between processes, of one call's and of one "
         "process median's (docs/measurement.md).")


def _group(c: CellResult) -> tuple[str, str, str, str, str]:
    k = c.cell
    return (k.framework, k.variant, k.model, k.device, k.precision)


def cell_costs(res: RunResults) -> list[dict[str, Any]]:
    """One row per cell: the parts, the total, the precision reached and the variance split."""
    served = Counter(_group(c) for c in res.cells)
    rows = []
    for c in res.cells:
        m = c.cell.metrics
        cost = m.get("cost") or {"rest_s": c.cell.seconds, "processes": None}
        gate = res.verifications.get(_group(c), {})
        row: dict[str, Any] = {"key": c.cell.key, "status": c.cell.status,
                               **{p: float(cost.get(p, 0.0)) for p in PARTS},
                               "gate_s": float(gate.get("seconds") or 0.0) / served[_group(c)],
                               "processes": cost.get("processes")}
        row["total_s"] = sum(row[p] for p in ORDER)
        adaptive = m.get("adaptive") or {}
        t = c.time_ms
        row["half_width"] = adaptive.get("half_width") if "half_width" in adaptive else (
            (t.ci_high - t.ci_low) / 2 / t.median if t is not None and t.median else None)
        row["target"] = adaptive.get("target")
        row["met"] = adaptive.get("met")
        split = m.get("variance") or {}
        row["between_share"] = split.get("between_share")
        row["process_between_share"] = split.get("process_between_share")
        row["reused"] = sorted((m.get("reused") or {}).keys())
        rows.append(row)
    return rows


def run_cost(res: RunResults, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The run's sums, its wall time and what no cell holds (peak, environments, the driver)."""
    total = {p: sum(r[p] for r in rows) for p in ORDER}
    started, finished = res.run.get("started_at"), res.run.get("finished_at")
    wall = (finished - started) if started and finished else None
    cells = sum(total.values())
    return {**total, "cells_s": cells, "wall_s": wall, "outside_cells_s": (wall - cells) if wall else None,
            "met": sum(1 for r in rows if r["met"]), "with_target": sum(1 for r in rows if r["met"] is not None)}


def _pct(x: float | None) -> str:
    return DASH if x is None else f"±{percent(x)}"


def _share(x: float | None) -> str:
    return DASH if x is None else f"{100 * x:.0f}%"


def _shares(r: dict[str, Any]) -> str:
    """The between-process share of one call's variance / of one process median's."""
    if r["between_share"] is None:
        return DASH
    return f"{_share(r['between_share'])} / {_share(r['process_between_share'])}"


def print_cost(res: RunResults, as_json: bool) -> int:
    from dlbench.cli_common import console

    rows = cell_costs(res)
    total = run_cost(res, rows)
    if as_json:
        print(json.dumps({"run": res.run_id, "cells": rows, "total": total}, indent=2, default=str))
        return 0
    table = RichTable(title=f"where the time went: run {res.run_id} (seconds)", title_justify="left")
    for col in ("cell", "procs", *(LABELS[p] for p in ORDER), "total", "±", "between call/proc", "reused"):
        table.add_column(col, justify="left" if col in ("cell", "reused") else "right")
    for r in rows:
        met = "" if r["met"] is None else (" ✓" if r["met"] else " ✗")
        table.add_row(r["key"], str(r["processes"] or DASH), *(fmt_num(r[p]) for p in ORDER), fmt_num(r["total_s"]),
                      _pct(r["half_width"]) + met, _shares(r), ",".join(r["reused"]))
    table.add_row("all cells", "", *(fmt_num(total[p]) for p in ORDER), fmt_num(total["cells_s"]), "", "", "")
    console.print(table)
    if total["wall_s"] is not None:
        print(f"run wall time {fmt_num(total['wall_s'])} s: cells {fmt_num(total['cells_s'])} s, outside them "
              f"(machine peak, environments, the driver) {fmt_num(total['outside_cells_s'])} s")
    if total["with_target"]:
        print(f"{total['met']} of {total['with_target']} cell(s) measured to a target met it")
    return 0


def section(res: RunResults) -> Section:
    """The report's section: one table of every cell with a figure, and the run's sums."""
    rows = [r for r in cell_costs(res) if r["status"] == "ok"]
    if not rows:
        return Section("Cost and precision", INTRO, [])
    cols = [Column("cell", "cell", numeric=False)] + [Column(p, LABELS[p]) for p in ORDER] + [
        Column("total", "total"), Column("hw", "±", numeric=False),
        Column("between", "between call / process", numeric=False)]
    body = [[Value(r["key"]), *(Value(fmt_num(r[p]), r[p]) for p in ORDER), Value(fmt_num(r["total_s"]), r["total_s"]),
             Value(_pct(r["half_width"])), Value(_shares(r))] for r in rows]
    total = run_cost(res, rows)
    body.append([Value("all cells"), *(Value(fmt_num(total[p]), total[p]) for p in ORDER),
                 Value(fmt_num(total["cells_s"]), total["cells_s"]), Value(""), Value("")])
    return Section("Cost and precision", INTRO, [Table("where the time went (seconds)", cols, body)])
