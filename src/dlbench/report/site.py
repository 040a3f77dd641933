"""``dlbench site DIR``: the results database as a static, self-contained set of pages, as asv publishes
a project's history: one page per figure group (model x scenario) with a trend plot per series across
releases and runs, detected step changes marked (:mod:`dlbench.report.changes`), and each point's row
linking to the cell behind it on its run's page; an index of the groups, the runs and the stored
bisections (``dlbench bisect``).

Every page is built like the report (:mod:`dlbench.report.html`): text escaped by construction, plots
as SVG data images, a Content-Security-Policy that forbids script and network, so the directory can
be served from anywhere (a CI artifact, GitHub Pages) or opened from disk. The directory is ours: it
is refused when it holds other files and no ``.dlbench-site`` marker, so a wrong path cannot overwrite
someone's files.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from dlbench.core.errors import UsageError
from dlbench.core.outputs import OutputDir
from dlbench.measure.stats import Summary, interval_text
from dlbench.report.bisection import read_stored
from dlbench.report.html import Markup, el, kv_table, page, plot_figure, rows_table, table_html
from dlbench.report.plots import Plot, _safe, _svg
from dlbench.report.results import load_run
from dlbench.report.versions import Point, Series, _timed, build_series, series_figure, series_table
from dlbench.storage.store import Store

MARKER = ".dlbench-site"


@dataclass
class Group:
    model: str
    scenario: str
    series: list[Series] = field(default_factory=list)
    changes: list[list | None] = field(default_factory=list)  # per series: its detected steps

    @property
    def page(self) -> str:
        return f"fig-{_safe(self.model)}-{_safe(self.scenario)}.html"


def cell_anchor(key: str) -> str:
    return "cell-" + _safe(key)


def run_page(run_id: str) -> str:
    return f"runs/{_safe(run_id)}.html"


def collect(store: Store) -> tuple[list[Group], list[Any]]:
    """Every timed, gated cell of the database as series grouped by (model, scenario), and every run
    analysed (for the run pages)."""
    points, runs = [], []
    for run in store.list_runs():
        res = load_run(store, run["id"])
        runs.append(res)
        recorded = res.environment.get("frameworks") or {}
        host = res.environment.get("hostname", "")
        points += [Point(res.run_id, res.run["started_at"], host, c.cell.framework, recorded.get(c.cell.framework), c)
                   for c in res.cells if _timed(c)]
    groups: dict[tuple[str, str], Group] = {}
    for s in build_series(points):
        groups.setdefault((s.model, s.scenario), Group(s.model, s.scenario)).series.append(s)
    ordered = sorted(groups.values(), key=lambda g: (g.model, g.scenario))
    for g in ordered:
        g.series.sort(key=lambda s: (s.base, s.variant, s.batch, s.threads, s.device, s.precision))
        g.changes = [_changes(s) for s in g.series]
    return ordered, runs


def _changes(s: Series) -> list | None:
    if len(s.points) < 3 or importlib.util.find_spec("ruptures") is None:
        return None
    from dlbench.report.changes import detect_series

    return detect_series(s)


def _nav(depth: int = 0) -> Markup:
    up = "../" * depth
    return el("p", el("a", "all figures", href=f"{up}index.html"), class_="nav")


def group_page(g: Group) -> str:
    body: list[Any] = [_nav(), el("h1", f"{g.model} {g.scenario}")]
    body.append(el("p", "Each series follows one figure of one framework across its releases (oldest first) and "
                        "across stored runs (by date). A circled point changed significantly from the one before "
                        "(the test dlbench compare uses); a dashed line marks a step change over the whole series "
                        "(segmentation, then each step tested with the point as unit). Each row links to the cell "
                        "behind the point."))
    for k, (s, changes) in enumerate(zip(g.series, g.changes, strict=True)):
        name = f"s{k}-" + _safe(f"{s.base}-{s.variant}-b{s.batch}-t{s.threads}-{s.device}-{s.precision}")
        body += [el("h2", s.title, id=name),
                 plot_figure(Plot(name, s.title, f"{len(s.points)} point(s)",
                                  _svg(series_figure(s, across_runs=True, changes=changes))))]
        table = series_table(s, across_runs=True, changes=changes)
        body.append(table_html(table))
        body.append(el("ol", [el("li", el("a", f"{p.label}, run {p.run_id}: {p.cell.cell.key}",
                                          href=f"{run_page(p.run_id)}#{cell_anchor(p.cell.cell.key)}",
                                          class_="cell-link"))
                              for p in s.points], class_="points"))
        if changes:
            body.append(rows_table(["step", "between", "before ms", "after ms", "after/before [95% CI]", "p"],
                                   [[c.verdict, f"{c.before} -> {c.after}", f"{c.median_before_ms:.4g}",
                                     f"{c.median_after_ms:.4g}", f"{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}]",
                                     f"{c.p_value:.2g}"] for c in changes]))
    return page(f"dlbench: {g.model} {g.scenario}", *body)


def _interval(t: Summary | None) -> str:
    """The CI column: the interval, or where the processes disagree their medians and the verdict
    (:func:`dlbench.measure.stats.processes_disagree`, the rule of every view)."""
    if t is None:
        return ""
    return interval_text(t, _fmt) if t.disagree else f"[{_fmt(t.ci_low)}, {_fmt(t.ci_high)}]"


def _fmt(v: float | None) -> str:
    return "" if v is None else f"{v:.4g}"


def run_html(res) -> str:
    env = res.environment
    cpu = env.get("cpu") or {}
    started = datetime.fromtimestamp(res.run["started_at"], UTC).strftime("%Y-%m-%d %H:%M")
    body: list[Any] = [_nav(1), el("h1", f"run {res.run_id}"),
                       kv_table([("started (UTC)", started), ("status", str(res.run.get("status", ""))),
                                 ("host", str(env.get("hostname", ""))), ("CPU", str(cpu.get("model", ""))),
                                 ("CPU flags", " ".join(cpu.get("flags", [])[:60])),
                                 ("frameworks", ", ".join(f"{k} {v}" for k, v in (env.get("frameworks") or {}).items())),
                                 ("argv", " ".join(map(str, res.run.get("argv") or [])))])]
    head = el("tr", [el("th", h, scope="col") for h in ("cell", "status", "gate", "median ms", "95% CI", "processes",
                                                         "samples", "reason")])
    rows = []
    for c in res.cells:
        t = c.time_ms
        rows.append(el("tr", el("td", el("code", c.cell.key)), el("td", c.cell.status), el("td", c.verified),
                       el("td", _fmt(t.median if t else None), class_="num"),
                       el("td", _interval(t), class_="num"),
                       el("td", str(len(c.repeat_medians_ms) or (1 if c.samples_ms else 0)), class_="num"),
                       el("td", str(len(c.samples_ms)), class_="num"), el("td", c.cell.reason or ""),
                       id=cell_anchor(c.cell.key)))
    body += [el("h2", "Cells"), el("table", el("thead", head), el("tbody", rows))]
    body.append(el("p", "Every raw sample is in the database: ", el("code", f"dlbench export {res.run_id}"), "."))
    return page(f"dlbench run {res.run_id}", *body)


def index_html(groups: list[Group], runs: list, bisections: list, title: str) -> str:
    body: list[Any] = [el("h1", title)]
    body.append(el("p", f"Generated {datetime.now(UTC).strftime('%Y-%m-%d %H:%M')} UTC from {len(runs)} stored "
                        f"run(s) by dlbench site."))
    body.append(el("h2", "Figures"))
    items = []
    for g in groups:
        steps = sum(len(c) for c in g.changes if c)
        items.append(el("li", el("a", f"{g.model} {g.scenario}", href=g.page, class_="group"),
                        f": {len(g.series)} series, {sum(len(s.points) for s in g.series)} point(s)"
                        + (f", {steps} step change(s)" if steps else "")))
    body.append(el("ul", items) if items else el("p", "No timed cell that passed the gate is stored yet."))
    if bisections:
        body.append(el("h2", "Bisections"))
        rows = []
        for b in bisections:  # as stored by dlbench.engines.bisect (Bisection.to_dict)
            s, r = b["settings"], b["result"]
            ratio = r.get("ratio") or {}
            figure = (f"{s['model']}: the gate" if s.get("gate") else
                      f"{s['model']} {s['scenario']}, {s['threads']} thread(s)")
            rows.append([b["id"], f"{s['framework']} {s['good']} .. {s['bad']}", figure, b["status"],
                         r.get("first_bad", ""),
                         f"{ratio['ratio']:.3f} [{ratio['ci_low']:.3f}, {ratio['ci_high']:.3f}]" if ratio else "",
                         ", ".join(st["version"] for st in b["steps"] if st["verdict"] == "skip"),
                         str(len(b["built"]))])
        body.append(rows_table(["bisection", "releases", "figure", "status", "first bad", "ratio to last good [95% CI]",
                                "skipped", "environments built"], rows))
    body.append(el("h2", "Runs"))
    body.append(el("ul", [el("li", el("a", r.run_id, href=run_page(r.run_id), class_="run"), " ",
                                datetime.fromtimestamp(r.run["started_at"], UTC).strftime("%Y-%m-%d %H:%M"), " ",
                                str(r.environment.get("hostname", "")), f": {len(r.cells)} cell(s)")
                          for r in reversed(runs)]))
    return page(title, *body)


def _is_ours(out: Path) -> bool:
    """Whether ``out`` is a site dlbench wrote: its marker is a real file (a link to one proves nothing)."""
    try:
        return (out / MARKER).is_file() and not (out / MARKER).is_symlink()
    except OSError:
        return False


def write_site(db: str | Path, out: str | Path, title: str = "dlbench results",
               on_damage: Callable[[list[str]], None] = lambda notes: None) -> list[Path]:
    """Write the site for database ``db`` into ``out``; returns the pages written, the index first.
    Every page is rendered and every path checked before the first is written
    (:class:`~dlbench.core.outputs.OutputDir`); in a folder the site wrote before, a symbolic link
    where a page or ``runs/`` goes is replaced (the link, never its target). ``on_damage`` is told what
    reading set aside as damaged (dlbench.storage.damage), one line each."""

    out = Path(out)
    if out.exists() and not out.is_dir():
        raise UsageError(f"{out} is a file (dlbench site writes a directory)")
    own = _is_ours(out)
    try:
        foreign = out.is_dir() and any(out.iterdir()) and not own
    except OSError as exc:
        raise UsageError(f"cannot read {out}: {exc.strerror}") from None
    if foreign:
        raise UsageError(f"{out} holds files that dlbench site did not write (no {MARKER}); name an empty or new "
                         "directory")
    store = Store(db, create=False, read_only=True)
    try:
        groups, runs = collect(store)
        found, damaged = read_stored(store.bisections())
        bisections = [b.to_dict() for b in found]
        on_damage([*store.damage, *(f"bisection {i} set aside: {why}" for i, why in damaged.items())])
    finally:
        store.close()
    pages = {"index.html": index_html(groups, runs, bisections, title)}
    pages.update({g.page: group_page(g) for g in groups})
    pages.update({run_page(r.run_id): run_html(r) for r in runs})
    # the marker first: a site stopped half-way is still one the next run may rewrite
    files = {MARKER: "written by dlbench site; the pages here are rewritten on each run\n", **pages}
    return OutputDir(out, db=db, own=own).write(files)[1:]
