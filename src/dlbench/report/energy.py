"""Energy per cell as ``dlbench show`` and ``dlbench report`` show it: J per sample (J per token for
generation) and average watts, each with the counters it was read from and their resolution
(:mod:`dlbench.measure.energy` reads and computes them). A run whose cells read no counter says so
once, with what was looked for: nothing is estimated in their place.
"""

from __future__ import annotations

from typing import Any

from dlbench.measure.energy import counter_text, unit_label
from dlbench.report.results import CellResult, RunResults
from dlbench.report.tables import DASH, Column, Section, Table, Value, fmt_num

TITLE = "Energy"
INTRO = ("Energy of each cell's timed calls from the machine's own counters (RAPL CPU package and DRAM through "
         "powercap, NVML's total-energy counter for a GPU cell), read right before the first and right after the "
         "last timed call of each process: joules per sample (per generated token for generation) and average "
         "watts, the median over the processes. RAPL counts the whole package, whatever else runs on it. Nothing "
         "is estimated where no counter could be read (docs/energy.md).")


def _recorded(res: RunResults) -> list[CellResult]:
    return [c for c in res.cells if c.energy]


def no_counter(res: RunResults) -> str | None:
    """One line where the run's cells recorded energy but none read a counter (None: some did, or none
    recorded any)."""
    cells = _recorded(res)
    if not cells or any("no_counter" not in c.energy for c in cells):
        return None
    notes = list(dict.fromkeys(n for c in cells for n in c.energy["no_counter"].split("; ")))
    return f"energy: no counter on this machine (looked for: {'; '.join(notes)}); nothing estimated"


def rows(res: RunResults) -> list[dict[str, Any]]:
    """One row per cell with energy figures (a cell whose processes read no counter: ``no_counter``)."""
    out = []
    for c in _recorded(res):
        e = c.energy
        row = {"key": c.cell.key, "scenario": c.cell.scenario, "unit": e["unit"]}
        if "no_counter" in e:
            out.append({**row, "no_counter": e["no_counter"]})
            continue
        out.append({**row, f"j_per_{e['unit']}": e["j_per_unit"], "watts": e["watts"],
                    "j_per_unit_by_domain": e["j_per_unit_by_domain"], "processes": e["processes"],
                    "counters": [{**k, "text": counter_text(k)} for k in e["counters"]],
                    "warnings": e["warnings"]})
    return out


def summary(res: RunResults) -> dict[str, Any] | None:
    """What ``show --json`` carries under ``energy`` (None: no cell of the run recorded energy)."""
    if not _recorded(res):
        return None
    return {"no_counter": no_counter(res), "cells": [] if no_counter(res) else rows(res)}


def table(res: RunResults) -> Table | None:
    """The cells' figures (None: no cell read a counter)."""
    if no_counter(res) is not None or not _recorded(res):
        return None
    units = sorted({r["unit"] for r in rows(res)}, reverse=True)
    cols = [Column("cell", "cell", numeric=False), Column("j", " or ".join(map(unit_label, units))),
            Column("w", "average W"), Column("domains", "J by domain", numeric=False),
            Column("counters", "counters (resolution)", numeric=False)]
    body = []
    for r in rows(res):
        if "no_counter" in r:
            body.append([Value(r["key"]), Value(DASH), Value(DASH), Value(""), Value(f"no counter: {r['no_counter']}")])
            continue
        j = r[f"j_per_{r['unit']}"]
        body.append([Value(r["key"]), Value(f"{fmt_num(j)} {unit_label(r['unit'])}", j),
                     Value(fmt_num(r["watts"]), r["watts"]),
                     Value(", ".join(f"{d} {fmt_num(v)}" for d, v in r["j_per_unit_by_domain"].items())),
                     Value(", ".join(k["text"] for k in r["counters"]))])
    return Table("energy of the timed calls (median over processes)", cols, body)


def section(res: RunResults) -> Section:
    """The report's section: the table, or the one line that says no counter was readable."""
    t = table(res)
    if t is not None:
        return Section(TITLE, INTRO, [t])
    line = no_counter(res)
    return Section(TITLE, INTRO, [], ("no counter", [line] if line else []))
