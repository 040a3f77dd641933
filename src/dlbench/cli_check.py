"""``dlbench check``: every stored row a reader would set aside as damaged (see :mod:`dlbench.damage`),
run by run. Reads only (the database is opened read-only); exit 0 when nothing is damaged, 1 otherwise."""

from __future__ import annotations

import argparse
import json

from dlbench.cli_common import console
from dlbench.store import DEFAULT_DB, Store


def check_database(store: Store) -> list[dict]:
    """Each run with what reading it set aside (``damage``: one line each) and how many cells read well."""
    from dlbench.results import load_run

    out = []
    for run in store.list_runs():
        before = len(store.damage)
        res = load_run(store, run["id"])
        out.append({"run": run["id"], "cells_read": len(res.cells), "damage": store.damage[before:]})
    return out


def cmd_check(args: argparse.Namespace) -> int:
    store = Store(args.db, read_only=True)
    try:
        found = check_database(store)
    finally:
        store.close()
    damaged = sum(len(r["damage"]) for r in found)
    if args.json:
        print(json.dumps({"db": args.db, "runs": found, "damaged": damaged}, indent=2))
        return 1 if damaged else 0
    for r in found:
        status = "ok" if not r["damage"] else f"{len(r['damage'])} damaged row(s) set aside"
        console.print(f"run {r['run']}: {r['cells_read']} cell(s) read, {status}", highlight=False, markup=False)
        for note in r["damage"]:
            console.print(f"  {note}", highlight=False, markup=False)
    console.print(f"{len(found)} run(s) checked in {args.db}: " + (f"{damaged} damaged row(s)" if damaged else
                                                                     "nothing damaged"), highlight=False, markup=False)
    return 1 if damaged else 0


def register(sub) -> None:
    p = sub.add_parser("check", help="list stored rows that readers set aside as damaged (reads only)")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)
