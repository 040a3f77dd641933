"""The plain data a report is made of: tables of values, footnotes, sections, and how numbers are
written. The HTML and Markdown writers render these; the report's modules and each scenario's own
report section (:meth:`dlbench.scenarios.base.Scenario.report_sections`) build them.

It imports nothing of dlbench, so a scenario, low in the layers, can build its section with it.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

DASH = "–"


def fmt_num(x: float | None, sig: int = 3) -> str:
    """``sig`` significant digits, no exponent: 43152 -> "43,152", 12.34 -> "12.3", 0.01234 -> "0.0123"."""
    if x is None or (isinstance(x, float) and math.isnan(x)):
        return DASH
    if x == 0:
        return "0"
    decimals = sig - 1 - math.floor(math.log10(abs(x)))
    return f"{x:,.0f}" if decimals <= 0 else f"{x:.{decimals}f}"


def fmt_bytes_mib(n: float | None) -> str:
    return DASH if not n else fmt_num(n / 2**20)


@dataclass
class Value:
    """One table cell: its text, the number it ranks by (None: not ranked), and its marks."""

    text: str
    number: float | None = None
    best: bool = False
    note: int | None = None  # footnote number
    detail: str = ""  # secondary text (a CI), rendered smaller


@dataclass
class Column:
    key: str
    label: str
    better: str | None = None  # "low", "high" or None (not ranked)
    numeric: bool = True


@dataclass
class Table:
    title: str
    columns: list[Column]
    rows: list[list[Value]]
    groups: list[tuple] = field(default_factory=list)  # per row: what makes rows comparable


@dataclass
class Footnote:
    number: int
    text: str


@dataclass
class Section:
    """A report section a module of ``dlbench.report`` makes: its tables, then preformatted text."""

    title: str
    intro: str
    tables: list[Table]
    #: (sub-title, lines) shown preformatted after the tables
    text: tuple[str, list[str]] | None = None

    def __bool__(self) -> bool:
        return bool(self.tables or (self.text and self.text[1]))


def mark_best(table: Table) -> None:
    """Bold the best value of each ranked column within each group of comparable rows (ties: all)."""
    for j, col in enumerate(table.columns):
        if col.better is None:
            continue
        by_group: dict[tuple, list[int]] = {}
        for i, g in enumerate(table.groups or [()] * len(table.rows)):
            if table.rows[i][j].number is not None:
                by_group.setdefault(g, []).append(i)
        for members in by_group.values():
            if len(members) < 2:
                continue
            pick = min if col.better == "low" else max
            best = table.rows[pick(members, key=lambda i: table.rows[i][j].number)][j]
            for i in members:  # equal as shown is equal: "323" and "323" are both bold
                if table.rows[i][j].text == best.text:
                    table.rows[i][j].best = True
