"""``dlbench survey --out DIR``: the survey's tables written as files, in Markdown, CSV, JSON and
HTML (the HTML through the report's renderer, so both pages look alike)."""

from __future__ import annotations

import json
from pathlib import Path

from dlbench.report.html import render_survey
from dlbench.survey.tables import TABLES, TITLES, _csv, _md, features_md, markdown


def write(data: dict, out: Path) -> list[Path]:
    """survey.md (all tables), survey.json (everything), and per table .md/.csv; api_coverage.json
    holds every counted name."""
    out.mkdir(parents=True, exist_ok=True)
    written = []

    def put(name: str, text: str) -> None:
        (out / name).write_text(text)
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
