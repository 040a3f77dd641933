"""``dlbench check``: every stored row a reader would set aside as damaged (see :mod:`dlbench.storage.damage`),
in every table of the store (:data:`dlbench.storage.store.TABLES`): run by run (the run, its environment, gate
records, machine peaks, lease, cells, their metrics and samples), then the bisections and the rows that name no
run or cell. Reads only (the database is opened read-only); exit 0 when nothing is damaged, 1 otherwise."""

from __future__ import annotations

import argparse
import json

from dlbench.cli.common import console
from dlbench.storage.store import DEFAULT_DB, TABLES, Store


def check_database(store: Store) -> list[dict]:
    """Each run with what reading it set aside (``damage``: one line each) and how many cells read well."""
    from dlbench.report.results import load_run

    out = []
    for run in store.list_runs():
        res = load_run(store, run["id"])
        out.append({"run": run["id"], "cells_read": len(res.cells), "damage": res.damaged})
    return out


def check_elsewhere(store: Store) -> list[str]:
    """What is damaged outside the runs: bisections that do not read back, and rows that name no run or cell."""
    from dlbench.report.bisection import read_stored

    _, damaged = read_stored(store.bisections())
    return [f"bisection {i} set aside: {why}" for i, why in damaged.items()] + store.orphans()


def cmd_check(args: argparse.Namespace) -> int:
    store = Store(args.db, read_only=True)
    try:
        found = check_database(store)
        elsewhere = check_elsewhere(store)
    finally:
        store.close()
    damaged = sum(len(r["damage"]) for r in found) + len(elsewhere)
    if args.json:
        print(json.dumps({"db": args.db, "tables": list(TABLES), "runs": found, "elsewhere": elsewhere,
                          "damaged": damaged}, indent=2))
        return 1 if damaged else 0
    for r in found:
        status = "ok" if not r["damage"] else f"{len(r['damage'])} damaged row(s) or field(s) set aside"
        console.print(f"run {r['run']}: {r['cells_read']} cell(s) read, {status}", highlight=False, markup=False,
                      soft_wrap=True)
        for note in r["damage"]:
            console.print(f"  {note}", highlight=False, markup=False, soft_wrap=True)
    for note in elsewhere:
        console.print(note, highlight=False, markup=False, soft_wrap=True)
    console.print(f"{len(found)} run(s) and tables {', '.join(TABLES)} checked in {args.db}: "
                  + (f"{damaged} damaged row(s)" if damaged else "nothing damaged"), highlight=False, markup=False,
                  soft_wrap=True)  # one line each, whatever the path's length: scripts read them
    return 1 if damaged else 0


def register(sub) -> None:
    p = sub.add_parser("check", help="list stored rows that readers set aside as damaged, in every table (reads only)")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_check)
