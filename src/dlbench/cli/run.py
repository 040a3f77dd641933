"""``dlbench run``, ``runs``, ``show`` and ``export``: measuring and reading the store."""

from __future__ import annotations

import argparse
import io
import json
import shlex
import sys
import time
from dataclasses import asdict
from datetime import datetime

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from dlbench.cli.common import console, counts, names, note_damage, texts, write_output
from dlbench.core.errors import UsageError
from dlbench.core.interrupt import Interrupted, explain
from dlbench.core.outputs import check_file
from dlbench.measure.adaptive import percent
from dlbench.measure.stats import interval_text, summarize
from dlbench.planning import estimate as est
from dlbench.planning import resolve
from dlbench.planning.estimate import Estimate, format_duration
from dlbench.planning.plan import BUILTIN as BUILTIN_SUITES
from dlbench.planning.plan import Cell
from dlbench.report import cost, energy
from dlbench.report.export import EXPORT_COLUMNS, export_rows, write_csv  # noqa: F401  (re-exported)
from dlbench.report.results import RunResults
from dlbench.report.summary import optimizer_text, summary_dict, summary_rows, summary_scenarios
from dlbench.report.tables import DASH, fmt_num
from dlbench.report.tables import Table as ReportTable
from dlbench.running.runner import RunPlan
from dlbench.scenarios import registry
from dlbench.storage.store import DEFAULT_DB, Sample, Store


class RichProgress:
    """Progress of a run. On a terminal: a bar (cells done / total, elapsed, the estimated time left,
    the cell now running). Otherwise (CI logs, ``| tee``): one plain line per phase and per finished
    cell (status, median and CI, the time left), so a log shows the run moving. The time left comes
    from ``estimate`` (:mod:`dlbench.planning.estimate`: the protocol, then the cells measured); without one,
    from the mean time of the cells finished so far."""

    def __init__(self, estimate: Estimate | None = None, terminal: bool | None = None) -> None:
        self.terminal = console.is_terminal if terminal is None else terminal
        self.estimate = estimate
        self.left: list[Cell] = list(estimate.cells) if estimate else []  # not finished yet
        self.total = self.done = 0
        self.finished_s: list[float] = []  # wall time of the cells finished in this process
        self.current: Cell | None = None
        self.current_since = self.started = time.monotonic()
        self.bar = Progress(TextColumn("[bold]{task.description}"), BarColumn(), MofNCompleteColumn(),
                            TimeElapsedColumn(), TextColumn("eta"), _TimeLeft(self), console=console,
                            transient=False, disable=not self.terminal)
        self.task = None

    def __call__(self, event: str, **kw) -> None:
        if event == "start":
            self.total, self.done = kw["total"], kw["done"]
            if self.terminal:
                self.bar.start()
                self.task = self.bar.add_task("starting", total=kw["total"], completed=kw["done"])
            else:
                left = self.seconds_left()
                stored = f", {self.done} stored already" if self.done else ""
                guess = f"; about {format_duration(left)} (rough, from the protocol)" if left is not None else ""
                self._line(f"dlbench: {self.total - self.done} cell(s) to measure{stored}{guess}")
        elif event == "phase":
            if self.task is not None:
                self.bar.update(self.task, description=escape(_fit(kw["text"])))
            elif not self.terminal or kw.get("keep"):  # keep: a line worth keeping on a terminal too (env builds)
                self._line(f"  {kw['text']}")
        elif event == "cell_start":
            self.current, self.current_since = kw["cell"], time.monotonic()
            if self.task is not None:
                self.bar.update(self.task, description=escape(_fit(kw["cell"].key)))
        elif event == "cell_done":
            self._cell_done(kw["cell"], kw["status"], kw["reason"], kw.get("samples", []), kw.get("metrics") or {})

    def _cell_done(self, cell: Cell, status: str, reason: str, samples: list[Sample], metrics: dict) -> None:
        seconds = time.monotonic() - self.current_since
        self.current = None
        self.done += 1
        self.finished_s.append(seconds)
        if self.estimate is not None:
            self.estimate.record(cell, seconds, status)
        if cell in self.left:
            self.left.remove(cell)
        if self.terminal:
            if self.task is not None:
                self.bar.advance(self.task)
            if status != "ok":
                self.bar.console.print(f"  {escape(cell.key)}: [yellow]{escape(status)}[/] {escape(reason[:200])}",
                                       highlight=False)
            return
        median = _median_text(samples, metrics.get("adaptive")) if status == "ok" else ""
        what = f" {median}" if median else "" if status == "ok" else f": {reason[:200]}"
        left = self.seconds_left()
        eta = f"; about {format_duration(left)} left" if left is not None and self.done < self.total else ""
        self._line(f"[{self.done}/{self.total}] {cell.key}: {status}{what} ({format_duration(seconds)}{eta})")

    def seconds_left(self) -> float | None:
        """The estimated seconds until the last cell is done (None: nothing to go on yet)."""
        now = time.monotonic()
        if self.estimate is None:
            if not self.finished_s:
                return None
            mean = sum(self.finished_s) / len(self.finished_s)
            running = min(now - self.current_since, mean) if self.current is not None else 0.0
            return max(0.0, mean * (self.total - self.done) - running)
        left = self.estimate.remaining([c for c in self.left if c != self.current])
        if self.current is not None:
            left += max(0.0, self.estimate.predict(self.current) - (now - self.current_since))
        elif self.done == 0 and not self.finished_s:  # the peak and the gate run before the first cell
            left += max(0.0, self.estimate.setup() - (now - self.started))
        return left

    @staticmethod
    def _line(text: str) -> None:
        print(text, flush=True)

    def stop(self) -> None:
        self.bar.stop()


