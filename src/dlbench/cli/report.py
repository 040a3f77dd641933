"""``dlbench report``, ``compare`` and ``reproduce``: reading stored runs back as documents,
comparing two runs, and re-running a published table."""

from __future__ import annotations

import argparse
import json
import math

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dlbench.cli import run as cli_run
from dlbench.cli.common import console, names, note_damage, write_output
from dlbench.core.errors import UsageError
from dlbench.core.outputs import check_file
from dlbench.planning import resolve
from dlbench.storage.store import DEFAULT_DB


def _store_results(run_id: str | None, db: str):
    from dlbench import api

    res = api.results(run_id, db)
    note_damage(res.damaged)
    return res


# --- report -------------------------------------------------------------------------------------
def cmd_report(args: argparse.Namespace) -> int:
    from dlbench.report.build import write_report
    from dlbench.survey.output import appendix, load_survey

    survey = appendix(load_survey(args.survey)) if args.survey else None
    res = _store_results(args.run_id, args.db)
    files = write_report(res, args.out, survey, db=args.db)
    if args.json:
        print(json.dumps({"run_id": res.run_id, "html": str(files.html), "markdown": str(files.markdown),
                          "csv": str(files.csv), "plots": [str(p) for p in files.plots],
                          "skipped_plots": [{"plot": s.title, "reason": s.reason} for s in files.skipped]}, indent=2))
        return 0
    console.print(f"report of run [bold]{escape(res.run_id)}[/] written to {escape(str(files.directory))}/",
                  highlight=False)
    for path in (files.html, files.markdown, files.csv):
        console.print(f"  {path}", highlight=False, markup=False)
    console.print(f"  {len(files.plots)} plot(s)", highlight=False)
    for s in files.skipped:
        console.print(f"  [yellow]plot skipped[/] {escape(f'{s.title}: {s.reason}')}", highlight=False)
    return 0


# --- compare ------------------------------------------------------------------------------------
def cmd_compare(args: argparse.Namespace) -> int:
    from dlbench.report.compare import compare_runs, compare_versions

    if args.fail_above is not None and not (0 <= args.fail_above < math.inf):  # NaN compares false: never failed
        raise UsageError(f"--fail-above must be a finite percentage >= 0, got {args.fail_above}")
    if args.baseline is None and args.run_b is None:
        raise UsageError("compare: give RUN_A and RUN_B, or one run and --baseline FRAMEWORK==VERSION")
    if args.baseline is not None and args.run_b is not None:
        raise UsageError("compare --baseline compares the versions within one run: give one RUN (or none: the latest)")
    if args.html:
        check_file(args.html, args.db)  # before reading: the refusal costs nothing
    if args.baseline is not None:
        cmps = compare_versions(_store_results(args.run_a, args.db), args.baseline)
    else:
        cmps = [compare_runs(_store_results(args.run_a, args.db), _store_results(args.run_b, args.db))]
    if args.html and len(cmps) > 1:
        raise UsageError(f"--html writes one comparison; --baseline {args.baseline} gives {len(cmps)}: "
                         f"use --json, or a run with one other version")
    failures = [f for cmp in cmps for f in (cmp.failures(args.fail_above) if args.fail_above is not None else [])]
    if args.html:
        from dlbench.report.html import render_compare

        write_output(args.html, render_compare(cmps[0]), args.db)
    if args.json:
        body = cmps[0].to_dict() if args.baseline is None else {"baseline": args.baseline,
                                                                "comparisons": [c.to_dict() for c in cmps]}
        print(json.dumps({**body, "fail_above": args.fail_above, "failures": failures}, indent=2))
        return 1 if failures else 0
    for cmp in cmps:
        _print_comparison(cmp)
    if args.html:
        console.print(f"HTML written to {args.html}", highlight=False, markup=False)
    if failures:
        console.print(f"[red]--fail-above {args.fail_above:g}: {len(failures)} failure(s)[/]", highlight=False)
        for f in failures:
            console.print(f"  {f}", highlight=False, markup=False)
    return 1 if failures else 0


