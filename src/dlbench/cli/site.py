"""``dlbench site DIR``: the results database as static pages (:mod:`dlbench.report.site`)."""

from __future__ import annotations

import argparse

from rich.markup import escape

from dlbench.cli.common import console, note_damage
from dlbench.storage.store import DEFAULT_DB


def cmd_site(args: argparse.Namespace) -> int:
    from dlbench.report.site import write_site

    pages = write_site(args.db, args.dir, title=args.title, on_damage=note_damage)
    console.print(f"{len(pages)} page(s) written to {escape(args.dir)}/ (open {escape(str(pages[0]))})",
                  highlight=False)
    return 0


def register(sub) -> None:
    p = sub.add_parser("site", help="write the database's history as static pages (trend plots, steps, bisections)")
    p.add_argument("dir", help="the directory to write (new, empty, or one dlbench site wrote before)")
    p.add_argument("--title", default="dlbench results", help="the index page's title")
    p.add_argument("--db", default=str(DEFAULT_DB))
    p.set_defaults(func=cmd_site)
