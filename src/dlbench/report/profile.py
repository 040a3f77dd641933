"""The report's "Profiles" section: per profiled cell, the operations that took the most time.

From the table a cell stores with ``--profile`` (:mod:`dlbench.measure.profile`): per operation its
calls and self time per profiled call, its share of the profiled operations' self time, and where the
full trace is (a Chrome trace file in the run's artifact directory, for chrome://tracing or Perfetto);
then, where summing by kind of operation merges rows (XLA names every fusion apart), the same by kind.
"""

from __future__ import annotations

from dlbench.report.results import CellResult, RunResults
from dlbench.report.tables import Column, Section, Table, Value, fmt_num

#: rows per cell in the report (the stored table keeps more)
TOP = 10

INTRO = ("The framework's own profiler over a few calls made after the timed ones (never during them), in the "
         "cell's first process: the operations with the most self time (their duration less that of operations "
         "nested in them), per profiled call. Operation names are the framework's (torch: aten ops; JAX: XLA's HLO "
         "ops and fusions; TensorFlow: graph ops, and an XLA cluster's HLO instructions), so rows compare within a "
         "framework, not across. Where several operations are one kind (transpose_copy_fusion.71 and .75), a "
         "second table sums them by kind. The full trace is in the run's artifact directory.")


def profiled(res: RunResults) -> list[CellResult]:
    return [c for c in res.cells if c.ok and "profile" in c.cell.metrics]


def profile_tables(res: RunResults) -> list[Table]:
    tables = []
    for c in profiled(res):
        p = c.cell.metrics["profile"]
        title = (f"{c.cell.framework}/{c.cell.variant} {c.cell.model} {c.cell.scenario} (batch {c.cell.batch}, "
                 f"{c.cell.threads} thread(s), {c.cell.device}): {p['tool']}, {p['calls']} calls, trace "
                 f"artifacts/{res.run_id}/{p['trace']}")
        tables.append(_table(title, "operation", p["ops"], p))
        kinds = p.get("kinds", [])  # profiles stored before kinds were have none
        if {k["name"] for k in kinds} - {o["name"] for o in p["ops"]}:
            tables.append(_table(f"{title}, by kind", "kind of operation", kinds, p))
    return tables


def _table(title: str, what: str, ops: list[dict], p: dict) -> Table:
    """The :data:`TOP` rows of a stored operation (or kind) table, per call of the profiled closure."""
    total = p["self_us_total"] or 1.0
    cols = [Column("op", what, numeric=False), Column("calls", "calls per call of the closure"),
            Column("self", "self ms per call", better="low"), Column("share", "share of all operations' self time")]
    rows = [[Value(o["name"]), Value(fmt_num(o["calls"] / p["calls"])),
             Value(fmt_num(o["self_us"] / 1e3 / p["calls"]), o["self_us"] / 1e3 / p["calls"]),
             Value(f"{100 * o['self_us'] / total:.0f}%")] for o in ops[:TOP]]
    return Table(title, cols, rows)


def section(res: RunResults) -> Section:
    return Section("Profiles", INTRO, profile_tables(res))