def _print_comparison(cmp) -> None:
    from dlbench.report.compare import compare_rows

    header, rows = compare_rows(cmp)
    table = Table(title=escape(f"{cmp.run_a} (A) -> {cmp.run_b} (B)"), title_justify="left")
    for i, h in enumerate(header):
        table.add_column(h, justify="left" if i == 0 else "right")
    for row, m in zip(rows, cmp.matched, strict=True):
        style = {"slower": "red", "faster": "green"}.get(m.verdict)
        table.add_row(*map(Text, row), style=style)
    console.print(table)
    console.print(f"significant: p < {cmp.alpha:g} (Welch t on log per-process medians; Mann-Whitney on "
                  f"iterations where a run has 1 process) and B/A outside 1 ± "
                  f"{cmp.threshold * 100:g}%; {len(cmp.slower)} slower, {len(cmp.faster)} faster, "
                  f"{len(cmp.matched) - len(cmp.slower) - len(cmp.faster)} unchanged", highlight=False)
    for title, keys in (("only in A", cmp.only_a), ("only in B", cmp.only_b)):
        if keys:
            console.print(f"{len(keys)} cell(s) {title}:", highlight=False)
            for k in keys:
                console.print(f"  {k}", highlight=False, markup=False)
    if cmp.damaged:
        console.print(f"{len(cmp.damaged)} cell(s) set aside as damaged, not compared:", highlight=False)
        for k, side, why in cmp.damaged:
            console.print(f"  {k} (in {side}): {why}", highlight=False, markup=False)
    for key, why in cmp.not_compared:
        console.print(f"not compared: {key}: {why}", highlight=False, markup=False)


# --- reproduce ----------------------------------------------------------------------------------
def cmd_reproduce(args: argparse.Namespace) -> int:
    from dlbench.engines import reproduce as rep

    if args.list:
        return _list_targets(args.json)
    if not args.target:
        raise UsageError("reproduce: give a PAPER-TABLE (see dlbench reproduce --list)")
    rep.get_target(args.target)
    protocol = {**(rep.QUICK if args.quick else {}), **cli_run._protocol(args)}
    resolve.check_settings("protocol", protocol)  # the suite model's bounds, as for dlbench run
    env = rep.current_environment(args.gpu_device, tuple(names(args.framework, "--framework") or ()))
    progress = None if args.json or args.dry_run else cli_run.RichProgress()
    try:
        result = rep.reproduce(args.target, env, protocol, args.db, progress, dry_run=args.dry_run)
    finally:
        if progress:
            progress.stop()
    failed = [line for line in result.lines if line.note.startswith(("failed", "timeout", "not_equivalent"))]
    if args.json:
        print(json.dumps(result.to_dict(), indent=2, default=str))
        return 1 if failed else 0
    _print_reproduction(result)
    return 1 if failed else 0


def _list_targets(as_json: bool) -> int:
    from dlbench.engines import reproduce as rep

    rows = []
    backends = rep.installed_backends()
    for name, t in rep.targets().items():
        rows.append({"target": name, "paper": rep.paper_of(name)["cite"], "table": t["table"],
                     "section": t.get("section"), "caption": t.get("caption"),
                     "values_printed": t.get("printed", True),
                     "frameworks": [{"paper": m.paper, "ours": m.ours or "none", "relation": m.relation}
                                    for m in rep.mapping_of(name, backends)]})
    if as_json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="reproducible tables (dlbench reproduce TARGET)", title_justify="left")
    for col in ("target", "table", "what", "frameworks (paper -> measured here: itself, else its successor)"):
        table.add_column(col)
    for r in rows:
        what = r["caption"] + ("" if r["values_printed"] else " [values not printed]")
        frameworks = ", ".join(f"{f['paper']}->{f['ours']}" + ("" if f["relation"] == "none" else f" ({f['relation']})")
                               for f in r["frameworks"])
        table.add_row(*map(Text, (r["target"], f"{r['table']} ({r['section']})", what, frameworks)))
    console.print(table)
    return 0


