"""``dlbench envs create|list|remove|lock``: per-framework virtual environments (see :mod:`dlbench.envs`)."""

from __future__ import annotations

import argparse
import json
import os
import sys

from rich.markup import escape
from rich.table import Table

from dlbench import envs
from dlbench.cli.common import console, split_list, texts
from dlbench.core.errors import UsageError
from dlbench.frameworks import UnknownFrameworkError, framework_info


def cmd_envs(args: argparse.Namespace) -> int:
    from dlbench.frameworks import FRAMEWORKS

    if args.action == "list":
        records = envs.list_envs()
        if args.json:
            print(json.dumps({"dir": str(envs.envs_dir()), "recipes": envs.recipes(),
                              "envs": [r.to_dict() for r in records]}, indent=2))
            return 0
        table = Table(title=escape(f"framework environments in {envs.envs_dir()}"))
        for col in ("framework", "version", "python", "numpy", "created", "build s"):
            table.add_column(col)
        for r in records:
            table.add_row(*texts(r.framework, r.framework_version or "-", f"{r.python_version} ({r.python})",
                                 r.versions.get("numpy", "-"), r.created, f"{r.create_seconds:.0f}"))
        console.print(table)
        missing = [n for n in envs.recipes() if n not in {r.framework for r in records}]
        if missing:
            console.print(f"recipes without an environment: {', '.join(missing)} (dlbench envs create NAME)",
                          highlight=False, markup=False)
        return 0

    names = split_list(args.framework)
    if names == ["all"]:
        names = envs.recipes()
    if not names:
        raise UsageError(f"dlbench envs {args.action}: name a framework ({', '.join(envs.recipes())}, or all)")
    for name in names:
        if any(ch in name for ch in "=<>!~"):  # a version: any release of a pinnable framework (dlbench.envs.versions)
            try:
                framework_info(name)
            except UnknownFrameworkError as exc:
                raise UsageError(str(exc)) from None
        elif name not in FRAMEWORKS or name not in envs.recipes():
            raise UsageError(f"no environment recipe for {name!r}; recipes: {', '.join(envs.recipes())} "
                             f"(or a version: jax==0.4.38)")
    def say(line: str) -> None:
        console.print(line, highlight=False, markup=False)

    if args.action == "remove":
        for name in names:
            say(f"{name}: {'removed' if envs.remove(name, progress=say) else 'no environment'}")
        return 0
    if args.action == "lock":
        versions = [n for n in names if n not in envs.recipes()]
        if versions:
            raise UsageError(f"dlbench envs lock: only recipes have a lock ({', '.join(envs.recipes())}), "
                             f"not {', '.join(versions)}")
        for name in names:
            try:
                written = envs.lock(name, progress=say)
            except envs.EnvError as exc:
                print(f"dlbench: {name}: {exc}", file=sys.stderr)
                return 1
            say(f"{name}: wrote {', '.join(str(p) for p in written)}")
        return 0
    if args.python is not None and not (os.path.isfile(args.python) and os.access(args.python, os.X_OK)):
        raise UsageError(f"--python {args.python}: no such interpreter (not an executable file)")
    names = [framework_info(n).name for n in names]  # a version in its normal spelling (jax==0.4 is jax==0.4.0)
    code = 0
    for name in names:
        try:
            envs.create(framework_info(name), python=args.python, force=args.force, progress=say)
        except envs.EnvError as exc:
            print(f"dlbench: {name}: {exc}", file=sys.stderr)
            print(f"dlbench: full log: {envs.log_path(name)}", file=sys.stderr)
            code = 1
    return code


def register(sub) -> None:
    p = sub.add_parser("envs", help="per-framework virtual environments (create, list, remove, lock)")
    p.add_argument("action", choices=("create", "list", "remove", "lock"))
    p.add_argument("framework", nargs="?",
                   help="comma-separated frameworks or versions (jax==0.4.38), or 'all' (create, remove); "
                        "lock: recipes only (refreshes frameworks/NAME/requirements.lock from its requirements.txt)")
    p.add_argument("--python", help="base interpreter of the new venv (default: the one running dlbench)")
    p.add_argument("--force", action="store_true", help="rebuild an environment that exists")
    p.add_argument("--json", action="store_true")
    p.set_defaults(func=cmd_envs)

