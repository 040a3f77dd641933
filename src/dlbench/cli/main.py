"""The ``dlbench`` command line: parses, calls the library, prints. Exit 0 ok, 1 some checks or
cells failed, 2 bad usage (one line on stderr, never a traceback).

Text from data (framework, model and device names, run ids, reasons, paths) reaches the terminal
through rich as :func:`escape`-d markup or as :class:`~rich.text.Text`: a ``[/]`` or ``[link=...]`` in
a name is printed, never interpreted."""

from __future__ import annotations

import argparse
import json
import os
import sqlite3
import sys

from rich.markup import escape
from rich.table import Table
from rich.text import Text

from dlbench.cli import bisect as cli_bisect
from dlbench.cli import check as cli_check
from dlbench.cli import dist as cli_dist
from dlbench.cli import envs as cli_envs
from dlbench.cli import explain as cli_explain
from dlbench.cli import export_model as cli_export_model
from dlbench.cli import history as cli_history
from dlbench.cli import probe as cli_probe
from dlbench.cli import report as cli_report
from dlbench.cli import run as cli_run
from dlbench.cli import site as cli_site
from dlbench.cli import survey as cli_survey
from dlbench.cli.common import Parser, console, counts, names, texts
from dlbench.core import interrupt
from dlbench.core.errors import UsageError
from dlbench.storage.store import explain


# --- list -------------------------------------------------------------------------------
def cmd_list(args: argparse.Namespace) -> int:
    if args.what == "models":
        from dlbench.models import get_model, list_models

        rows = []
        for name in list_models():
            spec = get_model(name)
            rows.append({"name": name, "params": spec.param_count, "gflops_per_sample": spec.flops_per_sample / 1e9,
                         "input_shape": list(spec.input.shape), "default_batch": spec.default_batch,
                         "source": spec.source, "description": spec.description})
        if args.json:
            print(json.dumps(rows, indent=2))
            return 0
        table = Table(title="models")
        for col in ("name", "params", "GFLOPs/sample", "input", "batch", "source"):
            table.add_column(col, justify="right" if col in ("params", "GFLOPs/sample", "batch") else "left")
        for r in rows:
            table.add_row(*texts(r["name"], f"{r['params']:,}", f"{r['gflops_per_sample']:.4f}",
                                 "x".join(map(str, r["input_shape"])), r["default_batch"], r["source"]))
        console.print(table)
        return 0
    from dlbench.frameworks import list_frameworks

    rows = list_frameworks()
    if args.json:
        print(json.dumps(rows, indent=2))
        return 0
    table = Table(title="frameworks")
    for col in ("name", "installed", "version", "variants", "devices", "description"):
        table.add_column(col)
    for r in rows:
        where = "yes (env)" if r.get("python") else "yes"
        table.add_row(*texts(r["name"], where if r["installed"] else "no", r["version"] or "-",
                             ",".join(r["variants"]), ",".join(r["devices"]), r["description"]))
    console.print(table)
    return 0


# --- verify -----------------------------------------------------------------------------
def cmd_verify(args: argparse.Namespace) -> int:
    from dlbench.api import verify

    threads = counts(args.threads, "--threads")
    if threads is not None and len(threads) != 1:
        raise UsageError(f"--threads: verify takes one thread count, got {args.threads!r}")
    results = verify(models=names(args.model, "--model"), frameworks=names(args.framework, "--framework"),
                     variants=names(args.variant, "--variant"), device=args.device,
                     threads=None if threads is None else threads[0], timeout_s=args.timeout,
                     precisions=names(args.precision, "--precision"), progress=lambda s: print(s, file=sys.stderr),
                     optimizers=names(args.optimizer, "--optimizer"))
    if args.json:
        print(json.dumps([r.to_dict() for r in results], indent=2))
    else:
        table = Table(title="equivalence gate")
        quality = any(r.quality for r in results)  # a trained decoder's figures on held-out text (gate/quality.py)
        for col in ("model", "framework", "variant", "precision", "params (spec / framework)", "forward err",
                    "gradient err", "update err", *(("KL / top-1 (held-out text)",) if quality else ()), "verdict"):
            table.add_column(col)
        for r in results:
            fw = "-" if r.framework_params is None else f"{r.framework_params:,}"
            extra = f" (+{r.params_extra:,} documented)" if r.params_extra else ""
            verdict = {"pass": Text("pass", "green"), "unsupported": Text("unsupported", "yellow")}.get(
                r.verdict, Text("FAIL", "red"))
            table.add_row(*texts(r.model, r.framework, r.variant, r.precision, f"{r.spec_params:,} / {fw}{extra}",
                                 _fmt_err(r.forward_error), _fmt_err(r.gradient_error), _fmt_err(r.update_error),
                                 *((_fmt_quality(r.quality),) if quality else ()), verdict))
        console.print(table)
        for r in results:
            if r.reason:
                console.print(f"[bold]{escape(f'{r.model} / {r.framework} / {r.variant} / {r.precision}')}[/]: "
                              f"{escape(r.reason)}",
                              highlight=False)
    return 0 if all(r.verdict in ("pass", "unsupported") for r in results) else 1


