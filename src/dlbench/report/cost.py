"""Where a run's wall time went (``dlbench show --cost`` and the report's "Cost and precision" section).

Per cell: its processes' breakdown as stored (:mod:`dlbench.measure.cost`), the gate's share (the
verification process of its (framework, variant, model, device, precision), divided among the
cells it serves; 0 when the verdict was reused), the relative half-width of its interval (the
second stage's with ``--target-ci``, else the stored samples'), whether it met its target, and the
between-process share of its variance. Per run: the sums, and the setup the cells do not hold
(machine peak, environments) as what is left of the run's wall time. A part that was not recorded
(a cell stored before the breakdown, a gate's time before it was kept) is unknown (None, shown "–"),
never 0 s: the cell's total is then its stored wall time, and the run's sum of that part counts the
cells that recorded it. A negative part (a clock that stepped back, a damaged record) is flagged
(:func:`negative_parts`), in the row and in the table.
"""

from __future__ import annotations

from collections import Counter
from typing import Any

from dlbench.measure.adaptive import percent
from dlbench.measure.cost import PARTS
from dlbench.measure.stats import measure_more
from dlbench.report.results import CellResult, RunResults
from dlbench.report.tables import DASH, Column, Section, Table, Value, fmt_num

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
        cost = m.get("cost") or {"processes": None}  # stored before the breakdown: every part unknown
        gate = res.verifications.get(_group(c), {})
        gate_s = gate.get("seconds")
        row: dict[str, Any] = {"key": c.cell.key, "status": c.cell.status,
                               **{p: float(cost[p]) if cost.get(p) is not None else None for p in PARTS},
                               "gate_s": float(gate_s) / served[_group(c)] if gate_s is not None else None,
                               "processes": cost.get("processes")}
        known = [row[p] for p in ORDER if row[p] is not None]
        # a part unknown: the cell's stored wall time (and its gate's share where that is known)
        row["total_s"] = sum(known) if len(known) == len(ORDER) else (c.cell.seconds or 0.0) + (row["gate_s"] or 0.0)
        row["negative"] = negative_parts(row)
        adaptive = m.get("adaptive") or {}
        t = c.time_ms
        # processes that disagree beyond what the interval resolves: their medians, not a half-width
        disagree = t is not None and t.disagree
        row["processes_disagree"] = {"medians_ms": t.processes, "measure_more": measure_more(len(t.processes))} \
            if disagree else None
        row["half_width"] = None if disagree else adaptive.get("half_width") if "half_width" in adaptive else (
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
    total = {p: (sum(known) if (known := [r[p] for r in rows if r[p] is not None]) else None) for p in ORDER}
    started, finished = res.run.get("started_at"), res.run.get("finished_at")
    wall = (finished - started) if started and finished else None
    cells = sum(r["total_s"] for r in rows)
    return {**total, "cells_s": cells, "wall_s": wall, "outside_cells_s": (wall - cells) if wall else None,
            "met": sum(1 for r in rows if r["met"]), "with_target": sum(1 for r in rows if r["met"] is not None)}


def negative_parts(row: dict[str, Any]) -> list[str]:
    """The parts of a cost row below zero (a time spent cannot be negative: a clock that stepped back
    between the parent and the process, or a record that is not what dlbench wrote)."""
    return [p for p in (*ORDER, "total_s") if row.get(p) is not None and row[p] < 0]


def part_text(r: dict[str, Any], part: str) -> str:
    """One part of a row, in seconds; "–" when not recorded, marked when negative."""
    text = fmt_num(r[part])
    return f"{text} (negative!)" if part in r.get("negative", ()) else text


def pct_text(x: float | None) -> str:
    return DASH if x is None else f"±{percent(x)}"


def precision_text(r: dict[str, Any]) -> str:
    """The ± column: the interval's relative half-width, or where the cell's processes disagree
    (:func:`dlbench.measure.stats.processes_disagree`) their medians and the command that measures more."""
    d = r.get("processes_disagree")
    if d:
        return (f"processes disagree: {' / '.join(fmt_num(m) for m in d['medians_ms'])} ms per process "
                f"({d['measure_more']})")
    return pct_text(r["half_width"])


def _share(x: float | None) -> str:
    return DASH if x is None else f"{100 * x:.0f}%"


def shares_text(r: dict[str, Any]) -> str:
    """The between-process share of one call's variance / of one process median's."""
    if r["between_share"] is None:
        return DASH
    return f"{_share(r['between_share'])} / {_share(r['process_between_share'])}"


def section(res: RunResults) -> Section:
    """The report's section: one table of every cell with a figure, and the run's sums."""
    rows = [r for r in cell_costs(res) if r["status"] == "ok"]
    if not rows:
        return Section("Cost and precision", INTRO, [])
    cols = [Column("cell", "cell", numeric=False)] + [Column(p, LABELS[p]) for p in ORDER] + [
        Column("total", "total"), Column("hw", "±", numeric=False),
        Column("between", "between call / process", numeric=False)]
    body = [[Value(r["key"]), *(Value(part_text(r, p), r[p]) for p in ORDER), Value(part_text(r, "total_s"), r["total_s"]),
             Value(precision_text(r)), Value(shares_text(r))] for r in rows]
    total = run_cost(res, rows)
    body.append([Value("all cells"), *(Value(fmt_num(total[p]), total[p]) for p in ORDER),
                 Value(fmt_num(total["cells_s"]), total["cells_s"]), Value(""), Value("")])
    return Section("Cost and precision", INTRO, [Table("where the time went (seconds)", cols, body)])
