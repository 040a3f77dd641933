"""``dlbench run``, ``runs``, ``show`` and ``export``: measuring and reading the store."""

from __future__ import annotations

import argparse
import io
import json
import sys
from datetime import datetime

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn, TimeRemainingColumn
from rich.table import Table
from rich.text import Text

from dlbench.cli import EXTRA_COMMANDS, console, int_list, split_list, texts, thread_list, write_output
from dlbench.cli_dist import add_run_flags, distributed_flags, print_scaling, scaling_json
from dlbench.errors import UsageError
from dlbench.report.convergence import agreement
from dlbench.report.export import EXPORT_COLUMNS, export_rows, write_csv  # noqa: F401  (re-exported)
from dlbench.report.summary import summary_dict, summary_rows
from dlbench.results import RunResults
from dlbench.scenarios import DATASET, TIMED
from dlbench.store import DEFAULT_DB, Store, check_output


class RichProgress:
    """Progress bar: cells done / total, elapsed, ETA, and the cell now running."""

    def __init__(self) -> None:
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("eta"), TimeRemainingColumn(), console=console,
                            transient=False, disable=not sys.stderr.isatty() and not sys.stdout.isatty())
        self.task = None

    def __call__(self, event: str, **kw) -> None:
        if event == "start":
            self.bar.start()
            self.task = self.bar.add_task("starting", total=kw["total"], completed=kw["done"])
        elif self.task is None:
            return
        elif event == "phase":
            self.bar.update(self.task, description=_fit(kw["text"]))
        elif event == "cell_start":
            self.bar.update(self.task, description=_fit(kw["cell"].key))
        elif event == "cell_done":
            self.bar.advance(self.task)
            if kw["status"] != "ok":
                self.bar.console.print(f"  {kw['cell'].key}: [yellow]{kw['status']}[/] {kw['reason'][:200]}",
                                       highlight=False)

    def stop(self) -> None:
        self.bar.stop()


def _fit(text: str) -> str:
    """Leave room for the bar on an 80-column terminal."""
    width = max(20, console.width - 45)
    return text if len(text) <= width else text[: width - 1] + "…"


def _convergence(args: argparse.Namespace) -> dict:
    out = {}
    for flag, key in (("epochs", "epochs"), ("target_accuracy", "target_accuracy"), ("lr", "lr")):
        value = getattr(args, flag)
        if value is not None:
            if value <= 0 or (key == "target_accuracy" and value > 1):
                raise UsageError(f"--{flag.replace('_', '-')} out of range: {value}")
            out[key] = value
    return out


def _protocol(args: argparse.Namespace) -> dict:
    out = {}
    for flag, key in (("warmup", "warmup"), ("min_iters", "min_iters"), ("min_time", "min_time_s"),
                      ("repeats", "repeats"), ("timeout", "timeout_s")):
        value = getattr(args, flag)
        if value is not None:
            if value < 0 or (value == 0 and key in ("min_iters", "repeats", "timeout_s")):
                raise UsageError(f"--{flag.replace('_', '-')} must be positive, got {value}")
            out[key] = value
    return out


def cmd_run(args: argparse.Namespace) -> int:
    from dlbench import api

    progress = None if args.json else RichProgress()
    try:
        res = api.run(args.suite, models=split_list(args.model) or None, frameworks=split_list(args.framework) or None,
                      variants=split_list(args.variant) or None, scenarios=split_list(args.scenario) or None,
                      batches=int_list(args.batch, "batch sizes") or None,
                      threads=thread_list(args.threads) or None,
                      devices=split_list(args.device) or None, protocol=_protocol(args), seed=args.seed,
                      data=args.data, data_dir=args.data_dir, convergence=_convergence(args), db=args.db,
                      resume=args.resume, progress=progress, argv=sys.argv[1:], distributed=distributed_flags(args))
    except KeyboardInterrupt:
        if progress:
            progress.stop()
        print(f"dlbench: interrupted; finished cells are stored in {args.db}; "
              "continue with: dlbench run --resume RUN_ID (see dlbench runs)", file=sys.stderr)
        return 130
    finally:
        if progress:
            progress.stop()
    return print_summary(res, args.json, args.db)


