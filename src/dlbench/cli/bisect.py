"""``dlbench bisect``: the first release of a framework that made a figure slower (or, ``--faster``,
faster) or broke the gate
(:mod:`dlbench.engines.bisect`); ``--list`` shows the bisections stored in the database. Exit 0 when the
first bad release is named, 1 when the bisection ends otherwise (no change, inconclusive, ambiguous
between skipped releases, an end that cannot be measured), 2 on bad input."""

from __future__ import annotations

import argparse
import json
import sys
from datetime import UTC, datetime

from rich.markup import escape
from rich.table import Table

from dlbench import models
from dlbench.cli.common import console, note_damage, texts
from dlbench.core.errors import UsageError
from dlbench.engines import bisect
from dlbench.envs import releases, versions
from dlbench.scenarios import registry
from dlbench.storage.store import DEFAULT_DB


def _settings(args: argparse.Namespace) -> bisect.Settings:
    for flag in ("framework", "good", "bad", "model"):
        if not getattr(args, flag):
            raise UsageError(f"bisect: --{flag} is required (dlbench bisect --framework jax --good 0.4.38 --bad 0.10.2 "
                             "--model fcn-r --scenario train_step)")
    framework = args.framework
    if versions.SEP in framework:
        raise UsageError(f"--framework {framework}: name the framework alone; the releases are --good and --bad")
    try:
        for end in (args.good, args.bad):
            versions.split(f"{framework}=={end}")
        versions.check(framework, args.good)
        versions.check(framework, args.bad)
    except versions.SpecError as exc:
        raise UsageError(str(exc)) from None
    if args.model not in models.list_models():
        raise UsageError(f"unknown model {args.model!r}; known: {', '.join(models.list_models())}")
    if args.gate:
        if args.scenario or args.faster:
            raise UsageError("--gate bisects the equivalence gate, which times nothing: leave --scenario and "
                             "--faster out")
    else:
        if not args.scenario:
            raise UsageError("bisect: --scenario is required (or --gate for the first release that fails the gate)")
        if args.scenario not in registry.per_batch():
            raise UsageError(f"--scenario {args.scenario}: bisect times a per-batch scenario "
                             f"({', '.join(registry.per_batch())})")
    for flag, value, low in (("--threads", args.threads, 1), ("--batch", args.batch, 1), ("--repeats", args.repeats, 2),
                             ("--max-repeats", args.max_repeats, 2)):
        if value is not None and value < low:
            raise UsageError(f"{flag} must be at least {low}, got {value}")
    if args.max_repeats < args.repeats:
        raise UsageError(f"--max-repeats {args.max_repeats} is below --repeats {args.repeats}")
    if not 0 < args.threshold < 100:
        raise UsageError(f"--threshold is a percentage between 0 and 100, got {args.threshold}")
    protocol = {k: v for k, v in (("warmup", args.warmup), ("min_iters", args.min_iters), ("min_time_s", args.min_time),
                                  ("timeout_s", args.timeout)) if v is not None}
    return bisect.Settings(framework=framework, good=args.good, bad=args.bad, model=args.model,
                           scenario=args.scenario, batch=args.batch, threads=args.threads, variant=args.variant,
                           threshold=args.threshold / 100, change="faster" if args.faster else "slower",
                           gate=args.gate, repeats=args.repeats,
                           max_repeats=args.max_repeats, protocol=protocol, pre=args.pre)


def _ratio(t: dict | None) -> str:
    if not t:
        return ""
    return (f"{t['ratio']:.3f}x [{t['ci_low']:.3f}, {t['ci_high']:.3f}] (p={t['p']:.2g}; "
            f"{t['median_ms'][0]:.4g} -> {t['median_ms'][1]:.4g} ms, {t['processes'][0]}/{t['processes'][1]} processes)")


def summary(b: bisect.Bisection) -> list[str]:
    """The bisection's outcome in lines: the release, its ratio with the interval, skips, builds."""
    s, r = b.settings, b.result
    fw = s.framework
    lines = []
    if b.status == "found":
        what = "fails the gate" if s.gate else f"is the first {s.change} by more than {s.threshold:.0%}"
        lines.append(f"first bad release: {fw} {r['first_bad']} {what} (last good: {r['last_good']})")
        if r.get("ratio"):
            lines.append(f"  {fw} {r['first_bad']} / {r['last_good']}: {_ratio(r['ratio'])}, {s.figure}")
    elif b.status == "ambiguous":
        lines.append(f"ambiguous: the first bad release is one of {', '.join(r['candidates'])} (every release between "
                     f"{r['last_good']} good and {r['first_bad']} bad was skipped)")
    else:
        lines.append(f"{b.status}: {r.get('message', '')}")
    for sk in r.get("skipped", []) or [{"version": st.version, "reason": st.reason} for st in b.skipped]:
        lines.append(f"  skipped {fw} {sk['version']}: {sk['reason']}")
    built = list(dict.fromkeys(b.built))  # distinct: a record saved before a resume could count one twice
    lines.append(f"environments used: {len(set(b.used))}; built by this bisection: {len(built)}"
                 + (f" ({', '.join(built)})" if built else "")
                 + (f"; could not be installed: {', '.join(b.not_installable)}" if b.not_installable else "")
                 + f"; {len(b.steps)} release(s) judged in {b.seconds / 60:.1f} min; bisection {b.id}")
    return lines


