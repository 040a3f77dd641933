"""A suite from a name, a file or a built :class:`~dlbench.planning.plan.Suite`, with flag overrides: what
``dlbench run``'s flags and :func:`dlbench.api.run`'s arguments mean, the same for both. Each value
is checked by :mod:`dlbench.planning.resolve`; the result is validated as a suite file is. A scenario's
settings come as a section of overrides under its key (``convergence={"epochs": 2}``), validated by
the scenario's own model."""

from __future__ import annotations

from typing import Any

from dlbench.core.errors import UsageError
from dlbench.planning import resolve
from dlbench.planning.plan import Suite, load_suite, suite_from_dict
from dlbench.scenarios import registry


def build_suite(suite: str | Suite | None = None, *, models: list[str] | None = None,
                frameworks: list[str] | None = None, variants: list[str] | None = None,
                scenarios: list[str] | None = None, batches: list[int | str] | None = None,
                threads: list[int | str] | None = None, devices: list[str] | None = None,
                protocol: dict | None = None, seed: int | None = None, data: str | None = None,
                data_dir: str | None = None, precisions: list[str] | None = None, optimizer: dict | None = None,
                **settings: dict | None) -> Suite:
    """A suite from a name, a file or a built :class:`Suite`, and flag overrides (flags alone build one
    on the spot). None leaves an axis as the suite has it; an empty list is refused. ``settings``: a
    scenario's settings section -> the fields to override (:func:`dlbench.scenarios.registry.sections`).
    Settings are checked by the validator a suite file meets (:func:`dlbench.planning.resolve.check_settings`),
    each refusal naming its flag."""
    resolve.check_settings("protocol", protocol)
    resolve.check_settings("optimizer", optimizer)
    for section, values in settings.items():
        resolve.check_settings(section, values)
    if seed is not None:
        resolve.check_settings("seed", seed)
    if models is not None:
        models = resolve.models(models)
    if frameworks is not None:
        frameworks = resolve.frameworks(frameworks)
    resolve.not_empty(scenarios, "scenarios")
    resolve.not_empty(devices, "devices")
    if batches is not None:
        resolve.batches(batches)
    if threads is not None:
        resolve.threads(threads)
    flags_given = any(x is not None for x in (models, frameworks, scenarios, batches, threads))
    base: dict[str, Any]
    if isinstance(suite, Suite):  # built by a caller (e.g. dlbench reproduce)
        base = suite.model_dump()
    elif suite is None and flags_given:
        base = {"name": "custom", "models": models or ["lenet"]}
    else:
        base = load_suite(suite or "quick").model_dump()
    if models is not None:
        base["models"] = models
        if isinstance(base.get("batch_sizes"), dict):
            base["batch_sizes"] = ["default"]
        if isinstance(base.get("data"), dict):  # a suite's data set for a model the flags leave out goes with it
            base["data"] = {k: v for k, v in base["data"].items() if k == "default" or k in models}
    if frameworks is not None:
        base["frameworks"] = frameworks
    if scenarios is not None:
        base["scenarios"] = scenarios
    if batches is not None:
        base["batch_sizes"] = batches
    if threads is not None:
        base["threads"] = threads
    elif suite is None and flags_given:  # a scenario may say what thread counts it needs by default
        defaults = [registry.get(s).default_threads for s in base.get("scenarios", [])]
        if defaults and defaults[0] is not None and all(d == defaults[0] for d in defaults):
            base["threads"] = defaults[0]
    if devices is not None:
        base["devices"] = devices
    if precisions is not None:
        base["precisions"] = resolve.precisions(precisions)
    if protocol:
        base["protocol"] = {**base.get("protocol", {}), **protocol}
    if seed is not None:
        base["seed"] = seed
    if data:
        base["data"] = {"default": data}
    if data_dir:
        base["data_dir"] = data_dir
    if base.get("data_dir") and all(d == "synthetic" for d in base.get("data", {}).values()):
        raise UsageError("a data directory (--data-dir, data_dir) is given but no data set reads from it "
                         "(--data NAME, data:)")
    if optimizer:
        stored = base.get("optimizer") or {}
        same = optimizer.get("name", stored.get("name")) == stored.get("name")
        base["optimizer"] = {**(stored if same else {}), **optimizer}  # another optimiser starts from its defaults
    for section, values in settings.items():
        if values:
            base[section] = {**(base.get(section) or {}), **values}
    if variants is not None:
        base["variants"] = resolve.variant_map(resolve.suite_frameworks(suite_from_dict(base, "command line")),
                                               variants)
    built = suite_from_dict(base, "command line")
    if protocol and "max_cell_s" in protocol and built.protocol.target_ci is None:
        raise UsageError("--max-time (protocol.max_cell_s) caps a cell measured to a target; without --target-ci "
                         "(protocol.target_ci) it does nothing")
    return built

