"""Every scenario dlbench can run, by name: the built-in ones and those of plug-ins.

The registry also gathers what scenarios declare for the rest of dlbench: their settings sections
(:func:`validate_settings`, for the suite model), their ``dlbench run`` flags (:func:`add_flags`,
:func:`settings_from_flags`) and their report sections (:func:`report_sections`, :func:`report_plots`,
:func:`shown`), so no module outside a scenario's own names it.

A plug-in scenario comes from an installed distribution's entry point of the ``dlbench.scenarios``
group, loading to a :class:`~dlbench.scenarios.base.Scenario` or a list/tuple of them
(:func:`load_entry_points`, :mod:`dlbench.core.plugins`); every process of that interpreter finds it,
so its :meth:`~dlbench.scenarios.base.Scenario.work` runs in the measuring processes too. A module
or ``.py`` file not installed may instead be named in ``DLBENCH_PLUGINS`` (the variable that also
brings plug-in frameworks, see :func:`dlbench.frameworks.load_plugins`) and define ``SCENARIOS``.
"""

from __future__ import annotations

import argparse
import importlib.metadata
import os
from collections.abc import Iterable
from typing import TYPE_CHECKING, Any

from dlbench.core import plugins
from dlbench.core.errors import UsageError
from dlbench.core.plugins import PluginError
from dlbench.frameworks import import_plugin
from dlbench.scenarios import compile as compile_
from dlbench.scenarios import convergence, generate, generate_loadgen, latency, layers, loadgen, scaling, timed
from dlbench.scenarios.base import CellOutcome, Flag, Scenario, Shown

if TYPE_CHECKING:
    from dlbench.storage.cell_result import RunResults

#: name -> scenario, in the order tables show them
SCENARIOS: dict[str, Scenario] = {}


def register(scenario: Scenario) -> None:
    """Add a scenario (plug-ins and tests use this). Its ``requires`` must be a tuple of closures: a plug-in
    written when it was one closure's name (``"forward"``) is refused here, not read letter by letter."""
    if not isinstance(scenario.requires, tuple) or not all(isinstance(c, str) for c in scenario.requires):
        raise TypeError(f"scenario {scenario.name!r}: requires must be a tuple of closure names, "
                        f"like ('forward',), not {scenario.requires!r}")
    SCENARIOS[scenario.name] = scenario


def get(name: str) -> Scenario:
    if name not in SCENARIOS and name in BROKEN:
        raise BROKEN[name]
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


def batch_closures() -> list[str]:
    """Scenarios that time one batch's backend closure under the protocol (``forward``, ``gradient``,
    ``train_step``), in the order of the work a call does: what precision tables compare and the
    summary's rate column picks from."""
    return [s.name for s in SCENARIOS.values() if s.times_closure]


def whole_dataset() -> list[str]:
    return [s.name for s in SCENARIOS.values() if s.whole_dataset]


# --- settings --------------------------------------------------------------------------------------
def sections() -> dict[str, type]:
    """Suite-file key -> the settings model of the scenarios that keep their settings under it."""
    out: dict[str, type] = {}
    for s in SCENARIOS.values():
        if s.settings_model is not None:
            if out.setdefault(s.section, s.settings_model) is not s.settings_model:
                raise TypeError(f"scenarios share settings section {s.section!r} with different models")
    return out


def validate_settings(section: str, data: Any) -> Any:
    """A section of a suite's settings as its model's instance; raises ValueError (one line that names
    the field, ``convergence.epochs: ...``) for a bad one and for a section no scenario has."""
    from pydantic import TypeAdapter, ValidationError

    model = sections().get(section)
    if model is None:
        raise ValueError(f"{section}: Extra inputs are not permitted (no scenario has settings {section!r}; "
                         f"settings: {', '.join(sections()) or 'none'})")
    if isinstance(data, model):
        return data
    try:
        return TypeAdapter(model).validate_python({} if data is None else data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in (section, *err["loc"]))
        msg = str(err["msg"]).removeprefix("Value error, ")
        if err["type"] in ("unexpected_keyword_argument", "extra_forbidden"):
            msg = f"Extra inputs are not permitted (its settings: {', '.join(_fields(model))})"
        raise ValueError(f"{loc}: {msg}") from None


def _fields(model: type) -> list[str]:
    import dataclasses

    return [f.name for f in dataclasses.fields(model)] if dataclasses.is_dataclass(model) else list(model.model_fields)


def add_flags(parser: argparse.ArgumentParser) -> None:
    """Each scenario's ``dlbench run`` flags, in a group per settings section (a flag that scenarios
    sharing a section both declare is added once)."""
    seen: set[str] = set()
    for section, flags in _flags().items():
        users = ", ".join(s.name for s in SCENARIOS.values() if s.section == section)
        group = parser.add_argument_group(f"{section} settings ({users})")
        for f in flags:
            if f.option in seen:
                continue
            seen.add(f.option)
            if f.switch is not None:
                group.add_argument(f.option, dest=f.dest, action="store_const", const=f.switch, help=f.help)
            else:
                group.add_argument(f.option, dest=f.dest, type=str if f.many else f.type, choices=f.choices,
                                   help=f.help)


