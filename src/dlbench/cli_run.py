"""``dlbench run``, ``runs``, ``show`` and ``export``: measuring and reading the store."""

from __future__ import annotations

import argparse
import io
import json
import shlex
import sys
import time
from datetime import datetime

from rich.markup import escape
from rich.progress import BarColumn, MofNCompleteColumn, Progress, ProgressColumn, TextColumn, TimeElapsedColumn
from rich.table import Table
from rich.text import Text

from dlbench import flags, resolve
from dlbench.cli_common import console, counts, names, texts, write_output
from dlbench.cli_dist import add_run_flags, distributed_flags, print_scaling, scaling_json
from dlbench.errors import UsageError
from dlbench.estimate import Estimate, format_duration, setup_seconds
from dlbench.interrupt import Interrupted, explain
from dlbench.measure.stats import summarize
from dlbench.plan import Cell, Suite
from dlbench.report.convergence import agreement
from dlbench.report.export import EXPORT_COLUMNS, export_rows, write_csv  # noqa: F401  (re-exported)
from dlbench.report.generation import print_tables as print_generation
from dlbench.report.summary import summary_dict, summary_rows, summary_scenarios
from dlbench.report.tables import fmt_num
from dlbench.results import RunResults
from dlbench.scenarios import registry
from dlbench.store import DEFAULT_DB, Sample, Store, check_output


class RichProgress:
    """Progress of a run. On a terminal: a bar (cells done / total, elapsed, the estimated time left,
    the cell now running). Otherwise (CI logs, ``| tee``): one plain line per phase and per finished
    cell (status, median and CI, the time left), so a log shows the run moving. The time left comes
    from ``estimate`` (:mod:`dlbench.estimate`: the protocol, then the cells measured); without one,
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
            self._cell_done(kw["cell"], kw["status"], kw["reason"], kw.get("samples", []))

    def _cell_done(self, cell: Cell, status: str, reason: str, samples: list[Sample]) -> None:
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
        median = _median_text(samples) if status == "ok" else ""
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
            left += max(0.0, setup_seconds(self.estimate.cells) - (now - self.started))
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


def _median_text(samples: list[Sample]) -> str:
    """``1.23 ms [1.20, 1.27]``: the median per call of a cell's measured samples and its 95% CI."""
    measured = [s for s in samples if s.phase == "measure"]
    if not measured:
        return ""
    summary = summarize([s.value_ns / 1e6 for s in measured], groups=[s.repeat for s in measured])
    ci = f" [{fmt_num(summary.ci_low)}, {fmt_num(summary.ci_high)}]" if summary.n > 1 else ""
    return f"{fmt_num(summary.median)} ms{ci}"


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


def _serving(args: argparse.Namespace) -> dict:
    """The deployment scenarios' flags (checked by the suite model: a bad value is exit 2)."""
    out: dict = {key: value for key, value in (
        ("latency_calls", args.latency_calls), ("qps", args.qps), ("p99_ms", args.p99_ms),
        ("min_duration_s", args.loadgen_min_duration), ("min_queries", args.loadgen_min_queries)) if value is not None}
    if args.find_peak:
        out["find_peak"] = True
    return out


def _generation(args: argparse.Namespace) -> dict:
    """The generate scenarios' flags (checked by the suite model: a bad value is exit 2)."""
    return {key: value for key, value in (
        ("prompt", args.prompt_len), ("new_tokens", args.new_tokens), ("runs", args.generations),
        ("ttft_ms", args.ttft_ms), ("tpot_ms", args.tpot_ms)) if value is not None}


def add_protocol_flags(p: argparse.ArgumentParser) -> None:
    """The timing protocol's flags (``dlbench run`` and ``dlbench reproduce``; read by :func:`_protocol`)."""
    p.add_argument("--warmup", type=int)
    p.add_argument("--min-iters", type=int, dest="min_iters")
    p.add_argument("--min-time", type=float, dest="min_time", help="seconds of sampling per process")
    p.add_argument("--repeats", type=int, help="fresh processes per cell")
    p.add_argument("--timeout", type=float, help="seconds per cell process")
    p.add_argument("--profile", type=int, nargs="?", const=5, metavar="CALLS",
                   help="after the timed calls, profile CALLS more (default 5) with the framework's own profiler: "
                        "a Chrome trace kept with the run and a top-operations table (forward, gradient, "
                        "train_step; generate: decode steps)")


