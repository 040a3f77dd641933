"""Suites as data: the validated model of a suite file (its axes and each scenario's settings).

A scenario's settings are its own (:attr:`dlbench.scenarios.base.Scenario.settings_model`): the suite
file holds them under the scenario's section (``convergence:``, ``serving:``, ``distributed:``, a
plug-in's name), and the suite model asks the scenario registry to validate each one. Scenarios read
a suite only in annotations, so this module may import the registry. The suite's scenario names are
checked against the registry where a suite is made (:func:`dlbench.planning.plan.suite_from_dict`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dlbench.core.cell import DEFAULT_DEVICE, DEFAULT_OPTIMIZER, DEFAULT_SEED
from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION
from dlbench.core.precision import PRECISIONS
from dlbench.measure.timer import Protocol
from dlbench.scenarios import registry
from dlbench.scenarios.base import MAX_BATCH, MAX_COUNT, MAX_SECONDS, MAX_SEED  # noqa: F401  (the bounds, shared)
from dlbench.scenarios.processes import MIN_PILOT

#: a floor under one measuring process's start (a fresh interpreter importing dlbench's worker and a
#: framework) and its warm-up, seconds: not an estimate, the least a cap must leave a pilot's process
PROCESS_FLOOR_S = 1.0


def pilot_floor_s(repeats: int, min_time_s: float) -> float:
    """The least a ``--target-ci`` pilot takes: its processes (:data:`MIN_PILOT` at the least), each a
    start of :data:`PROCESS_FLOOR_S` and ``min_time_s`` of sampling."""
    return max(repeats, MIN_PILOT) * (PROCESS_FLOOR_S + min_time_s)


class ProtocolModel(BaseModel):
    """The timing protocol. Every bound is here, on the field, so a suite file, a flag (dlbench.planning.flags
    validates flags through these models) and the Python API refuse the same values: no infinity, no
    NaN, nothing negative, nothing past a sane maximum."""

    model_config = ConfigDict(extra="forbid")
    warmup: int = Field(10, ge=0, le=MAX_COUNT)
    min_iters: int = Field(20, ge=1, le=MAX_COUNT)
    min_time_s: float = Field(2.0, ge=0, le=MAX_SECONDS, allow_inf_nan=False)
    repeats: int = Field(3, ge=1, le=1000)
    max_time_s: float = Field(120.0, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    timeout_s: float = Field(600.0, gt=0, le=MAX_SECONDS, allow_inf_nan=False)
    #: calls profiled by the framework's own profiler after the timed ones, in the first process of each
    #: timed cell (0: no profile; dlbench.measure.profile)
    profile_calls: int = Field(0, ge=0, le=1000)
    #: look for the end of each process's warm-up in its samples (dlbench.measure.warmup)
    find_warmup: bool = True
    #: the relative half-width, in percent, of the 95% interval a cell is measured to (None: the fixed
    #: protocol, ``repeats`` processes); ``repeats`` processes are then the pilot (dlbench.measure.adaptive)
    target_ci: float | None = Field(None, gt=0, lt=100, allow_inf_nan=False)
    #: the cap on a cell's wall time when measuring to ``target_ci``, seconds
    max_cell_s: float = Field(600.0, gt=0, le=MAX_SECONDS, allow_inf_nan=False)

    @model_validator(mode="after")
    def _cap_fits_a_pilot(self) -> ProtocolModel:
        """A cap (``--max-time``) below what the pilot of ``--target-ci`` takes at the least is refused: the
        pilot is the fixed first stage the plan is made from (cutting it short would leave no variance
        to plan with), so a smaller cap could not be honoured, only overrun."""
        if self.target_ci is not None and self.max_cell_s < (least := pilot_floor_s(self.repeats, self.min_time_s)):
            raise ValueError(f"--max-time (max_cell_s) cannot hold the pilot of --target-ci: "
                             f"{max(self.repeats, MIN_PILOT)} process(es) of at least {PROCESS_FLOOR_S:g} s to start "
                             f"and {self.min_time_s:g} s (--min-time) of sampling each take {least:g} s at the least, "
                             f"got {self.max_cell_s:g} s")
        return self

    def timer_fields(self) -> dict[str, Any]:
        """What a measuring process's timer takes (a job carries these; the timeout, the profile and the
        target are the parent's settings)."""
        return self.model_dump(exclude={"timeout_s", "profile_calls", "target_ci", "max_cell_s"})

    def protocol(self) -> Protocol:
        return Protocol(warmup=self.warmup, min_iters=self.min_iters, min_time_s=self.min_time_s,
                        repeats=self.repeats, max_time_s=self.max_time_s, find_warmup=self.find_warmup)


