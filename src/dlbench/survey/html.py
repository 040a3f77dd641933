"""The survey as HTML, through the report's renderer (:mod:`dlbench.report.html`), so its own page
(``dlbench survey --out DIR``) and its part of a run's report (``dlbench report --survey``) look alike."""

from __future__ import annotations

from typing import Any

from dlbench.report.html import el, page, rows_table
from dlbench.survey.tables import FEATURE_LEGEND, feature_matrices, sections, what_ran


def survey_section(data: dict) -> list[Any]:
    """The qualitative survey (``dlbench survey``) as report body elements: feature matrix with what
    ran, then API coverage, model zoo, setup and popularity."""
    body: list[Any] = [el("h2", "Survey"),
                       el("p", f"From `dlbench survey` on {data.get('date', '?')}: {data.get('machine', '')}"),
                       el("h3", "Feature matrix"), el("p", FEATURE_LEGEND)]
    for title, heads, rows in feature_matrices(data):
        body += [el("h4", title), rows_table(heads, rows)]
    ran = what_ran(data)
    if ran:
        body += [el("h4", "What ran"), el("ul", [el("li", el("strong", w), f" {v}: {what}") for w, v, what in ran])]
    for title, heads, rows in sections(data):
        body += [el("h3", title), rows_table(heads, rows)]
    return body


def render_survey(data: dict) -> str:
    return page(f"dlbench survey {data.get('date', '')}", el("h1", "dlbench survey"), *survey_section(data)[1:])
