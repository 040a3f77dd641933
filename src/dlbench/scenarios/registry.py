"""Every scenario dlbench can run, by name: the built-in ones and those of plug-ins.

A plug-in is a module or ``.py`` file named in ``DLBENCH_PLUGINS`` (the variable that also brings
plug-in frameworks, see :func:`dlbench.frameworks.load_plugins`) that defines ``SCENARIOS``, a
list of :class:`~dlbench.scenarios.base.Scenario` instances. The variable reaches every measuring
process, so a plug-in scenario's :meth:`~dlbench.scenarios.base.Scenario.work` runs there too.
"""

from __future__ import annotations

import os

from dlbench.errors import UsageError
from dlbench.frameworks import import_plugin
from dlbench.scenarios import compile as compile_
from dlbench.scenarios import convergence, generate, generate_loadgen, latency, layers, loadgen, scaling, timed
from dlbench.scenarios.base import CellOutcome, Scenario

#: name -> scenario, in the order tables show them
SCENARIOS: dict[str, Scenario] = {}


def register(scenario: Scenario) -> None:
    """Add a scenario (plug-ins and tests use this)."""
    SCENARIOS[scenario.name] = scenario


def get(name: str) -> Scenario:
    if name not in SCENARIOS:
        raise UsageError(f"unknown scenario {name!r}; known: {', '.join(SCENARIOS)}")
    return SCENARIOS[name]


class Stored(Scenario):
    """A scenario a stored run has and this process does not know (a plug-in's, stored by a run that
    loaded it): read with the per-call statistics, never measured."""

    def __init__(self, name: str):
        self.name = name

    def measure(self, cell, ctx) -> CellOutcome:
        return CellOutcome("unsupported", f"scenario {self.name!r} is not registered in this process")


def of_stored(name: str) -> Scenario:
    """The scenario that reads a stored cell (:class:`Stored` when it is not registered)."""
    return SCENARIOS.get(name) or Stored(name)


def names() -> list[str]:
    return list(SCENARIOS)


def per_batch() -> list[str]:
    """Scenarios whose samples are per-batch call times (tables of ms per batch, plots, compare)."""
    return [s.name for s in SCENARIOS.values() if s.per_iteration and not s.whole_dataset and s.in_summary]


def whole_dataset() -> list[str]:
    return [s.name for s in SCENARIOS.values() if s.whole_dataset]


def load_plugins() -> None:
    for item in filter(None, (p.strip() for p in os.environ.get("DLBENCH_PLUGINS", "").split(","))):
        for scenario in vars(import_plugin(item)).get("SCENARIOS", ()):
            register(scenario)


for _module in (timed, compile_, convergence, scaling, latency, loadgen, layers, generate, generate_loadgen):
    for _scenario in _module.SCENARIOS:
        register(_scenario)
load_plugins()
