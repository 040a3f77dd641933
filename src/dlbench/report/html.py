"""Self-contained HTML pages: the run report and the comparison of two runs.

Escaping is the default, not a step to remember: pages are built with :func:`el`, which escapes
every ``str`` it is given (text and attribute values); only :class:`Markup` (built by ``el``
itself) passes through unescaped. Framework names, configurations, error messages, anything
from a run, is therefore shown as text. Plots are SVG loaded through ``<img src="data:...">``
(an image cannot run script or break out of the page), and a Content-Security-Policy forbids
any script and any network access: the file opens offline, anywhere.
"""

from __future__ import annotations

import base64
import html
from collections.abc import Iterable
from typing import Any

from dlbench.report.plots import Plot, Skipped
from dlbench.report.tables import Footnote, ReportContent, Table, Value

CSP = "default-src 'none'; img-src data:; style-src 'unsafe-inline'"

STYLE = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 2rem auto; max-width: 1400px;
       padding: 0 1rem; color: #1a1a1a; line-height: 1.4; }
h1 { font-size: 1.6rem; } h2 { font-size: 1.25rem; margin-top: 2rem; border-bottom: 1px solid #ddd; }
table { border-collapse: collapse; margin: 0.5rem 0 1rem; font-size: 0.9rem; }
th, td { border: 1px solid #ddd; padding: 0.25rem 0.5rem; vertical-align: top; }
th { background: #f4f4f4; text-align: left; }
td.num { text-align: right; font-variant-numeric: tabular-nums; white-space: nowrap; }
td .detail { color: #666; font-size: 0.8em; display: block; }
td strong { color: #000; }
.kv th { width: 12rem; }
figure { margin: 1rem 0 2rem; } figure img { max-width: 100%; height: auto; border: 1px solid #eee; }
figcaption { color: #444; font-size: 0.9rem; }
.footnotes, .warnings { font-size: 0.85rem; } .footnotes li, .warnings li { word-break: break-word; }
.slower { color: #b00020; font-weight: 600; } .faster { color: #006b2d; font-weight: 600; }
code { background: #f4f4f4; padding: 0 0.2rem; }
"""


class Markup(str):
    """HTML that is already safe to insert."""


def esc(value: Any) -> Markup:
    return value if isinstance(value, Markup) else Markup(html.escape(str(value), quote=True))


def el(tag: str, *children: Any, **attrs: Any) -> Markup:
    """``<tag attrs>children</tag>``; ``class_`` -> ``class``; None children and attrs are left out;
    lists and tuples of children are flattened; every plain string is escaped."""
    parts = [f"<{tag}"]
    for key, value in attrs.items():
        if value is None or value is False:
            continue
        name = key.rstrip("_").replace("_", "-")
        parts.append(f" {name}" if value is True else f' {name}="{esc(value)}"')
    parts.append(">")
    parts.extend(_children(children))
    parts.append(f"</{tag}>")
    return Markup("".join(parts))


def _children(children: Iterable[Any]) -> list[str]:
    out: list[str] = []
    for child in children:
        if child is None:
            continue
        if isinstance(child, list | tuple):
            out.extend(_children(child))
        else:
            out.append(esc(child))
    return out


def page(title: str, *body: Any) -> str:
    head = el("head", Markup('<meta charset="utf-8">'),
              Markup(f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">'),
              Markup('<meta name="viewport" content="width=device-width, initial-scale=1">'),
              el("title", title), el("style", Markup(STYLE)))
    return "<!DOCTYPE html>\n" + el("html", head, el("body", *body), lang="en") + "\n"


# --- tables --------------------------------------------------------------------------------------
def value_cell(v: Value, numeric: bool) -> Markup:
    text: Any = el("strong", v.text) if v.best else v.text
    note = el("sup", el("a", str(v.note), href=f"#note-{v.note}")) if v.note else None
    detail = el("span", v.detail, class_="detail") if v.detail else None
    return el("td", text, note, detail, class_="num" if numeric else None)


def table_html(t: Table, caption: str | None = None) -> Markup:
    head = el("tr", [el("th", c.label, scope="col") for c in t.columns])
    rows = [el("tr", [value_cell(v, c.numeric) for v, c in zip(row, t.columns, strict=True)]) for row in t.rows]
    return el("table", el("caption", caption) if caption else None, el("thead", head), el("tbody", rows))


def rows_table(headers: list[str], rows: list[list[Any]]) -> Markup:
    """A plain table from headers and rows of values (None shows as an empty cell)."""
    head = el("tr", [el("th", h, scope="col") for h in headers])
    body = [el("tr", [el("td", "" if v is None else str(v)) for v in row]) for row in rows]
    return el("table", el("thead", head), el("tbody", body))


def kv_table(items: list[tuple[str, str]]) -> Markup:
    return el("table", el("tbody", [el("tr", el("th", k, scope="row"), el("td", v)) for k, v in items]), class_="kv")


def footnotes_html(notes: list[Footnote]) -> Markup | None:
    if not notes:
        return None
    return el("ol", [el("li", n.text, id=f"note-{n.number}", value=str(n.number)) for n in notes], class_="footnotes")


def plot_figure(p: Plot) -> Markup:
    data = base64.b64encode(p.svg.encode()).decode()
    return el("figure", el("img", src=f"data:image/svg+xml;base64,{data}", alt=p.title, class_="plot"),
              el("figcaption", el("strong", p.title), " ", p.caption), id=f"plot-{p.name}")


# --- the run report --------------------------------------------------------------------------------
def render_report(content: ReportContent, plots: list[Plot], skipped: list[Skipped],
                  appendix: Iterable[Any] = ()) -> str:
    """The run's page; ``appendix``: body elements another command rendered for its end (the survey)."""
    run_id = content.run["id"]
    body: list[Any] = [el("h1", f"dlbench report: run {run_id}")]
    body += [el("h2", "Environment"), kv_table(content.environment)]
    body.append(el("h2", "Machine peak"))
    if content.peaks.rows:
        body.append(el("p", "Measured matrix-multiply rate per engine and thread count; the fastest engine of a "
                            "precision is that precision's peak, which “% of peak” of a cell of that precision "
                            "refers to (bf16 and int8 where the CPU computes them natively)."))
        body.append(table_html(content.peaks))
    else:
        body.append(el("p", "No peak was measured in this run (no CPU cells)."))
    body.append(el("h2", "Results"))
    body.append(el("p", "Per batch: median with its 95% bootstrap confidence interval. Bold: the best value of "
                        "its column among rows with the same batch, threads and device. “–” with a note: the cell "
                        "produced no value; the note says why."))
    for t in content.tables:
        body += [el("h3", t.title), table_html(t)]
    notes = footnotes_html(content.footnotes)
    if notes:
        body += [el("h3", "Notes"), notes]
    for section in content.sections:
        body += [el("h2", section.title), el("p", section.intro)]
        for t in section.tables:
            body += [el("h3", t.title), table_html(t)]
        if section.text and section.text[1]:
            body += [el("h3", section.text[0]), el("pre", "\n\n".join(section.text[1]))]
    if content.verification:
        body += [el("h3", "Equivalence gate: not passed"), kv_table(content.verification)]
    if content.unsupported:
        body += [el("h3", "Not gated: unsupported by the framework"), kv_table(content.unsupported)]
    body.append(el("h2", "Plots"))
    body += [plot_figure(p) for p in plots]
    if skipped:
        body += [el("h3", "Plots not drawn"),
                 el("ul", [el("li", el("strong", s.title), ": ", s.reason) for s in skipped], class_="skipped")]
    body.append(el("h2", "Warnings"))
    if content.warnings:
        body.append(el("ul", [el("li", el("code", key), ": ", w) for key, w in content.warnings], class_="warnings"))
    else:
        body.append(el("p", "None."))
    body += list(appendix)
    return page(f"dlbench report {run_id}", *body)


# --- the comparison -------------------------------------------------------------------------------
def render_compare(cmp) -> str:
    """``cmp`` is a :class:`dlbench.report.compare.Comparison`."""
    from dlbench.report.compare import compare_rows

    header, rows = compare_rows(cmp)
    body: list[Any] = [el("h1", f"dlbench compare: {cmp.run_a} → {cmp.run_b}")]
    body.append(el("p", f"Ratio B/A of the median time per batch, with a 95% hierarchical bootstrap interval "
                        f"(processes, then iterations); p from Welch's t-test on the log per-process medians "
                        f"(Mann-Whitney U on the iterations where a run has one process). Significant: "
                        f"p < {cmp.alpha:g} and the ratio outside 1 ± {cmp.threshold * 100:g}%."))
    trs = []
    for row, m in zip(rows, cmp.matched, strict=True):
        cls = {"slower": "slower", "faster": "faster"}.get(m.verdict)
        trs.append(el("tr", [el("td", v, class_=("num " + (cls or "")).strip() if i >= 1 else None)
                             for i, v in enumerate(row)]))
    body.append(el("table", el("thead", el("tr", [el("th", h) for h in header])), el("tbody", trs)))
    for title, items in (("Only in A", cmp.only_a), ("Only in B", cmp.only_b)):
        body += [el("h2", title), el("ul", [el("li", el("code", k)) for k in items]) if items else el("p", "None.")]
    if cmp.not_compared:
        body += [el("h2", "Matched but not compared"),
                 el("ul", [el("li", el("code", k), ": ", why) for k, why in cmp.not_compared])]
    if cmp.damaged:
        body += [el("h2", "Set aside as damaged (dlbench check)"),
                 el("ul", [el("li", el("code", k), f" (in {side}): ", why) for k, side, why in cmp.damaged])]
    return page(f"dlbench compare {cmp.run_a} {cmp.run_b}", *body)