def _print_reproduction(r) -> None:
    from dlbench.engines import reproduce as rep

    t = r.table
    console.print(f"[bold]{escape(r.target)}[/]: {escape(r.paper['cite'])}", highlight=False)
    console.print(f"{t['table']} ({t.get('section')}): {t.get('caption')}", highlight=False, markup=False)
    console.print(f"paper's machine: {r.paper['hardware']['summary']}", highlight=False, markup=False)
    console.print(f"paper's software: {r.paper['hardware'].get('software', '')}", highlight=False, markup=False)
    console.print(f"our machine:     {r.ours_hardware}", highlight=False, markup=False)
    console.print("frameworks, paper -> measured here (itself where it runs here, else its successor):", highlight=False)
    for m in r.mapping:
        relation = "" if m.relation == "none" else f" ({m.relation})"
        console.print(f"  {m.paper} -> {m.ours or 'none'}{relation}: {m.why}", highlight=False, markup=False)
    if t.get("not_printed"):
        console.print(f"[yellow]values not printed:[/] {escape(str(t['not_printed']))}", highlight=False)
    for note in t.get("notes", []):
        console.print(f"note: {note}", highlight=False, markup=False)
    header, rows = rep.wide(r.lines, [c["label"] for c in t["columns"]])
    table = Table(title=escape(f"{r.target}: per column, published / ours / ours÷published (run {r.run_id or 'none'}; "
                             f"--json adds the 95% CIs)"), title_justify="left", show_lines=True)
    for i, col in enumerate(header):
        table.add_column(col, justify="right" if 4 <= i < len(header) - 1 else "left")
    for row in rows:
        table.add_row(*map(Text, row))
    console.print(table)
    if r.run_id:
        console.print(f"stored as run {r.run_id}: dlbench report {r.run_id}", highlight=False, markup=False)


def register(sub) -> None:
    p = sub.add_parser("report", help="write a run's report: index.html, report.md, cells.csv")
    p.add_argument("run_id", nargs="?", help="default: the latest run")
    p.add_argument("--out", help="directory (default: dlbench-results/report-RUN_ID)")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true", help="print the written paths as JSON")
    p.add_argument("--survey", metavar="PATH",
                   help="add the survey section: a survey.json, or the --out directory of `dlbench survey`")
    p.set_defaults(func=cmd_report)

    p = sub.add_parser("compare", help="compare two runs cell by cell (ratio, CI, process-level test), or the "
                                       "versions of a framework within one run (--baseline)")
    p.add_argument("run_a", metavar="RUN_A", nargs="?", help="with --baseline: the run (default: the latest)")
    p.add_argument("run_b", metavar="RUN_B", nargs="?")
    p.add_argument("--baseline", metavar="FRAMEWORK",
                   help="within one run, compare every other version of this framework against it (jax==0.6.2)")
    p.add_argument("--fail-above", type=float, metavar="PCT", dest="fail_above",
                   help="exit 1 if a significant slowdown exceeds PCT percent (or a cell stopped producing a time)")
    p.add_argument("--html", metavar="FILE", help="also write the comparison as a self-contained HTML page")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_compare)

    p = sub.add_parser("reproduce", help="re-run a published table on today's frameworks, print both")
    p.add_argument("target", nargs="?", metavar="PAPER-TABLE", help="e.g. bahrampour2016-table3 (see --list)")
    p.add_argument("--list", action="store_true", help="list the reproducible tables")
    p.add_argument("--quick", action="store_true",
                   help="a seconds-long protocol (1 warm-up, 3 iterations, 1 process): a smoke test, not a result")
    p.add_argument("--framework", help="only these of today's frameworks (comma-separated)")
    p.add_argument("--gpu-device", default="cuda", dest="gpu_device",
                   help="where the paper's GPU rows run (default cuda; 'cpu' runs them on the CPU)")
    p.add_argument("--dry-run", action="store_true", dest="dry_run", help="print the plan and the paper's values only")
    cli_run.add_protocol_flags(p)
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_reproduce)

