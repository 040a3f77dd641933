"""Suites and cells: what a run measures.

A suite (YAML, validated by pydantic) names axes; the plan is their cross product minus
exclusions. A :class:`Cell` is one point of it, a plain value that can be sent to a subprocess
and stored.
"""

from __future__ import annotations

import os
from importlib import resources
from itertools import product
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from dlbench.core.cell import DEFAULT_OPTIMIZER, Cell
from dlbench.core.errors import UsageError
from dlbench.planning.suite import OptimizerModel, ProtocolModel, Suite, check_batches, check_threads
from dlbench.scenarios import registry

__all__ = ["BUILTIN", "Cell", "OptimizerModel", "ProtocolModel", "Suite", "check_batches", "check_threads", "expand",
           "load_suite", "resolve_threads", "suite_from_dict"]


BUILTIN = ("quick", "bahrampour2016", "shi2016", "liu2018", "llm-perf")


def load_suite(name_or_path: str) -> Suite:
    """A built-in suite by name, or a YAML file; bad input raises :class:`UsageError`."""
    if name_or_path in BUILTIN:
        text = resources.files("dlbench.suites").joinpath(f"{name_or_path}.yaml").read_text()
        source = f"built-in suite {name_or_path}"
    else:
        path = Path(name_or_path)
        if not path.is_file():
            raise UsageError(f"no suite named {name_or_path!r} (built in: {', '.join(BUILTIN)}) and no such file")
        source = str(path)
        try:
            text = path.read_text(encoding="utf-8")
        except UnicodeDecodeError:
            raise UsageError(f"{source}: not a YAML suite file (not UTF-8 text)") from None
        except OSError as exc:
            raise UsageError(f"cannot read suite {source}: {exc.strerror}") from None
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark else ""
        problem = " ".join(str(getattr(exc, "problem", None) or exc).split())  # one line, whatever YAML says
        raise UsageError(f"{source}: malformed YAML{where}: {problem}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source}: a suite must be a YAML mapping")
    return suite_from_dict(data, source)


def suite_from_dict(data: dict, source: str = "suite") -> Suite:
    """A validated suite; an invalid one is a :class:`UsageError` of one line (the first problem, and
    how many more there are)."""
    try:
        suite = Suite.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        loc = ".".join(str(p) if str(p).isprintable() else repr(p) for p in err["loc"])
        # a scenario's settings are checked by the suite as a whole: their message names the field itself
        msg = " ".join(str(err["msg"]).removeprefix("Value error, ").split())
        loc = f"{loc}: " if loc else ""
        others = len({e["loc"][:1] for e in errors} - {err["loc"][:1]})  # a union's alternatives share a field
        more = f" (and problems in {others} more field{'s' if others > 1 else ''})" if others else ""
        raise UsageError(f"{source}: invalid suite: {loc}{msg}{more}") from None
    bad = [name for name in suite.scenarios if name not in registry.SCENARIOS]
    for name in bad:
        if name in registry.BROKEN:  # an installed plug-in's that could not be loaded: say why
            raise UsageError(f"{source}: invalid suite: scenarios: {registry.BROKEN[name]}")
    if bad:
        raise UsageError(f"{source}: invalid suite: scenarios: unknown scenario(s) {bad}; known: {registry.names()}")
    return suite


def resolve_threads(threads: list[int | str], cores: int | None = None) -> list[int]:
    """Thread counts scaled to the cores present (the papers' 1..32 become 1..cores)."""
    cores = cores or len(os.sched_getaffinity(0))
    out: list[int] = []
    for t in threads:
        n = cores if t == "all" else max(1, cores // 2) if t == "half" else min(int(t), cores)
        if n not in out:
            out.append(n)
    return out


def _excluded(cell: Cell, rules: list[dict[str, Any]]) -> bool:
    d = cell.to_dict()
    return any(all(str(d.get(k)) == str(v) for k, v in rule.items()) for rule in rules)


def expand(suite: Suite, frameworks: list[str], variants_of, default_batch_of, cores: int | None = None,
           scenarios_of=None, cells_of=None) -> list[Cell]:
    """The suite's cells. ``variants_of(framework, requested)``, ``default_batch_of(model, scenario, data)``,
    ``scenarios_of(framework, scenarios)`` (the scenarios a framework measures for those the suite
    names; default: the same) and ``cells_of(cell)`` (the cells a scenario makes of one point, e.g. one
    per worker count; default: the point itself) come from the registries (kept out of this module so
    it stays pure)."""
    threads = resolve_threads(suite.threads, cores)
    cells: list[Cell] = []
    seen: set[str] = set()  # a cell two scenarios make (layers' whole-model forward, and forward) is measured once
    for fw in frameworks:
        for variant in variants_of(fw, suite.variants.get(fw)):
            for model in suite.models:
                raw = suite.batch_sizes.get(model, suite.batch_sizes.get("default", ["default"])) \
                    if isinstance(suite.batch_sizes, dict) else suite.batch_sizes
                data = suite.data.get(model, suite.data.get("default", "synthetic"))
                for scenario in (scenarios_of(fw, suite.scenarios) if scenarios_of else suite.scenarios):
                    optimizer = suite.optimizer.name if registry.of_stored(scenario).updates else DEFAULT_OPTIMIZER
                    batches: list[int] = []
                    for b in raw:
                        size = default_batch_of(model, scenario, data) if b == "default" else int(b)
                        if size not in batches:
                            batches.append(size)
                    for batch in batches:
                        for t, device, precision in product(threads, suite.devices, suite.precisions):
                            base = Cell(fw, variant, model, scenario, batch, t, device, data, precision=precision,
                                        optimizer=optimizer)
                            for cell in (cells_of(base) if cells_of else [base]):
                                if not _excluded(cell, suite.exclude) and cell.key not in seen:
                                    seen.add(cell.key)
                                    cells.append(cell)
    return cells
