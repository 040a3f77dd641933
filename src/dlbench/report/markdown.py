"""The run report as GitHub-flavoured Markdown: the same content as the HTML page, from the same
:class:`~dlbench.report.tables.ReportContent`. Plots are linked as SVG files next to it.

Every string from a run is escaped (:func:`md`): HTML special characters become entities, so a
reason such as ``<script>`` renders as text; Markdown punctuation is backslash-escaped so a
framework or error message cannot make a link, emphasis or a table column."""

from __future__ import annotations

import html

from dlbench.report.plots import Plot, Skipped
from dlbench.report.tables import ReportContent, Table, Value

_MD_SPECIAL = "\\`*_[]|#!"


def md(text: object) -> str:
    s = html.escape(str(text), quote=False)
    s = "".join("\\" + ch if ch in _MD_SPECIAL else ch for ch in s)
    return " ".join(s.split())  # a newline would end a table row


def value_md(v: Value) -> str:
    text = md(v.text)
    if v.best and v.text:
        text = f"**{text}**"
    if v.detail:
        text += f" {md(v.detail)}"
    if v.note:
        text += f"[^{v.note}]"
    return text


def table_md(t: Table) -> list[str]:
    lines = ["| " + " | ".join(md(c.label) for c in t.columns) + " |",
             "|" + "|".join("---:" if c.numeric else "---" for c in t.columns) + "|"]
    lines += ["| " + " | ".join(value_md(v) for v in row) + " |" for row in t.rows]
    return lines + [""]


def render_markdown(content: ReportContent, plots: list[Plot], skipped: list[Skipped],
                    plot_files: dict[str, str]) -> str:
    """``plot_files`` maps a plot's name to its path relative to the Markdown file."""
    out = [f"# dlbench report: run {md(content.run['id'])}", "", "## Environment", ""]
    out += ["| | |", "|---|---|"] + [f"| {md(k)} | {md(v)} |" for k, v in content.environment] + [""]
    out += ["## Machine peak", ""]
    out += table_md(content.peaks) if content.peaks.rows else ["No peak was measured in this run.", ""]
    out += ["## Results", "",
            "Per batch: median with its 95% bootstrap confidence interval in brackets. Bold: the best value of its "
            "column among rows with the same batch, threads and device. “–” with a note: the cell produced no "
            "value; the note says why.", ""]
    for t in content.tables:
        out += [f"### {md(t.title)}", ""] + table_md(t)
    for section in content.sections:
        out += [f"## {md(section.title)}", "", section.intro, ""]
        for t in section.tables:
            out += [f"### {md(t.title)}", ""] + table_md(t)
        if section.text and section.text[1]:
            out += [f"### {md(section.text[0])}", "", "```", *section.text[1], "```", ""]
    if content.verification:
        out += ["### Equivalence gate: not passed", ""] + [f"- {md(k)}: {md(v)}" for k, v in content.verification]
        out.append("")
    if content.unsupported:
        out += ["### Not gated: unsupported by the framework", ""]
        out += [f"- {md(k)}: {md(v)}" for k, v in content.unsupported] + [""]
    out += ["## Plots", ""]
    for p in plots:
        out += [f"![{md(p.title)}]({plot_files[p.name]})", "", f"*{md(p.title)}.* {md(p.caption)}", ""]
    if skipped:
        out += ["Plots not drawn:", ""] + [f"- **{md(s.title)}**: {md(s.reason)}" for s in skipped] + [""]
    out += ["## Warnings", ""]
    out += [f"- `{' '.join(k.replace('`', '').split())}`: {md(w)}" for k, w in content.warnings] or ["None."]
    out.append("")
    if content.footnotes:
        out += [f"[^{n.number}]: {md(n.text)}" for n in content.footnotes] + [""]
    return "\n".join(out)
