"""What a user names, resolved against the registries: models, frameworks, variants, devices, thread
counts, batch sizes and timeouts.

One module, so the command line, the Python API, a suite file and a resumed run accept and refuse
the same input. ``None`` always means "not given" (the default applies); an empty list names
nothing and is refused. Every refusal is a :class:`~dlbench.core.errors.UsageError` (one line, exit 2).
Nothing here imports a framework.
"""

from __future__ import annotations

import os
import re
from typing import Any

from pydantic import ValidationError

from dlbench.core.errors import UsageError
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import get_precision
from dlbench.frameworks import FRAMEWORKS, UnknownFrameworkError, check_frameworks, framework_info, installed_version
from dlbench.frameworks.base import OPTIMIZERS
from dlbench.models import UnknownModelError, canonical_ref, get_model, list_models
from dlbench.planning.plan import Suite, check_batches, check_threads, resolve_threads
from dlbench.scenarios import registry


def not_empty(values: list | None, what: str) -> None:
    """A list given (not None) must name something: an empty one is not "the default"."""
    if values is not None and not values:
        raise UsageError(f"{what}: the list names nothing (leave it out for the default)")


def models(names: list[str] | None) -> list[str]:
    """The models named (default: every model); an unknown model or option, or options its factory
    refuses together (``gpt2:max_positions=64`` with the default sequence of 256), is refused. A Hugging
    Face folder (``hf:DIR``) comes back as every process will receive it: absolute, with its files' digest."""
    not_empty(names, "models")
    if names is None:
        return list_models()
    try:
        names = [canonical_ref(m) for m in names]
        for m in names:
            get_model(m)
    except UnknownModelError as exc:
        raise UsageError(str(exc)) from None
    return names


def canonical_models(suite: Suite) -> Suite:
    """The suite with its models as :func:`models` resolves them (a Hugging Face folder absolute, with
    its files' digest), a mapping by model (``batch_sizes``, ``data``) following its keys; a resumed
    run's folder changed since is refused here."""
    canon = dict(zip(suite.models, models(suite.models), strict=True))
    if all(k == v for k, v in canon.items()):
        return suite
    update: dict[str, Any] = {"models": list(canon.values()), "data": {canon.get(k, k): v for k, v in suite.data.items()}}
    if isinstance(suite.batch_sizes, dict):
        update["batch_sizes"] = {canon.get(k, k): v for k, v in suite.batch_sizes.items()}
    return suite.model_copy(update=update)


def installed() -> list[str]:
    """Every framework dlbench can measure here (this Python's or its own environment's)."""
    found = [n for n in FRAMEWORKS if installed_version(n) is not None]
    if not found:
        raise UsageError("no supported framework is installed (pip install 'dlbench[torch]')")
    return found


def frameworks(names: list[str] | None) -> list[str]:
    """The frameworks named (default: every installed one); an unknown or missing one is refused."""
    not_empty(names, "frameworks")
    if names is None:
        return installed()
    try:
        names = list(dict.fromkeys(framework_info(n).name for n in names))  # one spelling per release
        check_frameworks(names)
    except UnknownFrameworkError as exc:
        raise UsageError(str(exc)) from None
    return names


def suite_frameworks(suite: Suite) -> list[str]:
    """A suite's frameworks: those it names, or (``installed``) every installed one but ``installed_except``,
    and only those of ``installed_among`` when it lists some."""
    if suite.frameworks == "installed":
        unknown = [f for f in suite.installed_among if f not in FRAMEWORKS]
        if unknown:
            raise UsageError(f"installed_among names unknown framework(s) {', '.join(unknown)}; known: "
                             f"{', '.join(FRAMEWORKS)}")
        found = [f for f in installed() if f not in suite.installed_except
                 and (not suite.installed_among or f in suite.installed_among)]
        if not found:
            raise UsageError(f"no installed framework left after installed_except {suite.installed_except}"
                             + (f" among {suite.installed_among}" if suite.installed_among else ""))
        return found
    return frameworks([suite.frameworks] if isinstance(suite.frameworks, str) else suite.frameworks)


