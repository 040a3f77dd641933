"""``dlbench survey``: the qualitative comparison (see :mod:`dlbench.survey`)."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from rich.markup import escape

from dlbench.cli.common import console, split_list
from dlbench.core.errors import UsageError


def cmd_survey(args: argparse.Namespace) -> int:
    if args.refresh_popularity:
        return _refresh(args)
    if args.check_installable:
        from dlbench.survey.installable import check_all

        data = check_all(split_list(args.framework) or None, progress=lambda m: print(m, file=sys.stderr))
        if args.json:
            print(json.dumps(data, indent=2))
        else:
            for key, r in data["frameworks"].items():
                detail = r.get("file") or r.get("error") or r.get("note", "")
                print(f"{key:15} {r['status']:18} {detail}")
        return 0

    from dlbench.survey import collect, resolve_keys
    from dlbench.survey.output import check_out, write
    from dlbench.survey.tables import markdown

    try:
        resolve_keys(split_list(args.framework) or None)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    if args.out:
        check_out(Path(args.out))  # before the survey runs: a bad --out is known now
    quiet = args.json
    data = collect(split_list(args.framework) or None, live=not args.no_live, measure_setup=args.measure_setup,
                   progress=None if quiet else lambda m: console.print(f"[dim]{escape(m)}[/]", highlight=False))
    if args.out:
        paths = write(data, Path(args.out))
        if not quiet:
            console.print(f"wrote {len(paths)} files to {args.out}", highlight=False, markup=False)
    if args.json:
        print(json.dumps(data, indent=2, default=str))
    elif not args.out:
        print(markdown(data))
    failed = [(k, r) for k, cells in data["features"]["matrix"].items() for r, c in cells.items()
              if c["status"] == "failed"]
    return 1 if failed else 0


def _refresh(args: argparse.Namespace) -> int:
    from dlbench.survey.popularity import OfflineError, refresh

    path = Path(args.popularity_file) if args.popularity_file else None
    try:
        data = refresh(path) if path else refresh()
    except OfflineError as exc:
        print(f"dlbench survey: popularity not refreshed, snapshot unchanged: {exc}", file=sys.stderr)
        return 1
    print(f"popularity snapshot refreshed ({data['date']})")
    return 0


def register(sub) -> None:
    p = sub.add_parser("survey", help="qualitative comparison: features, API coverage, zoo, setup, popularity")
    p.add_argument("--framework", help="comma-separated survey rows (default: all)")
    p.add_argument("--json", action="store_true", help="print everything as JSON")
    p.add_argument("--out", help="directory for Markdown, CSV and JSON tables")
    p.add_argument("--no-live", action="store_true", help="skip the live checks (cells stay declared)")
    p.add_argument("--measure-setup", action="store_true",
                   help="install each framework into a scratch venv and measure sizes and times (slow, uses the network)")
    p.add_argument("--refresh-popularity", action="store_true",
                   help="fetch today's GitHub numbers and rewrite the popularity snapshot (needs network)")
    p.add_argument("--popularity-file", help=argparse.SUPPRESS)
    p.add_argument("--check-installable", action="store_true",
                   help="try pip download --no-deps for each of the papers' frameworks and record the outcome")
    p.set_defaults(func=cmd_survey)