def print_summary(res: RunResults, as_json: bool, db) -> int:
    failed = res.failed
    if as_json:
        data = summary_dict(res)
        if scaling := scaling_json(res, db):
            data["scaling"] = scaling
        print(json.dumps(data, indent=2, default=str))
        return 1 if res.errors else 0
    tables = summary_rows(res)
    every = [r for rows in tables.values() for r in rows]
    axes = ("framework", "variant", "batch", "threads", "device", "data")
    shown = [a for a in axes if a in ("framework", "variant") or len({getattr(r, a) for r in every}) > 1]
    fixed = [f"{a} {getattr(every[0], a)}" for a in axes if a not in shown] if every else []
    titles = {"compile": "compile cold/warm", "convergence": "convergence",
              **{s: f"{s} samples/s [95% CI] (whole data set)" for s in DATASET}}
    for model, rows in tables.items():
        scenarios = [s for s in (*TIMED, *DATASET, "compile", "convergence") if any(s in r.cells for r in rows)]
        title = model + (f"  ({', '.join(fixed)})" if fixed else "")
        table = Table(title=escape(title), title_justify="left")
        for col in shown:
            table.add_column(col)
        for s in scenarios:
            table.add_column(titles.get(s, f"{s} ms [95% CI]"), justify="right")
        for col in ("samples/s", "peak MiB", "verified"):
            table.add_column(col, justify="right")
        for r in rows:
            cols = [r.compile_text if s == "compile" else r.convergence_text if s == "convergence"
                    else r.rate_text(s) if s in DATASET else r.time_text(s)
                    for s in scenarios]
            thr = f"{r.throughput:,.0f}" if r.throughput else "–"
            mem = f"{r.peak_rss_mib:,.0f}" if r.peak_rss_mib else "–"
            table.add_row(*texts(*(getattr(r, a) for a in shown), *cols, thr, mem,
                                 {"pass": "yes", "fail": Text("NO", "red")}.get(r.verified, r.verified)))
        console.print(table)
    agree = agreement(res.cells)
    if agree:
        table = Table(title="agreement: first step where a framework's loss departs from the reference by > 1%",
                      title_justify="left")
        for col in ("model", "reference", "framework", "steps", "step-1 diff", "first departure"):
            table.add_column(col)
        for a in agree:
            dep = "none" if a["first_departure_step"] is None else str(a["first_departure_step"])
            table.add_row(*texts(a["model"], a["reference"], a["framework"], a["steps_compared"],
                                 f"{a['rel_diff_step1']:.1e}" if a["rel_diff_step1"] is not None else "–", dep))
        console.print(table)
    print_scaling(res, db)
    noisy = [c for c in res.cells if c.cell.warnings]
    if noisy:
        console.print(f"[yellow]{len(noisy)} cell(s) with warnings[/] (dlbench show {escape(res.run_id)} --warnings)",
                      highlight=False)
    if failed:
        console.print(f"[red]{len(failed)} cell(s) did not produce a time:[/]")
        for c in failed:
            console.print(f"  {c.cell.key}: {c.cell.status}: {c.cell.reason[:300]}", highlight=False, markup=False)
    console.print(f"run [bold]{escape(res.run_id)}[/] ({escape(res.run['status'])}) stored in {escape(str(db))}",
                  highlight=False)
    return 1 if res.errors else 0


def cmd_runs(args: argparse.Namespace) -> int:
    store = Store(args.db, read_only=True)
    try:
        runs = store.list_runs()
    finally:
        store.close()
    if args.json:
        print(json.dumps(runs, indent=2))
        return 0
    table = Table(title=escape(f"runs in {args.db}"))
    for col in ("id", "started", "status", "suite", "cells ok", "cells failed"):
        table.add_column(col)
    for r in runs:
        table.add_row(*texts(r["id"], datetime.fromtimestamp(r["started_at"]).isoformat(timespec="seconds"),
                             r["status"], r["suite"] or "", r["cells_ok"], r["cells_failed"]))
    console.print(table)
    return 0