#: the largest learning rate, epsilon or weight decay a suite or a flag may name (each far past any
#: training run's; a bound so that a typo such as 1e8 is refused rather than measured as a diverging step)
MAX_LR = 1000.0
MAX_EPS = 1.0
MAX_WEIGHT_DECAY = 1000.0


class OptimizerModel(BaseModel):
    """The optimiser of every cell that updates parameters (the scenarios with ``Scenario.updates``:
    ``train_step``, ``compile``'s train step, ``convergence``; dlbench.frameworks.base.OptimizerSpec):
    a suite-level setting, so one validated model, refused the same way from a suite file, a flag and
    the Python API. Defaults: SGD with momentum 0.9 at the model's paper's learning rate; AdamW as
    transformers' ``TrainingArguments`` has it (lr 5e-5, betas (0.9, 0.999), eps 1e-8, weight decay 0)."""

    model_config = ConfigDict(extra="forbid")
    name: Literal["sgd", "adamw"] = DEFAULT_OPTIMIZER
    #: None: SGD the model's paper's rate (``ModelSpec.learning_rate``), AdamW 5e-5
    lr: float | None = Field(None, gt=0, le=MAX_LR, allow_inf_nan=False)
    momentum: float = Field(0.9, ge=0, lt=1, allow_inf_nan=False)
    betas: tuple[float, float] = (0.9, 0.999)
    eps: float = Field(1e-8, gt=0, le=MAX_EPS, allow_inf_nan=False)
    weight_decay: float = Field(0.0, ge=0, le=MAX_WEIGHT_DECAY, allow_inf_nan=False)

    @field_validator("betas")
    @classmethod
    def _betas(cls, v: tuple[float, float]) -> tuple[float, float]:
        if not all(0 <= b < 1 for b in v):  # NaN fails the comparison too
            raise ValueError(f"each beta must be in [0, 1), got {list(v)}")
        return v

    @model_validator(mode="after")
    def _settings_of_its_optimizer(self) -> OptimizerModel:
        """A setting of the other optimiser (each named with its ``dlbench run`` flag) is refused, not ignored."""
        defaults = type(self).model_fields
        own = {"sgd": ("momentum",), "adamw": ("betas", "eps", "weight_decay")}[self.name]
        foreign = [k for k in ("momentum", "betas", "eps", "weight_decay")
                   if k not in own and getattr(self, k) != defaults[k].default]
        if foreign:
            flags = ", ".join(f"--{k.replace('_', '-')}" for k in foreign)
            other = "adamw" if self.name == "sgd" else "sgd"
            raise ValueError(f"{', '.join(foreign)} ({flags}) {'is a setting' if len(foreign) == 1 else 'are settings'} "
                             f"of optimizer {other}, not {self.name}")
        return self