def _list(db: str, as_json: bool) -> int:
    found, damaged = bisect.stored(db)
    if as_json:  # the damaged ones on stderr, the list as it always was on stdout
        note_damage([f"bisection {i} set aside: {why}" for i, why in damaged.items()])
        print(json.dumps([b.to_dict() for b in found], indent=2))
        return 0
    table = Table(title=f"bisections in {escape(db)}", title_justify="left")
    for col in ("id", "started (UTC)", "framework", "range", "figure", "status", "result", "builds"):
        table.add_column(col)
    for b in found:
        s, r = b.settings, b.result
        result = (f"{r['first_bad']}" + (f" ({r['ratio']['ratio']:.3f}x)" if r.get("ratio") else "")
                  if b.status == "found" else ", ".join(r.get("candidates", [])) or r.get("message", "")[:60])
        table.add_row(*texts(b.id, datetime.fromtimestamp(b.started_at, UTC).strftime("%Y-%m-%d %H:%M"), s.framework,
                             f"{s.good} .. {s.bad} ({len(b.releases)})", s.figure, b.status, result, len(b.built)))
    console.print(table)
    for i, why in damaged.items():
        console.print(f"bisection {i}: damaged, set aside: {why}", highlight=False, markup=False)
    if not found and not damaged:
        console.print("no bisections stored", highlight=False)
    return 0


def _dry_run(settings: bisect.Settings, as_json: bool) -> int:
    p = bisect.plan(settings)
    if as_json:
        print(json.dumps(p, indent=2))
        return 0
    fw = settings.framework
    console.print(escape(f"{len(p['releases'])} {fw} releases pip lists from {settings.good} to {settings.bad}: "
                         f"{', '.join(p['releases'])}"), highlight=False)
    todo = [v for v in p["releases"] if v not in p["ready"]]
    console.print(escape(f"with an environment already: {', '.join(p['ready']) or 'none'}; to build when a step "
                         f"needs it: {', '.join(todo) or 'none'}"), highlight=False)
    console.print(escape(f"{settings.figure}: about {p['steps_after_ends']} step(s) after the ends, "
                         f"{p['builds_at_most']} environments at most without skips (each skip costs one more)"),
                  highlight=False)
    return 0


def cmd_bisect(args: argparse.Namespace) -> int:
    def say(line: str) -> None:
        print(line, file=sys.stderr)

    if args.list:
        if args.resume or args.framework:
            raise UsageError("--list takes only --db and --json")
        return _list(args.db, args.json)
    try:
        if args.resume:
            if args.framework or args.good or args.bad or args.model or args.scenario or args.faster:
                raise UsageError(f"--resume {args.resume} goes on with the stored settings; it takes no others")
            b = bisect.resume(args.resume, args.db, say)
        elif args.dry_run:
            return _dry_run(_settings(args), args.json)
        else:
            b = bisect.start(_settings(args), args.db, say)
    except versions.SpecError as exc:
        raise UsageError(str(exc)) from None
    except (bisect.BisectError, releases.ReleaseError) as exc:
        print(f"dlbench: bisect: {exc}", file=sys.stderr)
        return 1
    if args.json:
        print(json.dumps(b.to_dict(), indent=2))
    else:
        for line in summary(b):
            console.print(escape(line), highlight=False)
    return 0 if b.status == "found" else 1


def register(sub) -> None:
    p = sub.add_parser("bisect", help="the first release of a framework that made a figure slower (or failed the gate)")
    p.add_argument("--framework", help="a pinnable framework: jax, tensorflow, onnxruntime, torch")
    p.add_argument("--good", help="a release without the change (like 0.4.38)")
    p.add_argument("--bad", help="a later release with it (like 0.10.2)")
    p.add_argument("--model")
    p.add_argument("--scenario", help="the timed scenario (forward, gradient, train_step)")
    p.add_argument("--batch", type=int, help="batch size (default: the model's)")
    p.add_argument("--threads", type=int, default=1, help="thread count (default 1)")
    p.add_argument("--variant", help="the framework's variant (default: its first)")
    p.add_argument("--threshold", type=float, default=5.0,
                   help="a change smaller than this percentage is not one (default 5)")
    p.add_argument("--gate", action="store_true", help="find the first release that fails the equivalence gate")
    p.add_argument("--faster", action="store_true",
                   help="find the first release that made the figure faster (an improvement) instead of slower")
    p.add_argument("--repeats", type=int, default=3, help="processes per release per measurement (default 3)")
    p.add_argument("--max-repeats", type=int, default=12, dest="max_repeats",
                   help="processes per release before a step is called inconclusive (default 12)")
    p.add_argument("--warmup", type=int)
    p.add_argument("--min-iters", type=int, dest="min_iters")
    p.add_argument("--min-time", type=float, dest="min_time", help="seconds of sampling per process")
    p.add_argument("--timeout", type=float, help="seconds per cell process")
    p.add_argument("--pre", action="store_true", help="pre-releases too (rc, beta)")
    p.add_argument("--dry-run", action="store_true", dest="dry_run",
                   help="list the releases and the environments to build; measure nothing")
    p.add_argument("--resume", metavar="ID", help="go on with an interrupted bisection (see --list)")
    p.add_argument("--list", action="store_true", help="show the bisections stored in the database")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_bisect)