class _TimeLeft(ProgressColumn):
    """The bar's estimate of the time left, recomputed at every refresh (so it counts down during a
    long cell)."""

    def __init__(self, progress: RichProgress) -> None:
        super().__init__()
        self.progress = progress

    def render(self, task) -> Text:
        left = self.progress.seconds_left()
        return Text("–" if left is None else format_duration(left), style="progress.remaining")


def _median_text(samples: list[Sample], adaptive: dict | None = None) -> str:
    """``1.23 ms [1.20, 1.27]``: the median per call of a cell's measured samples and its 95% CI; for a
    cell measured to a target, its second stage's figure, and whether it met the target."""
    if adaptive and "center" in adaptive and adaptive.get("q", 50.0) == 50.0:
        met = "met" if adaptive["met"] else "not met"
        return (f"{fmt_num(adaptive['center'] / 1e6)} ms [{fmt_num(adaptive['low'] / 1e6)}, "
                f"{fmt_num(adaptive['high'] / 1e6)}], ±{percent(adaptive['half_width'])} "
                f"(target ±{percent(adaptive['target'])} {met}, {adaptive['processes']} processes)")
    measured = [s for s in samples if s.phase == "measure"]
    if not measured:
        return ""
    summary = summarize([s.value_ns / 1e6 for s in measured], groups=[s.repeat for s in measured])
    if summary.n == 1:
        return f"{fmt_num(summary.median)} ms"
    return interval_text(summary, fmt_num, unit="ms")


def _fit(text: str) -> str:
    """Leave room for the bar on an 80-column terminal."""
    width = max(20, console.width - 45)
    return text if len(text) <= width else text[: width - 1] + "…"


def _optimizer(args: argparse.Namespace) -> dict:
    """The optimiser's flags (checked by the suite model, ``OptimizerModel``: a bad value is exit 2)."""
    out: dict = {key: value for key, value in (
        ("name", args.optimizer), ("lr", args.lr), ("momentum", args.momentum), ("eps", args.eps),
        ("weight_decay", args.weight_decay)) if value is not None}
    if args.betas is not None:
        try:
            out["betas"] = tuple(float(b) for b in args.betas.split(","))
        except ValueError:
            raise UsageError(f"--betas takes two numbers, B1,B2 (e.g. 0.9,0.999), got {args.betas!r}") from None
        if len(out["betas"]) != 2:
            raise UsageError(f"--betas takes two numbers, B1,B2 (e.g. 0.9,0.999), got {args.betas!r}")
    return out