def variants(framework: str, requested: list[str] | str | None) -> list[str]:
    """One framework's variants from a suite's ``variants`` entry: none or ``default`` -> its first,
    ``all`` -> every one; an unknown one is refused."""
    known = framework_info(framework).variants
    if requested in (None, "default", []):
        return [known[0]]
    if requested == "all":
        return list(known)
    requested = [requested] if isinstance(requested, str) else requested
    bad = [v for v in requested if v not in known]
    if bad:
        raise UsageError(f"{framework} has no variant {', '.join(bad)} (variants: {', '.join(known)})")
    return list(requested)


def variant_map(frameworks: list[str], names: list[str]) -> dict[str, list[str] | str]:
    """Variants named across frameworks (``--variant``) as a suite's ``variants`` mapping: each framework
    gets those of them it has (none: its default), ``all`` gives each all of its own. A variant none of
    ``frameworks`` has is refused, so it cannot vanish from the run unnoticed."""
    not_empty(names, "variants")
    if "all" in names:
        return {f: "all" for f in frameworks}
    unknown = [v for v in names if not any(v in framework_info(f).variants for f in frameworks)]
    if unknown:
        known = "; ".join(f"{f}: {', '.join(framework_info(f).variants)}" for f in frameworks)
        raise UsageError(f"unknown variant(s) {', '.join(unknown)} for {', '.join(frameworks)} ({known})")
    return {f: [v for v in names if v in framework_info(f).variants] or "default" for f in frameworks}


def supports_device(framework: str, device: str) -> bool:
    """Whether the backend declares the device: one of its ``devices``, or ``KIND:N`` (N a device index)
    for an accelerator kind it declares."""
    declared = framework_info(framework).devices
    kind, sep, index = device.partition(":")
    return kind in declared and (not sep or kind != "cpu" and re.fullmatch(r"[0-9]+", index) is not None)


def devices(frameworks: list[str], names: list[str]) -> list[str]:
    """Devices a run names, each declared by at least one of its frameworks (a framework lacking one
    stores its cells as ``unsupported``, with the backend's reason); a typo is refused, not measured."""
    not_empty(names, "devices")
    for d in names:
        if not any(supports_device(f, d) for f in frameworks):
            known = "; ".join(f"{f}: {', '.join(_device_forms(f))}" for f in frameworks)
            raise UsageError(f"no framework of the run has device {d!r} ({known})")
    return names


def _device_forms(framework: str) -> list[str]:
    declared = framework_info(framework).devices
    return [*declared, *(f"{d}:N" for d in declared if d != "cpu")]


def precisions(names: list[str] | None) -> list[str]:
    """Precision names (dlbench.core.precision); None: float32 alone; unknown or none: a usage error."""
    if names is None:
        return [DEFAULT_PRECISION]
    not_empty(names, "precisions")
    return list(dict.fromkeys(get_precision(n).name for n in names))


def optimizers(names: list[str] | None) -> list[str]:
    """Optimiser names (dlbench.frameworks.base.OPTIMIZERS); None: all of them; unknown or none: a usage error."""
    if names is None:
        return list(OPTIMIZERS)
    not_empty(names, "optimizers")
    bad = [n for n in names if n not in OPTIMIZERS]
    if bad:
        raise UsageError(f"unknown optimizer(s) {', '.join(bad)}; known: {', '.join(OPTIMIZERS)}")
    return list(dict.fromkeys(names))


def threads(values: list[int | str]) -> list[int | str]:
    """Thread counts as a suite holds them (integers, ``all``, ``half``), checked by the suite's rule."""
    try:
        check_threads(values)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return values