def _fmt_err(value: float | None) -> str:
    return "-" if value is None else f"{value:.1e}"


def _fmt_quality(figures: dict) -> str:
    return f"{figures['kl']:.1e} / {figures['top1']:.2%}" if figures else "-"


# --- main -------------------------------------------------------------------------------
def build_parser() -> Parser:
    parser = Parser(prog="dlbench", description="Benchmark deep-learning frameworks on the same models.")
    sub = parser.add_subparsers(dest="command", required=True, parser_class=Parser)

    p = sub.add_parser("list", help="list models or frameworks")
    p.add_argument("what", choices=("models", "frameworks"))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_list)

    p = sub.add_parser("verify", help="check every framework computes the spec's function")
    p.add_argument("--model", help="comma-separated models (default: all)")
    p.add_argument("--framework", help="comma-separated frameworks (default: all installed)")
    p.add_argument("--variant", help="comma-separated variants, or 'all' (default: each framework's first)")
    p.add_argument("--device", default="cpu", help="cpu (default), cuda or cuda:N where the framework has it")
    p.add_argument("--threads", help="one thread count, 'all' or 'half' of the cores (default: the framework's)")
    p.add_argument("--timeout", type=float, default=1800.0, help="seconds per framework")
    p.add_argument("--precision", help="comma-separated precisions (default fp32; docs/precision.md)")
    p.add_argument("--optimizer", help="optimisers whose update the gate checks: sgd,adamw (default both)")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_verify)

    for register in COMMANDS:
        register(sub)
    return parser


#: the other verbs, by module, in the order ``--help`` lists them
COMMANDS = (cli_run.register, cli_dist.register, cli_report.register, cli_probe.register, cli_explain.register,
            cli_envs.register, cli_survey.register, cli_history.register, cli_check.register, cli_bisect.register,
            cli_site.register, cli_export_model.register)


def warn_broken_plugins() -> None:
    """One line per installed plug-in that could not be registered: the built-ins still work, and a
    command that names the plug-in fails with that line (exit 2)."""
    from dlbench.frameworks import BROKEN as frameworks_broken
    from dlbench.scenarios.registry import BROKEN as scenarios_broken

    for exc in (*frameworks_broken.values(), *scenarios_broken.values()):
        print(f"dlbench: warning: {exc}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    args = None
    warn_broken_plugins()
    try:
        args = build_parser().parse_args(argv)
        return args.func(args)
    except UsageError as exc:
        print(f"dlbench: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:  # Ctrl-C, or SIGTERM during a run (dlbench.core.interrupt)
        line, code = interrupt.explain(exc)
        print(f"dlbench: {line}", file=sys.stderr)
        return code
    except sqlite3.Error as exc:
        db = vars(args).get("db") if args is not None else None  # not every verb has --db
        print(f"dlbench: error: database{f' {db}' if db else ''}: {explain(exc)}", file=sys.stderr)
        return 2
    except Exception as exc:  # a bug of ours: one line, the traceback only on request
        if os.environ.get("DLBENCH_DEBUG"):
            raise
        print(f"dlbench: internal error: {type(exc).__name__}: {exc} (set DLBENCH_DEBUG=1 for the traceback)",
              file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
