"""``dlbench explain``: which parts of a model account for the gap between two frameworks (see
:mod:`dlbench.report.layers`)."""

from __future__ import annotations

import argparse
import json

from dlbench.cli_common import names, note_damage
from dlbench.errors import UsageError
from dlbench.store import DEFAULT_DB


def cmd_explain(args: argparse.Namespace) -> int:
    from dlbench import api
    from dlbench.report.layers import explain

    frameworks = names(args.framework, "--framework") or []
    if len(frameworks) != 2:
        raise UsageError(f"--framework names the two frameworks to compare (A,B), got {args.framework!r}")
    if frameworks[0] == frameworks[1]:
        raise UsageError(f"--framework names one framework twice ({args.framework!r}): name two to compare (A,B)")
    if args.top < 1:
        raise UsageError(f"--top must be a positive integer, got {args.top}")
    if args.threads is not None and args.threads < 1:
        raise UsageError(f"--threads must be a positive integer, got {args.threads}")
    res = api.results(args.run_id, args.db)
    note_damage(res.damaged)
    found = explain(res, frameworks[0], frameworks[1], args.model, args.scenario, args.threads)
    if args.json:
        print(json.dumps({"run_id": res.run_id, "explanations": [e.to_dict() for e in found]}, indent=2, default=str))
    else:
        print("\n\n".join(e.text(top=args.top) for e in found))
    return 0


def register(sub) -> None:
    p = sub.add_parser("explain", help="which parts of a model account for the gap between two frameworks "
                                       "(from a run with --scenario layers)")
    p.add_argument("run_id", nargs="?", help="a stored run (default: the latest)")
    p.add_argument("--framework", required=True, help="A,B: the gap is B - A")
    p.add_argument("--model", required=True)
    p.add_argument("--scenario", default="forward", choices=("forward", "gradient"))
    p.add_argument("--threads", type=int, help="only this thread count (default: each the run has)")
    p.add_argument("--top", type=int, default=5, help="parts listed (default 5)")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_explain)
