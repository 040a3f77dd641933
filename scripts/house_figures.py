"""Figures of the code base's shape at a git revision, for issue #30's before/after note:

* modules at the package root (``src/dlbench/*.py``);
* the longest function and the longest file under ``src/dlbench`` (lines);
* for each scenario, the files outside its own module that name it (a string equal to its name):
  what adding it cost beyond its module; for a plug-in scenario (``--plugin tests/toyscenario.py``),
  the files besides its module that name it;
* comparisons against a literal scenario name outside ``scenarios/`` (the check of
  ``tests/test_scenarios.py``);
* with ``--commit``: the package files a commit that added a scenario touched, and how many of them
  are outside ``scenarios/`` (the "before" cost of a scenario with settings and a report section:
  ``latency`` + ``loadgen`` were added by c07a2e2, their report section by a30b4d3).

Read from ``git show REV:PATH``, never the work tree, so two revisions are compared on the same
footing. Usage (from the repository root)::

    python scripts/house_figures.py --rev main --rev HEAD --plugin tests/toyscenario.py \
        --commit c07a2e2 --commit a30b4d3
"""

from __future__ import annotations

import argparse
import ast
import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "src/dlbench/"


def _git(*args: str) -> str:
    return subprocess.run(["git", "-C", str(ROOT), *args], check=True, capture_output=True, text=True).stdout


def sources(rev: str) -> dict[str, str]:
    """Path -> text of every Python file under src/dlbench at ``rev``."""
    paths = [p for p in _git("ls-tree", "-r", "--name-only", rev, PACKAGE).splitlines() if p.endswith(".py")]
    return {p: _git("show", f"{rev}:{p}") for p in paths}


def longest_function(files: dict[str, str]) -> tuple[str, int]:
    best = ("", 0)
    for path, text in files.items():
        for node in ast.walk(ast.parse(text)):
            if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                n = node.end_lineno - node.lineno + 1
                if n > best[1]:
                    best = (f"{path.removeprefix(PACKAGE)}:{node.name}", n)
    return best


def names_in(text: str, names: set[str]) -> set[str]:
    """The scenario names ``text`` has as string constants."""
    return {n.value for n in ast.walk(ast.parse(text)) if isinstance(n, ast.Constant) and n.value in names}


def own_module(path: str, name: str) -> bool:
    """The scenario's own module (or the module of its family: ``loadgen-server`` in loadgen.py)."""
    stem = Path(path).stem
    return path.startswith(PACKAGE + "scenarios/") and (stem == name.split("-")[0] or stem == name.replace("-", "_"))


def figures(rev: str, scenario_names: set[str], plugin: str | None) -> dict:
    sys.path.insert(0, str(ROOT))
    from tests.test_scenarios import OTHER_MEANINGS, allowed_in, scenario_name_comparisons  # the test's own check

    # the same exemptions at the paths they had before the layout (gate/ and report/ modules moved
    # there from the package root)
    exempt = {*OTHER_MEANINGS, *(k.rpartition("/")[2] for k in OTHER_MEANINGS if k.startswith(("gate/", "report/")))}

    files = sources(rev)
    root = [p for p in files if p.count("/") == 2]  # src/dlbench/x.py
    lines = {p: t.count("\n") + 1 for p, t in files.items()}
    longest_file = max(lines, key=lines.get)
    cost: dict[str, int] = {}
    for name in sorted(scenario_names):
        cost[name] = sum(1 for p, t in files.items() if not own_module(p, name) and name in names_in(t, {name}))
    comparisons = []
    for p, t in files.items():
        rel = p.removeprefix(PACKAGE)
        if rel.startswith("scenarios/") or any(rel == k or rel.startswith(k + "/") for k in exempt):
            continue
        comparisons += [f"{rel}:{line}" for line, _ in scenario_name_comparisons(ast.parse(t),
                                                                                   scenario_names - allowed_in(rel))]
    out = {"rev": _git("rev-parse", "--short", rev).strip(), "root_modules": len(root),
           "longest_function": dict(zip(("name", "lines"), longest_function(files), strict=True)),
           "longest_file": {"name": longest_file.removeprefix(PACKAGE), "lines": lines[longest_file]},
           "files_outside_its_module_naming_each_scenario": cost,
           "scenario_name_comparisons_outside_scenarios": len(comparisons)}
    if plugin:
        text = _git("show", f"{rev}:{plugin}") if _exists(rev, plugin) else ""
        plugin_name = _plugin_name(text)
        if plugin_name:
            naming = [p for p, t in files.items() if plugin_name in names_in(t, {plugin_name})]
            has_settings = "settings_model" in text and "report_sections" in text and "flags" in text
            out["plugin"] = {"module": plugin, "name": plugin_name, "files_touched": 1 + len(naming),
                             "has_settings_flag_and_report_section": has_settings}
    return out


def _exists(rev: str, path: str) -> bool:
    return subprocess.run(["git", "-C", str(ROOT), "cat-file", "-e", f"{rev}:{path}"], capture_output=True).returncode == 0


def _plugin_name(text: str) -> str | None:
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "name" for t in node.targets):
            if isinstance(node.value, ast.Constant):
                return node.value.value
    return None


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rev", action="append", required=True, help="git revision (repeat to compare)")
    ap.add_argument("--plugin", help="a plug-in scenario's module, e.g. tests/toyscenario.py")
    ap.add_argument("--commit", action="append", default=[], help="a commit that added a scenario (repeat)")
    args = ap.parse_args(argv)
    sys.path.insert(0, str(ROOT / "src"))
    from dlbench.scenarios import registry

    names = set(registry.names())
    out: dict = {"revisions": [figures(rev, names, args.plugin) for rev in args.rev]}
    if args.commit:
        touched = sorted({p for c in args.commit for p in _git("show", "--name-only", "--format=", c).split()
                          if p.startswith(PACKAGE) or p == "pyproject.toml"})
        out["commits"] = {"commits": args.commit, "package_files_touched": len(touched),
                          "outside_scenarios": len([p for p in touched if not p.startswith(PACKAGE + "scenarios/")]),
                          "files": touched}
    print(json.dumps(out, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