def _protocol(args: argparse.Namespace) -> dict:
    out = {}
    for flag, key in (("warmup", "warmup"), ("min_iters", "min_iters"), ("min_time", "min_time_s"),
                      ("repeats", "repeats"), ("timeout", "timeout_s"), ("profile", "profile_calls")):
        value = getattr(args, flag)
        if value is not None:
            if key == "timeout_s":
                value = resolve.timeout(value)
            elif value < 0 or (value == 0 and key in ("min_iters", "repeats", "profile_calls")):
                raise UsageError(f"--{flag.replace('_', '-')} must be positive, got {value}")
            out[key] = value
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
    suite, todo, stored = _plan(args)
    left_out = _left_out(suite, args.suite or "quick")
    estimate = Estimate(suite, todo, _epoch_samples(suite, todo))
    if args.dry_run:
        return _print_plan(suite, todo, stored, estimate, left_out, args.json)
    if left_out:
        print(left_out, file=sys.stderr if args.json else sys.stdout, flush=True)
    progress = None if args.json else RichProgress(estimate)
    try:
        if args.resume:
            res = api.run(resume=args.resume, db=args.db, progress=progress)
        else:
            res = api.run(suite, db=args.db, progress=progress, argv=sys.argv[1:])
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM (dlbench.interrupt): the run is marked interrupted
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


def _plan(args: argparse.Namespace) -> tuple[Suite, list[Cell], int]:
    """The suite the flags (or the run to resume) describe, its cells still to measure, and how many
    are stored already. Validates everything; writes nothing."""
    from dlbench import runner

    if args.resume:
        store = Store(args.db, create=False)
        try:
            suite = Suite.model_validate(store.get_run(args.resume)["suite"])
            done = store.done_keys(args.resume)
        finally:
            store.close()
    else:
        suite = flags.build_suite(args.suite, models=names(args.model, "--model"),
                                   frameworks=names(args.framework, "--framework"),
                                   variants=names(args.variant, "--variant"), scenarios=names(args.scenario, "--scenario"),
                                   batches=counts(args.batch, "--batch"), threads=counts(args.threads, "--threads"),
                                   devices=names(args.device, "--device"), protocol=_protocol(args) or None,
                                   seed=args.seed, data=args.data, data_dir=args.data_dir,
                                   convergence=_convergence(args) or None, distributed=distributed_flags(args),
                                   serving=_serving(args) or None, precisions=names(args.precision, "--precision"),
                                   generation=_generation(args) or None)
        done = set()
    _, cells = runner.plan_cells(suite)
    todo = [c for c in cells if c.key not in done]
    return suite, todo, len(cells) - len(todo)


def _left_out(suite: Suite, name: str) -> str:
    """A line naming the installed frameworks a suite of ``frameworks: installed`` leaves out
    (``installed_except``) and how to include them in suite ``name`` (as given to --suite); empty
    when it leaves none out."""
    if suite.frameworks != "installed":
        return ""
    installed = resolve.installed()
    out = [f for f in installed if f in suite.installed_except]
    if not out:
        return ""
    every = ",".join(resolve.suite_frameworks(suite) + out)
    what = f" ({suite.description.strip()})" if suite.description.strip() else ""
    return (f"the {suite.name} suite{what} leaves out installed {', '.join(out)}; to include them, "
            f"name every framework: dlbench run --suite {name} --framework {every}")


def _epoch_samples(suite: Suite, cells: list[Cell]) -> dict[str, int]:
    """Training samples of each real data set the cells use (what a training epoch costs, for the estimate)."""
    from dlbench.data import DataError, load_dataset

    out = {}
    for data in {c.data for c in cells if c.data != "synthetic"}:
        try:
            out[data] = len(load_dataset(data, suite.data_dir, "train"))
        except DataError:
            pass  # plan_cells has checked it; a guess stands in
    return out


