"""``dlbench report``: write a run's report directory.

index.html (one self-contained file, plots embedded), report.md (plots linked from plots/) and
cells.csv (the rows of ``dlbench export``)."""

from __future__ import annotations

import io
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dlbench.core.errors import UsageError
from dlbench.core.outputs import OutputDir
from dlbench.report import cost, energy, precision, profile, versions
from dlbench.report.export import write_csv
from dlbench.report.html import render_report
from dlbench.report.markdown import render_markdown
from dlbench.report.plots import Skipped, make_plots
from dlbench.report.results import RunResults
from dlbench.report.tables import build_content
from dlbench.scenarios import registry

DEFAULT_DIR = Path("dlbench-results")


@dataclass
class ReportFiles:
    directory: Path
    html: Path
    markdown: Path
    csv: Path
    plots: list[Path] = field(default_factory=list)
    skipped: list[Skipped] = field(default_factory=list)


@dataclass(frozen=True)
class Appendix:
    """A part another command rendered for the end of the report, in both formats (``dlbench report
    --survey``: the survey, :func:`dlbench.survey.output.appendix`); the report does not read it."""

    markdown: str
    html: list[Any]


def write_report(res: RunResults, out: str | Path | None = None, appendix: Appendix | None = None,
                 db: str | Path | None = None) -> ReportFiles:
    """``db``: the database the run was read from; no file of the report may overwrite it. Every file
    is rendered and its path checked before the first is written (:class:`~dlbench.core.outputs.OutputDir`:
    never through a symbolic link inside ``out``, each file whole or not at all)."""
    out = Path(out) if out else DEFAULT_DIR / f"report-{res.run_id}"
    if out.exists() and not out.is_dir():
        raise UsageError(f"report directory {out} is a file")
    content = build_content(res)
    # the run-wide sections, and those of the run's scenarios (the registry asks each scenario)
    content.sections = [s for s in (precision.section(res), *registry.report_sections(res), versions.section(res),
                                    profile.section(res), cost.section(res), energy.section(res)) if s]
    plots, skipped = make_plots(res, (precision.speed_error, versions.trend_plots, registry.report_plots))
    plot_files = {p.name: f"plots/{p.name}.svg" for p in plots}
    md = render_markdown(content, plots, skipped, plot_files)
    if appendix:
        md += "\n" + appendix.markdown
    csv = io.StringIO()
    write_csv(res, csv)
    html = render_report(content, plots, skipped, appendix.html if appendix else ())
    written = OutputDir(out, db=db).write({"index.html": html,
                                           "report.md": md, "cells.csv": csv.getvalue(),
                                           **{plot_files[p.name]: p.svg for p in plots}})
    return ReportFiles(out, *written[:3], plots=written[3:], skipped=skipped)
