"""The qualitative comparison (``dlbench survey``): feature matrix, API coverage, model zoo,
setup cost, popularity, and each framework's status here, after the papers' Tables.

:func:`collect` returns everything as plain data (the HTML report can render a section from it);
:func:`dlbench.survey.output.write` writes it as Markdown, CSV, JSON and HTML. Framework work happens
only in fresh worker processes; this process reads package metadata and the data files.
"""

from __future__ import annotations

import datetime as dt
import platform
from collections.abc import Callable
from typing import Any

from dlbench.survey import api_coverage, features, live_checks, popularity, setup, status, zoo
from dlbench.survey.catalog import all_framework_keys, features_data, installable_data, installed_distribution, targets

__all__ = ["collect", "resolve_keys"]


def resolve_keys(frameworks: list[str] | None) -> list[str]:
    """Every survey row, or the named ones (unknown names raise ValueError)."""
    keys = all_framework_keys()
    if not frameworks:
        return keys
    unknown = [f for f in frameworks if f not in keys]
    if unknown:
        raise ValueError(f"unknown framework(s) {', '.join(unknown)}; known: {', '.join(keys)}")
    return [k for k in keys if k in frameworks]


def collect(frameworks: list[str] | None = None, live: bool = True, measure_setup: bool = False,
            progress: Callable[[str], None] | None = None) -> dict[str, Any]:
    """The whole survey as one JSON-able dict."""
    say = progress or (lambda _msg: None)
    keys = resolve_keys(frameworks)
    all_targets = targets()
    chosen = {k: all_targets[k] for k in keys if k in all_targets}
    installed = [t for t in chosen.values() if installed_distribution(t)]
    live_results: dict[str, dict] = {}
    if live:
        for t in installed:
            live_results[t.name] = live_checks.run_all(t, say)
    say("API coverage (introspection)")
    api = api_coverage.collect(installed)
    say("model zoo (introspection)")
    zoo_data = zoo.collect(installed, keys)
    fdata = features_data()
    return {
        "date": dt.date.today().isoformat(),
        "machine": f"{platform.system()} {platform.machine()}, Python {platform.python_version()}",
        "live_checks_run": live,
        "frameworks": status.rows(keys, all_targets),
        "features": {"rows": features.rows(), "matrix": features.matrix(keys, chosen, live_results),
                     "data_date": fdata.get("date"), "papers": fdata.get("papers", {})},
        "api_coverage": api,
        "api_2018": {k: fdata["frameworks"][k]["api_2018"] for k in keys
                     if (fdata["frameworks"].get(k) or {}).get("api_2018")},
        "zoo": zoo_data,
        "setup": setup.collect(installed, keys, measure_setup, say),
        "popularity": popularity.rows(keys),
        "installable": installable_data(),
    }