def add_protocol_flags(p: argparse.ArgumentParser) -> None:
    """The timing protocol's flags (``dlbench run`` and ``dlbench reproduce``; read by :func:`_protocol`)."""
    p.add_argument("--warmup", type=int)
    p.add_argument("--min-iters", type=int, dest="min_iters")
    p.add_argument("--min-time", type=float, dest="min_time", help="seconds of sampling per process")
    p.add_argument("--repeats", type=int, help="fresh processes per cell")
    p.add_argument("--timeout", type=float, help="seconds per cell process")
    p.add_argument("--target-ci", type=float, dest="target_ci", metavar="PCT",
                   help="measure each cell until its median's 95%% interval is within +-PCT%% (a pilot of --repeats "
                        "processes, then a second stage planned from it; docs/measurement.md)")
    p.add_argument("--max-time", type=float, dest="max_time", metavar="S",
                   help="with --target-ci: the most seconds a cell may take (default 600)")
    p.add_argument("--fixed-warmup", action="store_true", dest="fixed_warmup", default=None,
                   help="warm up with exactly --warmup calls (default: also look for a longer warm-up in the calls)")
    p.add_argument("--profile", type=int, nargs="?", const=5, metavar="CALLS",
                   help="after the timed calls, profile CALLS more (default 5) with the framework's own profiler: "
                        "a Chrome trace kept with the run and a top-operations table (forward, gradient, "
                        "train_step; generate: decode steps)")


def _protocol(args: argparse.Namespace) -> dict:
    """The protocol's flags, checked by the suite model (:func:`dlbench.planning.resolve.check_settings`): a bad
    value is one line naming its flag. ``--profile 0`` asks for a profile of no call: refused (a suite's
    ``profile_calls: 0`` is the default, no profile)."""
    if getattr(args, "profile", None) == 0:
        raise UsageError("--profile takes the number of calls to profile (at least 1), got 0")
    out = {key: getattr(args, flag) for flag, key in (
        ("warmup", "warmup"), ("min_iters", "min_iters"), ("min_time", "min_time_s"), ("repeats", "repeats"),
        ("timeout", "timeout_s"), ("profile", "profile_calls"), ("target_ci", "target_ci"),
        ("max_time", "max_cell_s")) if getattr(args, flag, None) is not None}
    if getattr(args, "fixed_warmup", None):
        out["find_warmup"] = False
    resolve.check_settings("protocol", out or None)
    return out


#: ``dlbench run`` flags that are not settings of what is measured
NOT_MEASURING = ("resume", "db", "json", "dry_run", "func", "command")


def _refuse_flags_with_resume(args: argparse.Namespace) -> None:
    """A resumed run is measured as it was stored: a setting given beside --resume would be ignored."""
    given = [f"--{k.replace('_', '-')}" for k, v in vars(args).items()
             if k not in NOT_MEASURING and v is not None and v is not False]
    if given:
        raise UsageError(f"--resume measures run {args.resume} as it was stored; it takes no {', '.join(given)}")


def cmd_run(args: argparse.Namespace) -> int:
    from dlbench import api

    if args.resume:
        _refuse_flags_with_resume(args)
    plan = _plan(args)
    left_out = plan.left_out(args.suite or "quick")
    if args.dry_run:
        return _print_plan(plan, left_out, args.json)
    if left_out:
        print(left_out, file=sys.stderr if args.json else sys.stdout, flush=True)
    progress = None if args.json else RichProgress(plan.estimate)
    try:
        res = api.run(plan, progress=progress, argv=sys.argv[1:])
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (dlbench.core.interrupt): the run is marked interrupted
        if progress:
            progress.stop()
        line, code = explain(exc)
        if not (isinstance(exc, Interrupted) and exc.run_id):
            line += f"; finished cells are stored in {args.db}; continue with: dlbench run --resume RUN_ID " \
                    f"--db {shlex.quote(args.db)} (see dlbench runs)"
        print(f"dlbench: {line}", file=sys.stderr)
        return code
    finally:
        if progress:
            progress.stop()
    return print_summary(res, args.json, args.db)