def settings_from_flags(args: argparse.Namespace) -> dict[str, dict[str, Any]]:
    """Section -> {field: value} for the scenario flags given (parsing only: the suite model checks the
    values)."""
    out: dict[str, dict[str, Any]] = {}
    for section, flags in _flags().items():
        for f in flags:
            value = getattr(args, f.dest, None)
            if value is None:
                continue
            if f.many:
                value = [f.type(v.strip()) if _converts(f.type, v.strip()) else v.strip()
                         for v in value.split(",") if v.strip()]
            out.setdefault(section, {})[f.field] = value
    return out


def unread_flag(args: argparse.Namespace, scenarios: list[str]) -> str | None:
    """A refusal, one line, for the first scenario flag given that none of ``scenarios`` reads (a flag
    that does nothing must not be accepted in silence: ``--prompt-len`` beside ``--scenario forward``);
    None when every flag given is read."""
    for option, flags in _by_option().items():
        if all(getattr(args, f.dest, None) is None for f in flags):
            continue
        readers = [s.name for s in SCENARIOS.values() if any(f.option == option for f in s.flags)]
        if not set(readers) & set(scenarios):
            return (f"{option} sets the {', '.join(readers)} scenario(s); the run measures none of them "
                    f"({', '.join(scenarios)})")
    return None


def _by_option() -> dict[str, list[Flag]]:
    out: dict[str, list[Flag]] = {}
    for flags in _flags().values():
        for f in flags:
            out.setdefault(f.option, []).append(f)
    return out


def flag_dests() -> list[str]:
    """The argparse names of every scenario flag."""
    return [f.dest for flags in _flags().values() for f in flags]


def flag_option(section: str, field: str) -> str | None:
    """The ``dlbench run`` flag that sets a field of a settings section (None: no flag sets it)."""
    return next((f.option for f in _flags().get(section, []) if f.field == field), None)


def _converts(kind, text: str) -> bool:
    try:
        kind(text)
    except ValueError:
        return False  # left as text: the settings model names the field and the value
    return True


def _flags() -> dict[str, list[Flag]]:
    out: dict[str, list[Flag]] = {}
    for s in SCENARIOS.values():
        out.setdefault(s.section, []).extend(f for f in s.flags if f not in out.get(s.section, []))
    return {k: v for k, v in out.items() if v}


# --- the report --------------------------------------------------------------------------------------
def _of_run(res: RunResults) -> list[Scenario]:
    """The registered scenarios the run has cells of (:meth:`~Scenario.cells_of`), in the registry's order."""
    return [s for s in SCENARIOS.values() if s.cells_of(res)]


def report_sections(res: RunResults) -> list[Any]:
    """The report sections of the run's scenarios (empty ones left out; a section that scenarios share,
    such as latency's and LoadGen's, once)."""
    out: dict[str, Any] = {}
    for s in _of_run(res):
        for sec in s.report_sections(res):
            if sec and sec.title not in out:
                out[sec.title] = sec
    return list(out.values())


def report_plots(res: RunResults) -> tuple[list[Any], list[Any]]:
    """The run's scenarios' plots (each once by name) and the plots skipped."""
    plots: dict[str, Any] = {}
    skipped: list[Any] = []
    for s in _of_run(res):
        p, k = s.report_plots(res)
        plots.update((x.name, x) for x in p if x.name not in plots)
        skipped += [x for x in k if x not in skipped]
    return list(plots.values()), skipped


def shown(res: RunResults, db: Any) -> list[Shown]:
    """What the run's scenarios add after the summary of ``dlbench run``/``show``."""
    return [x for s in _of_run(res) if (x := s.show(res, db)) is not None]


#: entry-point name -> why that plug-in's scenarios are not registered (see :func:`load_entry_points`)
BROKEN: dict[str, PluginError] = {}


def load_entry_points(entries: Iterable[importlib.metadata.EntryPoint] | None = None) -> None:
    """Scenarios of installed distributions (the ``dlbench.scenarios`` entry-point group, read once per
    process; ``entries``: those instead). A broken entry (its import fails, it loads to no Scenario,
    a name it brings is taken) is kept in :data:`BROKEN` under the entry's name and registers none of
    its scenarios."""
    for ep in plugins.entry_points(plugins.SCENARIOS_GROUP) if entries is None else entries:
        try:
            value = plugins.load(ep, _not_scenarios)
            scenarios = tuple(value) if isinstance(value, list | tuple) else (value,)
            taken = [s.name for s in scenarios if s.name in SCENARIOS]
            if taken:
                raise PluginError(f"{plugins.where(ep)}: scenario(s) {', '.join(map(repr, taken))} already registered")
        except PluginError as exc:
            BROKEN[ep.name] = exc
            continue
        for scenario in scenarios:
            register(scenario)


def _not_scenarios(value: object) -> str | None:
    items = value if isinstance(value, list | tuple) else (value,)
    wrong = [type(v).__name__ for v in items if not isinstance(v, Scenario)]
    if wrong or not items:
        return f"loads to {', '.join(wrong) or 'nothing'}, not a dlbench Scenario instance or a list of them"
    return None


def load_plugins() -> None:
    for item in filter(None, (p.strip() for p in os.environ.get("DLBENCH_PLUGINS", "").split(","))):
        for scenario in vars(import_plugin(item)).get("SCENARIOS", ()):
            register(scenario)


for _module in (timed, compile_, convergence, scaling, latency, loadgen, layers, generate, generate_loadgen):
    for _scenario in _module.SCENARIOS:
        register(_scenario)
load_entry_points()
load_plugins()
