"""``dlbench survey --out DIR``: the survey's tables written as files, in Markdown, CSV, JSON and
HTML (the HTML through the report's renderer, so both pages look alike). Nothing is written over
a database (:func:`dlbench.storage.store.check_output`), and every path is checked before the survey runs."""

from __future__ import annotations

import json
from pathlib import Path

from dlbench.core.errors import UsageError
from dlbench.report.html import render_survey
from dlbench.storage.store import check_output
from dlbench.survey.tables import TABLES, TITLES, _csv, _md, features_md, markdown

FILES = ("survey.md", "survey.html", "survey.json", "api_coverage.json",
         *(f"{name}.{ext}" for name in TABLES for ext in ("csv", "md")))


def check_out(out: Path) -> None:
    """``--out`` must be a directory (or not exist yet), and none of the files written there an SQLite
    database (:func:`~dlbench.storage.store.check_output`): checked before the survey runs."""
    if out.exists() and not out.is_dir():
        raise UsageError(f"survey --out {out} is a file; give a directory")
    for name in FILES:
        check_output(out / name)


def write(data: dict, out: Path) -> list[Path]:
    """survey.md (all tables), survey.json (everything), and per table .md/.csv; api_coverage.json
    holds every counted name."""
    check_out(out)
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise UsageError(f"cannot create survey directory {out}: {exc.strerror}") from None
    written = []

    def put(name: str, text: str) -> None:
        try:
            (out / name).write_text(text, encoding="utf-8")
        except OSError as exc:
            raise UsageError(f"cannot write {out / name}: {exc.strerror}") from None
        written.append(out / name)

    put("survey.md", markdown(data))
    put("survey.html", render_survey(data))
    put("survey.json", json.dumps(data, indent=2, default=str))
    put("api_coverage.json", json.dumps(data["api_coverage"], indent=2, default=str))
    for name, fn in TABLES.items():
        heads, rows = fn(data)
        put(f"{name}.csv", _csv(heads, rows))
        put(f"{name}.md", features_md(data) if name == "features" else f"## {TITLES[name]}\n\n" + _md(heads, rows))
    return written