def _plan(args: argparse.Namespace) -> RunPlan:
    """The run the flags (or the run to resume) describe, planned by the API (:func:`dlbench.api.plan`).
    Validates everything; writes nothing."""
    from dlbench import api

    if args.resume:
        return api.plan(resume=args.resume, db=args.db)
    plan = api.plan(args.suite, models=names(args.model, "--model"), frameworks=names(args.framework, "--framework"),
                    variants=names(args.variant, "--variant"), scenarios=names(args.scenario, "--scenario"),
                    batches=counts(args.batch, "--batch"), threads=counts(args.threads, "--threads"),
                    devices=names(args.device, "--device"), protocol=_protocol(args) or None, seed=args.seed,
                    data=args.data, data_dir=args.data_dir, precisions=names(args.precision, "--precision"),
                    optimizer=_optimizer(args) or None, db=args.db, **registry.settings_from_flags(args))
    if unread := registry.unread_flag(args, plan.measured):
        raise UsageError(unread)
    return plan


def _print_plan(plan: RunPlan, left_out: str, as_json: bool) -> int:
    """``--dry-run``: the cells and the estimate; nothing measured, nothing stored, no run created."""
    from dlbench.planning.estimate import runs_a_process

    plan.calibrate(lambda line: print(f"dlbench: {line}", file=sys.stderr, flush=True))
    suite, cells, stored, estimate = plan.suite, plan.todo, plan.stored, plan.estimate
    setup, builds, total = estimate.setup(), plan.builds, plan.seconds
    building = sum(b.seconds or 0 for b in builds)
    if as_json:
        print(json.dumps({"suite": suite.name, "cells": [{**c.to_dict(), "key": c.key, "runs_a_process": runs_a_process(c),
                                                          "estimate_s": estimate.predict(c)} for c in cells],
                          "stored": stored, "setup_s": setup, "estimate_s": total, "left_out": left_out,
                          "environments_to_build": [asdict(b) for b in builds]}, indent=2))
        return 0
    table = Table(title=f"{suite.name}: {len(cells)} cell(s) to measure" + (f" ({stored} stored)" if stored else ""),
                  title_justify="left")
    for col in ("cell", "estimate"):
        table.add_column(col, justify="left" if col == "cell" else "right")
    for c in cells:
        table.add_row(Text(c.key), format_duration(estimate.predict(c)) if runs_a_process(c)
                      else "unsupported: no process")
    console.print(table)
    p = suite.protocol
    how = (f"a pilot of {max(p.repeats, 3)} process(es), then as many as +-{p.target_ci:g}% needs for a typical "
           f"noise, at most {p.max_cell_s:g} s a cell" if p.target_ci is not None else f"{p.repeats} process(es) per cell")
    h = estimate.history
    known = sum(h.call_s(c) is not None for c in cells)
    evidence = (f"{h.runs} earlier run(s) on this machine, which measured {known} of the {len(cells)} cell(s)"
                if h.runs else "no earlier run on this machine in this database: a rate of "
                f"{est.GFLOPS_PER_THREAD:g} GFLOP/s per thread is assumed")
    if h.calibrated:
        evidence += (f"; the start of a process calibrated on this machine for "
                     f"{', '.join(sorted({f for f, _ in h.calibrated}))}")
    print(f"estimate: about {format_duration(total)} (rough, from the protocol and {evidence}: {how}, "
          f"{p.warmup} warm-up + at least {p.min_iters} iterations and {p.min_time_s:g} s each; "
          f"{format_duration(setup)} of machine peak and equivalence gate"
          + (f"; {format_duration(building)} building environments" if building else "") + ")")
    if builds:
        print(f"environments to build first ({len(builds)}; dlbench envs create NAME builds one ahead):")
        for b in builds:
            print(f"  {b.text()}")
    if left_out:
        print(left_out)
    print("dry run: nothing measured, nothing stored, no run created")
    return 0