class Suite(BaseModel):
    """A suite file. ``data`` maps a model (or ``default``) to a real data set whose samples fill the
    batches instead of synthetic ones (``data_dir`` says where its files are).
    ``frameworks: installed`` means every installed framework; ``variants`` maps a
    framework to its variants (``all``, or a list; default: the framework's first); ``batch_sizes``
    is a list or a mapping model -> list (``default`` = the model's default batch); ``threads``
    holds integers, ``all`` or ``half`` (clipped to the cores present, duplicates dropped).
    Every other key is a scenario's settings section (:func:`dlbench.scenarios.registry.sections`),
    read with :meth:`settings` (or as an attribute: ``suite.convergence``)."""

    # the extra keys are the scenarios' settings, each validated by its own model (_settings)
    model_config = ConfigDict(extra="allow")
    name: str = "custom"
    description: str = ""
    frameworks: list[str] | str = "installed"
    variants: dict[str, list[str] | str] = Field(default_factory=dict)
    models: list[str]
    scenarios: list[str] = Field(default_factory=lambda: ["forward", "gradient", "train_step"])
    batch_sizes: list[int | str] | dict[str, list[int | str]] = Field(default_factory=lambda: ["default"])
    threads: list[int | str] = Field(default_factory=lambda: [1, "all"])
    devices: list[str] = Field(default_factory=lambda: [DEFAULT_DEVICE])
    #: numeric precisions (dlbench.core.precision); every cell is measured at each
    precisions: list[str] = Field(default_factory=lambda: [DEFAULT_PRECISION])
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    #: with ``frameworks: installed``, installed frameworks to leave out (named ones are always run)
    installed_except: list[str] = Field(default_factory=list)
    #: with ``frameworks: installed``, only these (those of them installed here): a suite that compares a
    #: named set, such as the runtimes a public leaderboard compares (``llm-perf``)
    installed_among: list[str] = Field(default_factory=list)
    data: dict[str, str] = Field(default_factory=dict)  # model -> data set ("default" key: every model)
    data_dir: str | None = None
    protocol: ProtocolModel = Field(default_factory=ProtocolModel)
    seed: int = Field(DEFAULT_SEED, ge=0, le=MAX_SEED)
    #: the update of every cell that trains (a suite-level setting: it applies to each updating scenario)
    optimizer: OptimizerModel = Field(default_factory=OptimizerModel)

    @model_validator(mode="after")
    def _settings(self) -> Suite:
        """Each scenario's settings section validated by its model (absent: its defaults); a key that
        is no section is refused as any unknown key."""
        extra = self.__pydantic_extra__
        assert extra is not None
        for key in extra:
            if key not in registry.sections():
                raise ValueError(f"{key}: Extra inputs are not permitted")
        for key in registry.sections():
            extra[key] = registry.validate_settings(key, extra.get(key))
        return self

    def settings(self, section: str) -> Any:
        """A scenario's settings (its defaults when the suite was made before the scenario was registered)."""
        extra = self.__pydantic_extra__ or {}
        return extra[section] if section in extra else registry.validate_settings(section, None)

    @field_validator("frameworks", "models", "scenarios", "devices")
    @classmethod
    def _not_empty(cls, v: list[str] | str) -> list[str] | str:
        if not v:
            raise ValueError("the list names nothing")
        return v

    @field_validator("precisions")
    @classmethod
    def _precisions(cls, v: list[str]) -> list[str]:
        bad = [p for p in v if p not in PRECISIONS]
        if not v or bad:
            raise ValueError(f"unknown precision(s) {bad}; known: {', '.join(PRECISIONS)}" if bad
                             else "the list names nothing")
        return list(dict.fromkeys(v))

    @field_validator("threads")
    @classmethod
    def _threads(cls, v: list[int | str]) -> list[int | str]:
        check_threads(v)
        return v

    @field_validator("batch_sizes")
    @classmethod
    def _batches(cls, v):
        for lst in v.values() if isinstance(v, dict) else [v]:
            check_batches(lst)
        return v

    @model_validator(mode="after")
    def _mappings_name_the_suites_models(self) -> Suite:
        """A mapping by model (``batch_sizes``, ``data``) names the suite's models or ``default``: a typo
        (``lenett``) would otherwise be ignored and the model measured at its default."""
        for field in ("batch_sizes", "data"):
            mapping = getattr(self, field)
            if isinstance(mapping, dict):
                unknown = [k for k in mapping if k != "default" and k not in self.models]
                if unknown:
                    raise ValueError(f"{field} names model(s) {unknown} that are not among the suite's models "
                                     f"{self.models} (or 'default')")
        return self


def check_threads(threads: list[int | str]) -> None:
    """The rule for thread counts, wherever they come from (suite, flag, API): at least one; each an
    integer > 0, ``all`` or ``half``. Raises ValueError."""
    _check_counts(threads, "thread counts", ("all", "half"))


def check_batches(batches: list[int | str]) -> None:
    """The rule for batch sizes: at least one; each an integer > 0 or ``default``. Raises ValueError."""
    _check_counts(batches, "batch sizes", ("default",))


def _check_counts(values: list[int | str], what: str, words: tuple[str, ...]) -> None:
    if not values:
        raise ValueError(f"{what}: the list names nothing")
    alternatives = ", ".join(repr(w) for w in words)
    for v in values:
        if isinstance(v, bool) or not isinstance(v, int | str) or isinstance(v, str) and v not in words:
            raise ValueError(f"{what} must be integers (or {alternatives}), got {v!r}")
        if isinstance(v, int) and v <= 0:
            raise ValueError(f"{what} must be > 0, got {v}")
        if isinstance(v, int) and v > MAX_BATCH:
            raise ValueError(f"{what} must be at most {MAX_BATCH:,}, got {v}")
