"""``dlbench survey --out DIR``: the survey's tables written as files, in Markdown, CSV, JSON and
HTML (the HTML through the report's renderer, so both pages look alike). Nothing is written over
a database or through a symbolic link (:class:`dlbench.core.outputs.OutputDir`), and every path is checked
before the survey runs. And read back: a saved survey as the appendix of a run's report
(``dlbench report --survey DIR``)."""

from __future__ import annotations

import json
from pathlib import Path

from dlbench.core.errors import UsageError
from dlbench.core.outputs import OutputDir
from dlbench.report.build import Appendix
from dlbench.survey.html import render_survey, survey_section
from dlbench.survey.tables import TABLES, TITLES, _csv, _md, features_md, markdown

FILES = ("survey.md", "survey.html", "survey.json", "api_coverage.json",
         *(f"{name}.{ext}" for name in TABLES for ext in ("csv", "md")))


def check_out(out: Path) -> None:
    """``--out`` must be a directory (or not exist yet), and no file written there an SQLite database
    or a symbolic link (:class:`~dlbench.core.outputs.OutputDir`): checked before the survey runs."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"survey --out {out} is a file; give a directory")
    OutputDir(out).check(FILES)


def write(data: dict, out: Path) -> list[Path]:
    """survey.md (all tables), survey.json (everything), and per table .md/.csv; api_coverage.json
    holds every counted name. Every path is checked again before the first file is written."""
    check_out(out)
    files = {"survey.md": markdown(data), "survey.html": render_survey(data),
             "survey.json": json.dumps(data, indent=2, default=str),
             "api_coverage.json": json.dumps(data["api_coverage"], indent=2, default=str)}
    for name, fn in TABLES.items():
        heads, rows = fn(data)
        files[f"{name}.csv"] = _csv(heads, rows)
        files[f"{name}.md"] = features_md(data) if name == "features" else f"## {TITLES[name]}\n\n" + _md(heads, rows)
    return OutputDir(out).write(files)


def load_survey(path: str | Path) -> dict:
    """A saved survey: ``survey.json`` as ``dlbench survey --out DIR`` writes it, or that DIR."""
    p = Path(path)
    if p.is_dir():
        p = p / "survey.json"
    try:
        data = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise UsageError(f"cannot read survey {p}: {getattr(exc, 'strerror', None) or exc}") from None
    if not isinstance(data, dict) or "features" not in data or "frameworks" not in data:
        raise UsageError(f"{p} is not a dlbench survey (write one with `dlbench survey --out DIR`)")
    try:  # rendering reads every field the report shows: a hand-made file missing one fails here, as bad input
        markdown(data)
        render_survey(data)
    except (KeyError, TypeError, AttributeError, IndexError, ValueError) as exc:
        raise UsageError(f"{p} is not a readable dlbench survey ({type(exc).__name__}: {exc})") from None
    return data


def appendix(data: dict) -> Appendix:
    """The survey as the last section of a run's report (``dlbench report --survey``)."""
    return Appendix(markdown=markdown(data).replace("# dlbench survey", "## Survey", 1), html=survey_section(data))