def print_summary(res: RunResults, as_json: bool, db) -> int:
    failed = res.without_time
    extras = registry.shown(res, db)  # what the run's scenarios add after the summary
    if as_json:
        data = summary_dict(res)
        data.update((x.key, x.rows) for x in extras if x.key)
        if (figures := energy.summary(res)) is not None:
            data["energy"] = figures
        print(json.dumps(data, indent=2, default=str))
        return 1 if res.errors else 0
    tables = summary_rows(res)
    every = [r for rows in tables.values() for r in rows]
    axes = ("framework", "variant", "batch", "threads", "device", "data", "precision")
    shown = [a for a in axes if a in ("framework", "variant") or len({getattr(r, a) for r in every}) > 1]
    shown_as = {"precision": "precision_text", "framework": "shown_name"}  # jax 0.4.38, as the report shows it
    fixed = [f"{a} {getattr(every[0], a)}" for a in axes if a not in shown] if every else []
    for model, rows in tables.items():
        scenarios = summary_scenarios(rows)
        about = fixed + [t for t in (optimizer_text(rows),) if t]
        title = model + (f"  ({', '.join(about)})" if about else "")
        table = Table(title=escape(title), title_justify="left")
        for col in shown:
            table.add_column(col)
        rated = [s for s in scenarios if not registry.of_stored(s).whole_dataset and any(r.throughput(s) for r in rows)]
        for s in scenarios:
            table.add_column(registry.of_stored(s).column, justify="right")
            if s in rated:  # each scenario's rate beside it: a forward and a training rate never share a column
                table.add_column(f"{s} samples/s", justify="right")
        quality = any(r.quality for r in rows)  # a trained decoder: its quality on held-out text beside its time
        for col in ("peak MiB", *(("quality vs float64 (held-out text)",) if quality else ()), "verified"):
            table.add_column(col, justify="right")
        for r in rows:
            cols = []
            for s in scenarios:
                cols.append(r.text(s))
                if s in rated:
                    cols.append(r.throughput_text(s))
            mem = f"{r.peak_rss_mib:,.0f}" if r.peak_rss_mib else "–"
            if r.peak_rss_mib and r.peak_includes_profiler:  # stored before the peak was read ahead of --profile
                mem += " (with profiler)"
            table.add_row(*texts(*(getattr(r, shown_as.get(a, a)) for a in shown), *cols, mem,
                                 *((r.quality_text,) if quality else ()),
                                 {"pass": "yes", "fail": Text("NO", "red")}.get(r.verified, r.verified)))
        console.print(table)
    for x in extras:
        console.print(_rich_table(x.table))
    if (energy_table := energy.table(res)) is not None:
        console.print(_rich_table(energy_table))
    elif (line := energy.no_counter(res)) is not None:
        console.print(line, highlight=False, markup=False)
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


def _rich_table(t: ReportTable) -> Table:
    """A report table (:mod:`dlbench.report.tables`) for the terminal."""
    table = Table(title=escape(t.title), title_justify="left")
    for col in t.columns:
        table.add_column(col.label, justify="right" if col.numeric else "left")
    for row in t.rows:
        table.add_row(*texts(*(v.text for v in row)))
    return table


def cmd_runs(args: argparse.Namespace) -> int:
    store = Store(args.db, read_only=True)
    try:
        runs = store.list_runs()
    finally:
        store.close()
    note_damage(store.damage)
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
    note_damage(res.damaged)
    if args.cost:
        return _print_cost(res, args.json)
    if args.warnings and not args.json:
        for c in res.cells:
            for w in c.cell.warnings:
                console.print(f"{c.cell.key}: {w}", highlight=False, markup=False)
        return 0
    return print_summary(res, args.json, args.db)


