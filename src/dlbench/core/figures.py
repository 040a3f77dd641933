"""What a plot of the report is (:class:`Plot`, or :class:`Skipped` with why) and the helpers that
draw one: matplotlib's ``Figure`` API only (no pyplot, no GUI backend), imported lazily; SVG output
made reproducible (fixed hash salt, no date). Imports nothing of dlbench, so a scenario's own plots
can use it.
"""

from __future__ import annotations

import io
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any


@dataclass
class Plot:
    name: str  # file-name safe id
    title: str
    caption: str
    svg: str


@dataclass
class Skipped:
    title: str
    reason: str


def figure(ncols: int):
    import matplotlib

    matplotlib.use("Agg")  # never a GUI backend, even if something later imports pyplot
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.2 * ncols, 3.9))
    # fixed margins: a layout engine (constrained/tight) draws every figure twice, doubling the cost
    fig.subplots_adjust(left=0.6 / (5.2 * ncols) * 1.6, right=1 - 0.15 / ncols, bottom=0.14, top=0.91,
                        wspace=0.28)
    axes = [fig.add_subplot(1, ncols, i + 1) for i in range(ncols)]
    return fig, axes


def svg(fig) -> str:
    import matplotlib

    buf = io.StringIO()
    with matplotlib.rc_context({"svg.hashsalt": "dlbench", "svg.fonttype": "none"}):
        fig.savefig(buf, format="svg", metadata={"Date": None})
    text = buf.getvalue()
    return text[text.index("<svg"):]  # drop the XML prolog and doctype


def finish(ax, xlabel: str, ylabel: str, title: str) -> None:
    """The report's finish of one plot: axis labels, title, a light grid and a small legend."""
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize="small")


def by(cells: Iterable[Any], key: Callable[[Any], tuple]) -> dict[tuple, list[Any]]:
    out: dict[tuple, list[Any]] = {}
    for c in cells:
        out.setdefault(key(c), []).append(c)
    return out


def safe(text: str) -> str:
    return "".join(ch if ch.isalnum() or ch in "-_" else "_" for ch in text)