def cmd_show(args: argparse.Namespace) -> int:
    from dlbench import api

    res = api.results(args.run_id, args.db)
    if args.warnings and not args.json:
        for c in res.cells:
            for w in c.cell.warnings:
                console.print(f"{c.cell.key}: {w}", highlight=False, markup=False)
        return 0
    return print_summary(res, args.json, args.db)


def cmd_export(args: argparse.Namespace) -> int:
    from dlbench import api

    if args.out:
        check_output(args.out, args.db)  # before reading: the refusal costs nothing
    res = api.results(args.run_id, args.db)
    if args.format == "json":
        data = res.to_dict()
        for cell, c in zip(data["cells"], res.cells, strict=True):
            cell["samples_ms"] = c.samples_ms
            cell["warmup_ms"] = c.warmup_ms
        text = json.dumps(data, indent=2, default=str)
    else:
        buf = io.StringIO()
        write_csv(res, buf)
        text = buf.getvalue()
    if args.out:
        write_output(args.out, text, args.db)
    else:
        sys.stdout.write(text)
    return 0


def register(sub) -> None:
    p = sub.add_parser("run", help="measure a suite (default: quick) and store the results")
    p.add_argument("--suite", help="built-in suite name (quick, bahrampour2016, shi2016, liu2018) or a YAML file")
    p.add_argument("--model", help="comma-separated models, e.g. lenet,resnet-56")
    p.add_argument("--framework", help="comma-separated frameworks (default: all installed)")
    p.add_argument("--variant", help="comma-separated variants, or 'all'")
    p.add_argument("--scenario", help="comma-separated: forward,gradient,train_step,compile,scaling")
    p.add_argument("--batch", help="comma-separated batch sizes")
    p.add_argument("--threads", help="comma-separated thread counts; 'all' or 'half' of the cores")
    p.add_argument("--device", help="comma-separated devices (cpu, cuda)")
    p.add_argument("--warmup", type=int)
    p.add_argument("--min-iters", type=int, dest="min_iters")
    p.add_argument("--min-time", type=float, dest="min_time", help="seconds of sampling per process")
    p.add_argument("--repeats", type=int, help="fresh processes per cell")
    p.add_argument("--timeout", type=float, help="seconds per cell process")
    p.add_argument("--seed", type=int)
    p.add_argument("--epochs", type=int, help="convergence: epochs of training (default 10)")
    p.add_argument("--target-accuracy", type=float, dest="target_accuracy",
                   help="convergence: test accuracy whose time-to-reach is reported (default 0.95)")
    p.add_argument("--lr", type=float, help="convergence: learning rate (default: the paper's for the model)")
    p.add_argument("--data", "--dataset", dest="data",
                   help="fill batches from a real data set (digits, mnist, cifar10, imdb, ptb) "
                                  "instead of synthetic samples")
    p.add_argument("--data-dir", dest="data_dir", help="where the data set's files are (see docs/data.md)")
    p.add_argument("--resume", metavar="RUN_ID", help="finish a stored run: only missing cells are measured")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    add_run_flags(p)
    p.set_defaults(func=cmd_run)

    p = sub.add_parser("runs", help="list stored runs")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_runs)

    p = sub.add_parser("show", help="print a stored run's summary")
    p.add_argument("run_id", nargs="?", help="default: the latest run")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.add_argument("--warnings", action="store_true", help="list every cell's warnings")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("export", help="write a run's cells as CSV or JSON (with raw samples)")
    p.add_argument("run_id", nargs="?", help="default: the latest run")
    p.add_argument("--format", choices=("csv", "json"), default="csv")
    p.add_argument("--out", help="file to write (default: stdout)")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.set_defaults(func=cmd_export)


EXTRA_COMMANDS.append(register)