def cmd_export(args: argparse.Namespace) -> int:
    from dlbench import api

    if args.out:
        check_file(args.out, args.db)  # before reading: the refusal costs nothing
    res = api.results(args.run_id, args.db)
    note_damage(res.damaged)
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
    p.add_argument("--suite", help=f"built-in suite name ({', '.join(BUILTIN_SUITES)}) or a YAML file")
    p.add_argument("--model", help="comma-separated models, e.g. lenet,resnet-56")
    p.add_argument("--framework", help="comma-separated frameworks (default: all installed)")
    p.add_argument("--variant", help="comma-separated variants, or 'all'")
    p.add_argument("--scenario", help=f"comma-separated, of: {', '.join(registry.names())} "
                                      "(default: the suite's; quick's: forward,train_step)")
    p.add_argument("--batch", help="comma-separated batch sizes")
    p.add_argument("--threads", help="comma-separated thread counts; 'all' or 'half' of the cores")
    p.add_argument("--device", help="comma-separated devices (cpu, cuda)")
    p.add_argument("--precision", help="comma-separated precisions: fp32 (default), bf16, fp16, amp-bf16, amp-fp16, "
                                       "int8 (inference), tf32 (GPU); see docs/precision.md")
    add_protocol_flags(p)
    p.add_argument("--seed", type=int)
    p.add_argument("--optimizer", help="the update of train_step, compile and convergence: sgd (with momentum, "
                                       "default) or adamw (docs/scenarios.md)")
    p.add_argument("--lr", type=float, help="learning rate of every cell that trains (default: sgd the paper's for "
                                            "the model, adamw 5e-5 as transformers)")
    p.add_argument("--momentum", type=float, help="sgd: momentum (default 0.9)")
    p.add_argument("--betas", help="adamw: B1,B2 (default 0.9,0.999)")
    p.add_argument("--eps", type=float, help="adamw: epsilon (default 1e-8)")
    p.add_argument("--weight-decay", type=float, dest="weight_decay",
                   help="adamw: decoupled weight decay (default 0, as transformers)")
    p.add_argument("--data", "--dataset", dest="data",
                   help="fill batches from a real data set (digits, mnist, cifar10, imdb, ptb) "
                                  "instead of synthetic samples")
    p.add_argument("--data-dir", dest="data_dir", help="where the data set's files are (see docs/data.md)")
    p.add_argument("--resume", metavar="RUN_ID", help="finish a stored run: only missing cells are measured")
    p.add_argument("--dry-run", action="store_true", dest="dry_run",
                   help="list the cells and an estimate of the time they take; measure and store nothing")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    registry.add_flags(p)  # each scenario's own flags, in a group per settings section
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
    p.add_argument("--cost", action="store_true",
                   help="where the run's wall time went, per cell and in all: process start and imports, build, "
                        "gate, warm-up, timed calls, the rest; and each cell's precision and variance split")
    p.set_defaults(func=cmd_show)

    p = sub.add_parser("export", help="write a run's cells as CSV or JSON (with raw samples)")
    p.add_argument("run_id", nargs="?", help="default: the latest run")
    p.add_argument("--format", choices=("csv", "json"), default="csv")
    p.add_argument("--out", help="file to write (default: stdout)")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.set_defaults(func=cmd_export)


def _print_cost(res: RunResults, as_json: bool) -> int:
    """``dlbench show --cost``: where a run's time went, cell by cell (:mod:`dlbench.report.cost`)."""
    rows = cost.cell_costs(res)
    total = cost.run_cost(res, rows)
    if as_json:
        print(json.dumps({"run": res.run_id, "cells": rows, "total": total}, indent=2, default=str))
        return 0
    table = Table(title=f"where the time went: run {res.run_id} (seconds)", title_justify="left")
    for col in ("cell", "procs", *(cost.LABELS[p] for p in cost.ORDER), "total", "±", "between call/proc", "reused"):
        table.add_column(col, justify="left" if col in ("cell", "reused") else "right")
    for r in rows:
        met = "" if r["met"] is None else (" ✓" if r["met"] else " ✗")
        table.add_row(r["key"], str(r["processes"] or DASH), *(cost.part_text(r, p) for p in cost.ORDER),
                      cost.part_text(r, "total_s"),
                      cost.precision_text(r) + met, cost.shares_text(r), ",".join(r["reused"]))
    table.add_row("all cells", "", *(fmt_num(total[p]) for p in cost.ORDER), fmt_num(total["cells_s"]), "", "", "")
    console.print(table)
    if total["wall_s"] is not None:
        print(f"run wall time {fmt_num(total['wall_s'])} s: cells {fmt_num(total['cells_s'])} s, outside them "
              f"(machine peak, environments, the driver) {fmt_num(total['outside_cells_s'])} s")
    if total["with_target"]:
        print(f"{total['met']} of {total['with_target']} cell(s) measured to a target met it")
    negative = [r for r in rows if r["negative"]]
    if negative:
        print(f"{len(negative)} cell(s) with a negative time, which no cell can spend (a clock that stepped back or a "
              f"damaged record): {', '.join(r['key'] for r in negative)}")
    if any(r[p] is None for r in rows for p in cost.ORDER):
        print("–: not recorded (a cell stored before dlbench kept where its time went, or a gate's time before it "
              "was kept); such a cell's total is its wall time")
    return 0
