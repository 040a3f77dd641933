"""The report's "Profiles" section: per profiled cell, the operations that took the most time.

From the table a cell stores with ``--profile`` (:mod:`dlbench.measure.profile`): per operation its
calls and self time per profiled call, its share of the profiled operations' self time, and where the
full trace is (a Chrome trace file in the run's artifact directory, for chrome://tracing or Perfetto).
"""

from __future__ import annotations

from dlbench.report.tables import Column, Section, Table, Value, fmt_num
from dlbench.results import CellResult, RunResults

#: rows per cell in the report (the stored table keeps more)
TOP = 10

INTRO = ("The framework's own profiler over a few calls made after the timed ones (never during them), in the "
         "cell's first process: the operations with the most self time (their duration less that of operations "
         "nested in them), per profiled call. Operation names are the framework's (torch: aten ops; JAX: XLA's HLO "
         "ops and fusions; TensorFlow: graph ops, an XLA cluster as one), so rows compare within a framework, not "
         "across. The full trace is in the run's artifact directory.")


def profiled(res: RunResults) -> list[CellResult]:
    return [c for c in res.cells if c.ok and "profile" in c.cell.metrics]


def profile_tables(res: RunResults) -> list[Table]:
    tables = []
    for c in profiled(res):
        p = c.cell.metrics["profile"]
        ops = p["ops"]
        total = p["self_us_total"] or 1.0
        cols = [Column("op", "operation", numeric=False), Column("calls", "calls per call of the closure"),
                Column("self", "self ms per call", better="low"), Column("share", "share of all operations' self time")]
        rows = [[Value(o["name"]), Value(fmt_num(o["calls"] / p["calls"])),
                 Value(fmt_num(o["self_us"] / 1e3 / p["calls"]), o["self_us"] / 1e3 / p["calls"]),
                 Value(f"{100 * o['self_us'] / total:.0f}%")] for o in ops[:TOP]]
        title = (f"{c.cell.framework}/{c.cell.variant} {c.cell.model} {c.cell.scenario} (batch {c.cell.batch}, "
                 f"{c.cell.threads} thread(s), {c.cell.device}): {p['tool']}, {p['calls']} calls, trace "
                 f"artifacts/{res.run_id}/{p['trace']}")
        tables.append(Table(title, cols, rows))
    return tables


def section(res: RunResults) -> Section:
    return Section("Profiles", INTRO, profile_tables(res))