def thread_count(value: int | str | None) -> int | None:
    """One thread count (``dlbench verify``): the same rule as a run's, resolved to this machine's
    cores; None leaves the framework's default."""
    if value is None:
        return None
    return resolve_threads(threads([value]), len(os.sched_getaffinity(0)))[0]


def batches(values: list[int | str]) -> list[int | str]:
    """Batch sizes as a suite holds them (integers, ``default``), checked by the suite's rule."""
    try:
        check_batches(values)
    except ValueError as exc:
        raise UsageError(str(exc)) from None
    return values


def timeout(seconds: float) -> float:
    """Seconds a measuring process may run: the suite's ``protocol.timeout_s`` rule (positive, finite,
    at most a week), so ``verify --timeout`` and ``run --timeout`` refuse alike."""
    check_settings("protocol", {"timeout_s": seconds})
    return float(seconds)


#: the ``dlbench run`` flag that sets each suite setting outside the scenarios' sections (named in a
#: refusal beside the suite's key; a scenario's flags are its own, :func:`registry.flag_option`)
FLAG_OF = {
    ("protocol", "warmup"): "--warmup", ("protocol", "min_iters"): "--min-iters", ("protocol", "min_time_s"): "--min-time",
    ("protocol", "repeats"): "--repeats", ("protocol", "timeout_s"): "--timeout", ("protocol", "profile_calls"): "--profile",
    ("protocol", "target_ci"): "--target-ci", ("protocol", "max_cell_s"): "--max-time", ("seed",): "--seed",
    ("optimizer", "name"): "--optimizer", ("optimizer", "lr"): "--lr", ("optimizer", "momentum"): "--momentum",
    ("optimizer", "betas"): "--betas", ("optimizer", "eps"): "--eps", ("optimizer", "weight_decay"): "--weight-decay",
}


def check_settings(section: str, values: dict | int | None) -> None:
    """Flag values of one suite section (``protocol``, a scenario's settings section such as ``serving``;
    or ``seed``) checked by the validator a suite file meets (the suite model's fields, or the scenario's
    settings model through the registry), so a flag and a suite file refuse the same values; a refusal
    is one line naming the flag (where there is one) and the suite key. None: nothing given."""
    if values is None:
        return
    if section in registry.sections():
        _check_scenario_settings(section, values)
        return
    try:
        Suite.model_validate({"models": ["_"], section: values})
    except ValidationError as exc:
        for err in exc.errors():
            loc = tuple(str(p) for p in err["loc"])
            msg = " ".join(str(err["msg"]).removeprefix("Value error, ").split())
            if not loc:  # a model-level check: never passed over in silence
                raise UsageError(msg if msg.startswith(f"{section}: ") else f"{section}: {msg}") from None
            if loc[:1] != (section,):
                continue
            key = ".".join(loc)
            flag = FLAG_OF.get(loc[:2]) or FLAG_OF.get(loc[:1])
            value = values.get(loc[1]) if isinstance(values, dict) and len(loc) > 1 else values
            got = "" if "got " in msg else f", got {value!r}"
            raise UsageError(f"{flag + ' (' + key + ')' if flag else key}: {msg}{got}") from None


def _check_scenario_settings(section: str, values: Any) -> None:
    """A scenario's settings section checked by its own model (:func:`registry.validate_settings`)."""
    try:
        registry.validate_settings(section, values)
    except ValueError as exc:
        where, _, msg = str(exc).partition(": ")
        # a field's own check names the field (``qps: ...``); a bound of the dataclass's names it first
        field = where.partition(".")[2].split(".")[0] or msg.split(" ", 1)[0]
        given = isinstance(values, dict) and field in values
        key = f"{section}.{field}" if given else where
        flag = registry.flag_option(section, field) if given else None
        got = "" if not given or "got " in msg else f", got {values[field]!r}"
        raise UsageError(f"{flag + ' (' + key + ')' if flag else key}: {msg}{got}") from None