def _print_plan(suite: Suite, cells: list[Cell], stored: int, estimate: Estimate, left_out: str, as_json: bool) -> int:
    """``--dry-run``: the cells and the estimate; nothing measured, nothing stored, no run created."""
    from dlbench.estimate import runs_a_process

    setup = setup_seconds(cells)
    total = setup + estimate.remaining(cells)
    if as_json:
        print(json.dumps({"suite": suite.name, "cells": [{**c.to_dict(), "key": c.key, "runs_a_process": runs_a_process(c),
                                                          "estimate_s": estimate.predict(c)} for c in cells],
                          "stored": stored, "setup_s": setup, "estimate_s": total, "left_out": left_out}, indent=2))
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
    print(f"estimate: about {format_duration(total)} (rough, from the protocol: {p.repeats} process(es) per cell, "
          f"{p.warmup} warm-up + at least {p.min_iters} iterations and {p.min_time_s:g} s each; "
          f"{format_duration(setup)} of machine peak and equivalence gate)")
    if left_out:
        print(left_out)
    print("dry run: nothing measured, nothing stored, no run created")
    return 0


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
    axes = ("framework", "variant", "batch", "threads", "device", "data", "precision")
    shown = [a for a in axes if a in ("framework", "variant") or len({getattr(r, a) for r in every}) > 1]
    shown_as = {"precision": "precision_text"}
    fixed = [f"{a} {getattr(every[0], a)}" for a in axes if a not in shown] if every else []
    for model, rows in tables.items():
        scenarios = summary_scenarios(rows)
        title = model + (f"  ({', '.join(fixed)})" if fixed else "")
        table = Table(title=escape(title), title_justify="left")
        for col in shown:
            table.add_column(col)
        rated = [s for s in scenarios if not registry.of_stored(s).whole_dataset and any(r.throughput(s) for r in rows)]
        for s in scenarios:
            table.add_column(registry.of_stored(s).column, justify="right")
            if s in rated:  # each scenario's rate beside it: a forward and a training rate never share a column
                table.add_column(f"{s} samples/s", justify="right")
        for col in ("peak MiB", "verified"):
            table.add_column(col, justify="right")
        for r in rows:
            cols = []
            for s in scenarios:
                cols.append(r.text(s))
                if s in rated:
                    cols.append(r.throughput_text(s))
            mem = f"{r.peak_rss_mib:,.0f}" if r.peak_rss_mib else "–"
            table.add_row(*texts(*(getattr(r, shown_as.get(a, a)) for a in shown), *cols, mem,
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
    print_generation(console, res)
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
    p.add_argument("--precision", help="comma-separated precisions: fp32 (default), bf16, fp16, amp-bf16, amp-fp16, "
                                       "int8 (inference), tf32 (GPU); see docs/precision.md")
    add_protocol_flags(p)
    p.add_argument("--seed", type=int)
    p.add_argument("--epochs", type=int, help="convergence: epochs of training (default 10)")
    p.add_argument("--target-accuracy", type=float, dest="target_accuracy",
                   help="convergence: test accuracy whose time-to-reach is reported (default 0.95)")
    p.add_argument("--lr", type=float, help="convergence: learning rate (default: the paper's for the model)")
    p.add_argument("--latency-calls", type=int, dest="latency_calls",
                   help="latency: single calls timed per process (default 3500)")
    p.add_argument("--qps", type=float, help="loadgen-server: target queries per second (default: half of one "
                                             "stream's rate)")
    p.add_argument("--p99-ms", type=float, dest="p99_ms", help="loadgen-server: bound on the 99th percentile "
                                                               "latency in ms (default LoadGen's 100)")
    p.add_argument("--find-peak", action="store_true", dest="find_peak",
                   help="loadgen-server: search the highest QPS meeting the bound (LoadGen's FindPeakPerformance)")
    p.add_argument("--loadgen-min-duration", type=float, dest="loadgen_min_duration",
                   help="LoadGen's minimum run time in s (shorter than LoadGen's rule: the cell is marked so)")
    p.add_argument("--loadgen-min-queries", type=int, dest="loadgen_min_queries",
                   help="LoadGen's minimum query count (fewer than LoadGen's rule: the cell is marked so)")
    p.add_argument("--prompt-len", type=int, dest="prompt_len", help="generate: prompt tokens (default 128)")
    p.add_argument("--new-tokens", type=int, dest="new_tokens", help="generate: tokens generated (default 64)")
    p.add_argument("--generations", type=int, help="generate: timed generations per process (default 5)")
    p.add_argument("--ttft-ms", type=float, dest="ttft_ms",
                   help="generate-server: bound on the time to first token's p99 in ms (default LoadGen's 100)")
    p.add_argument("--tpot-ms", type=float, dest="tpot_ms",
                   help="generate-server: bound on the time per output token's p99 in ms (default LoadGen's 100)")
    p.add_argument("--data", "--dataset", dest="data",
                   help="fill batches from a real data set (digits, mnist, cifar10, imdb, ptb) "
                                  "instead of synthetic samples")
    p.add_argument("--data-dir", dest="data_dir", help="where the data set's files are (see docs/data.md)")
    p.add_argument("--resume", metavar="RUN_ID", help="finish a stored run: only missing cells are measured")
    p.add_argument("--dry-run", action="store_true", dest="dry_run",
                   help="list the cells and an estimate of the time they take; measure and store nothing")
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

