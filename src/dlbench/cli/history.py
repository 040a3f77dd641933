"""``dlbench history``: one figure (model, scenario, batch, threads, framework) across the framework's
versions and across every stored run, by date and host, with a change marked only where the test
``compare`` uses finds one (see :mod:`dlbench.report.versions`); ``--changes`` also finds the step
changes over the whole history (:mod:`dlbench.report.changes`)."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from rich.markup import escape
from rich.table import Table

from dlbench.cli.common import console, counts, names, note_damage
from dlbench.core.errors import UsageError
from dlbench.core.outputs import OutputDir
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import get_precision
from dlbench.envs import versions
from dlbench.storage.store import DEFAULT_DB, Store


def _one(values: list | None, flag: str) -> str | int | None:
    if values is not None and len(values) != 1:
        raise UsageError(f"{flag}: history follows one figure, got {', '.join(map(str, values))}")
    return None if values is None else values[0]


def cmd_history(args: argparse.Namespace) -> int:
    from dlbench.report.versions import history, series_figure, series_table

    framework = _one(names(args.framework, "--framework"), "--framework")
    model = _one(names(args.model, "--model"), "--model")
    scenario = _one(names(args.scenario, "--scenario"), "--scenario")
    if framework is None or model is None or scenario is None:
        raise UsageError("history: name the figure: --framework NAME --model NAME --scenario NAME "
                         "(and --batch, --threads where the runs hold several)")
    batch = _one(counts(args.batch, "--batch"), "--batch")
    threads = _one(counts(args.threads, "--threads"), "--threads")
    if isinstance(batch, str) or isinstance(threads, str):
        raise UsageError("history: --batch and --threads take the stored numbers (like 64, 2)")
    out = Path(args.out) if args.out else None
    if out is not None and out.exists() and not out.is_dir():
        raise UsageError(f"--out {out} is a file (it names a directory)")
    try:
        base, _ = versions.split(str(framework))  # every version of it: the name's version only picks the framework
    except versions.SpecError as exc:
        raise UsageError(str(exc)) from None
    store = Store(args.db, create=False, read_only=True)
    try:
        found = history(store, base, model, scenario, batch, threads, args.variant, get_precision(args.precision).name)
    finally:
        store.close()
    note_damage(store.damage)
    if not found:
        raise UsageError(f"no stored timed cell of {base} {model} {scenario}"
                         + (f" batch {batch}" if batch else "") + (f" threads {threads}" if threads else "")
                         + f" in {args.db}")
    flagged = [p for s in found for p in s.flagged]
    steps = None
    if args.changes:
        from dlbench.report.changes import detect_series

        steps = [detect_series(s) for s in found]
        flagged += [c for cs in steps for c in cs if c.verdict == "slower"]
    if args.json:
        print(json.dumps([{"figure": s.title, "points": [
            {"run_id": p.run_id, "date": p.date, "host": p.host, "framework": p.framework, "version": p.version,
             "median_ms": p.cell.time_ms.median, "ci_low_ms": p.cell.time_ms.ci_low,
             "ci_high_ms": p.cell.time_ms.ci_high, "change": p.change_text or None,
             "change_pct": p.change.change_pct if p.change else None,
             "p_value": p.change.p_value if p.change else None,
             **({"step": {c.index: c.text for c in steps[k]}.get(i)} if steps is not None else {})}
            for i, p in enumerate(s.points)],
            **({"changes": [c.to_dict() for c in steps[k]]} if steps is not None else {})}
            for k, s in enumerate(found)], indent=2))
    else:
        for k, s in enumerate(found):
            t = series_table(s, across_runs=True, changes=steps[k] if steps is not None else None)
            table = Table(title=escape(t.title), title_justify="left")
            for c in t.columns:
                table.add_column(c.label)
            for row in t.rows:
                table.add_row(*(escape(v.text) for v in row),
                              style="red" if row[-1].text.startswith("slower") else
                              "green" if row[-1].text.startswith("faster") else None)
            console.print(table)
            if steps is not None and steps[k]:
                console.print(_changes_table(steps[k], s.title))
        console.print("a change is marked when p < 0.01 (process-level test, as dlbench compare) and it is "
                      f"more than 5%; {len(flagged)} significant slowdown(s)", highlight=False)
        if steps is not None:
            console.print(f"{sum(map(len, steps))} step change(s) over the whole history (segmentation, then each "
                          "step tested with the point as unit: docs/bisect.md)", highlight=False)
    if out is not None:
        from dlbench.report.plots import _svg

        OutputDir(out, db=args.db).write(
            {f"history-{k + 1}.svg": _svg(series_figure(s, across_runs=True,
                                                        changes=steps[k] if steps is not None else None))
             for k, s in enumerate(found)})
        if not args.json:
            console.print(f"plot(s) written to {escape(str(out))}/", highlight=False)
    return 1 if flagged and args.fail_on_slowdown else 0


def _changes_table(changes: list, title: str) -> Table:
    table = Table(title=escape(f"step changes in {title}"), title_justify="left")
    for col in ("between", "before ms", "after ms", "after/before [95% CI]", "p", "points before/after", "verdict"):
        table.add_column(col)
    for c in changes:
        table.add_row(*(escape(v) for v in (
            f"{c.before} -> {c.after}", f"{c.median_before_ms:.4g}", f"{c.median_after_ms:.4g}",
            f"{c.ratio:.3f} [{c.ci_low:.3f}, {c.ci_high:.3f}]", f"{c.p_value:.2g}",
            f"{c.points_before}/{c.points_after}", c.verdict)),
            style="red" if c.verdict == "slower" else "green")
    return table


def register(sub) -> None:
    p = sub.add_parser("history", help="one figure across framework versions and stored runs (table, plot)")
    p.add_argument("--framework", help="the framework (any of its versions: jax, jax==0.4.38 follow the same)")
    p.add_argument("--model")
    p.add_argument("--scenario")
    p.add_argument("--batch", help="batch size (needed where the runs hold several)")
    p.add_argument("--threads", help="thread count (needed where the runs hold several)")
    p.add_argument("--precision", default=DEFAULT_PRECISION, help="the figure's precision (default fp32; docs/precision.md)")
    p.add_argument("--variant", help="one variant (default: each, as its own series)")
    p.add_argument("--out", metavar="DIR", help="also write each series' plot as DIR/history-N.svg")
    p.add_argument("--changes", action="store_true",
                   help="also find step changes over the whole history, each with its size and significance")
    p.add_argument("--fail-on-slowdown", action="store_true", dest="fail_on_slowdown",
                   help="exit 1 when a point is significantly slower than the one before it (or, with --changes, "
                        "a step change is a slowdown)")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_history)
