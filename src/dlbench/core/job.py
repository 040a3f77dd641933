"""What a measuring process is asked to do: one typed job, written by the parent and read by the
process (``python -m dlbench.worker JOB.json RESULT.json``, or a scaling cell's worker module),
serialised with a version.

A job is a frozen dataclass per kind: a cell's (:class:`CellJob`, run by its scenario's
:meth:`~dlbench.scenarios.base.Scenario.work`), the gate's (:class:`VerifyJob`), the machine's peak
(:class:`PeakJob`), the survey's (:class:`SurveyJob`, whose payload the survey's own modules read),
and a scaling cell's processes' (:class:`DataParallelJob` for the all-reduce workers,
:class:`ParameterServerJob` for the parameter server's driver). Every field is written by the parent;
a field that may be left out says so with its default, here and nowhere else; the process reads
attributes and never guesses a default. :func:`decode` reads a job once, where it enters the
process, and refuses one it cannot read in one line (:class:`JobError`): another dlbench's (its
version), an unknown kind, a missing or unknown field, a value of the wrong type.

The standard library and :mod:`dlbench.core.cell` only: a worker in a framework's own environment reads it.
"""

from __future__ import annotations

import dataclasses
import types
import typing
from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from dlbench.core.cell import DEFAULT_DEVICE, Cell

#: the version of the job's JSON; a change of fields or of their meaning raises it
JOB_VERSION = 4  # 2: CellJob.optimizer, VerifyJob.optimizers; 3: PeakJob.engine; 4: the scaling jobs typed


class JobError(ValueError):
    """A job this process cannot read: said in one line, never a traceback of the read."""


class JobVersionError(JobError):
    """A job written by another version of dlbench."""


@dataclass(frozen=True)
class Job:
    """What every job has: its kind (the process's dispatch) and the cores it is pinned to."""

    kind: ClassVar[str] = ""
    #: cores the process is pinned to before any framework is imported (None: all it has)
    threads: int | None

    def on_device(self) -> str:
        """The device the job computes on (a Ray task asks for a GPU by it)."""
        return DEFAULT_DEVICE

    def to_dict(self) -> dict[str, Any]:
        return {"version": JOB_VERSION, "kind": self.kind, **asdict(self)}


@dataclass(frozen=True)
class CellJob(Job):
    """One process of a cell: what its scenario's ``work`` reads."""

    kind: ClassVar[str] = "scenario"
    cell: Cell
    seed: int
    data_dir: str | None
    #: the timer's protocol (:meth:`dlbench.planning.suite.ProtocolModel.timer_fields`)
    protocol: dict[str, Any]
    #: the scenario's own settings (:attr:`~dlbench.scenarios.base.Scenario.settings_model`, as data;
    #: its ``work`` gets them rebuilt, :meth:`~dlbench.scenarios.base.Scenario.settings_from`)
    settings: dict[str, Any]
    #: what this one process of the cell does differently, by the scenario's own keys (``compile``:
    #: its closures; ``forward``: the profile of the first process)
    extra: dict[str, Any] = field(default_factory=dict)
    #: the run's optimiser (:class:`dlbench.planning.suite.OptimizerModel`, as data: every field) for a cell whose
    #: scenario updates parameters (``Scenario.updates``); None for one that does not
    optimizer: dict[str, Any] | None = None
    #: exactly this many timed calls in this process, whatever the protocol's ``min_iters`` and
    #: ``min_time_s`` or the scenario's own count say (the second stage of ``--target-ci``,
    #: :func:`dlbench.scenarios.processes.run_processes`); None: the protocol's and the settings' own
    calls: int | None = None

    def on_device(self) -> str:
        return self.cell.device


@dataclass(frozen=True)
class VerifyJob(Job):
    """The equivalence gate of one framework's models at one precision (:mod:`dlbench.gate.verify`)."""

    kind: ClassVar[str] = "verify"
    framework: str
    models: list[str]
    variants: list[str]
    device: str
    precision: str
    #: the optimisers whose update the gate's check (f) verifies (a run: its own; ``dlbench verify``:
    #: those asked, by default every one)
    optimizers: list[str]

    def on_device(self) -> str:
        return self.device


@dataclass(frozen=True)
class PeakJob(Job):
    """One engine's matmul peaks at ``threads`` (:mod:`dlbench.measure.peak`), alone in its process."""

    kind: ClassVar[str] = "peak"
    #: the engine (:func:`dlbench.frameworks.peak_engines`)
    engine: str


@dataclass(frozen=True)
class SurveyJob(Job):
    """A survey check (:mod:`dlbench.survey.jobs`): its payload is the survey's own."""

    kind: ClassVar[str] = "survey"
    payload: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"version": JOB_VERSION, "kind": self.kind, "threads": self.threads, "payload": self.payload}


@dataclass(frozen=True)
class FaultAt:
    """Fault injection for tests (``DLBENCH_FAULT``): rank ``rank`` kills itself at step ``step``."""

    rank: int
    step: int


@dataclass(frozen=True, kw_only=True)
class ScalingJob(Job):
    """What every process of a scaling cell reads (:mod:`dlbench.distributed.scaling` writes it; the
    cell's worker modules, not :mod:`dlbench.worker`, run it)."""

    #: the cell: its model, variant, device, workers, exchange and batch (``Cell.global_batch``)
    cell: Cell
    #: the canonical weights' and the global batch's seed
    seed: int
    #: the timer's protocol (:meth:`dlbench.planning.suite.ProtocolModel.timer_fields`)
    protocol: dict[str, Any]
    #: the model at its small size (tests; a run measures the full one)
    small: bool = False

    def on_device(self) -> str:
        return self.cell.device


@dataclass(frozen=True, kw_only=True)
class DataParallelJob(ScalingJob):
    """One process of an all-reduce data-parallel cell (torch DDP, JAX, TensorFlow workers)."""

    kind: ClassVar[str] = "data-parallel"
    #: how long a collective (and joining the others) may wait for a peer, seconds
    collective_timeout_s: float
    #: tests: a rank killed at a step (None: none)
    fault: FaultAt | None = None


@dataclass(frozen=True, kw_only=True)
class ParameterServerJob(ScalingJob):
    """The driver of a parameter-server cell (``ps-sync``, ``ps-async``: :mod:`dlbench.distributed.ps`)."""

    kind: ClassVar[str] = "parameter-server"
    #: shard actors the parameters are spread over
    ps_shards: int


KINDS: dict[str, type[Job]] = {k.kind: k for k in (CellJob, VerifyJob, PeakJob, SurveyJob, DataParallelJob,
                                                     ParameterServerJob)}


def encode(job: Job) -> dict[str, Any]:
    """A job as the JSON its process reads."""
    return job.to_dict()


def decode(data: Any) -> Job:
    """The job a process was given, typed; :class:`JobError` (:class:`JobVersionError` for one of
    another version) saying what is wrong with one it cannot read."""
    if not isinstance(data, dict):
        raise JobError(f"a job is a JSON object, not {type(data).__name__}")
    version = data.get("version")
    if version != JOB_VERSION:
        raise JobVersionError(f"a job of version {version} (this dlbench reads version {JOB_VERSION}): the parent "
                              "and the measuring process run different dlbench versions")
    kind = KINDS.get(str(data.get("kind")))
    if kind is None:
        raise JobError(f"a job of unknown kind {data.get('kind')!r} (this dlbench reads: {', '.join(KINDS)})")
    return _read(kind, {k: v for k, v in data.items() if k not in ("version", "kind")}, f"the {kind.kind} job")


def _read(cls: type, data: Any, where: str) -> Any:
    """An instance of the dataclass ``cls`` from its JSON, every field checked against its type."""
    if not isinstance(data, dict):
        raise JobError(f"{where} is not an object: {data!r:.80}")
    fields_ = {f.name: f for f in dataclasses.fields(cls) if f.init}
    required = {n for n, f in fields_.items()
                if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING}
    missing, unknown = sorted(required - data.keys()), sorted(data.keys() - fields_.keys())
    if missing or unknown:
        said = [f"lacks {', '.join(missing)}" if missing else "", f"has unknown {', '.join(unknown)}" if unknown else ""]
        raise JobError(f"{where} {' and '.join(s for s in said if s)}")
    hints = typing.get_type_hints(cls)
    return cls(**{name: _value(hints[name], value, f"{where}'s {name}") for name, value in data.items()})


def _value(hint: Any, value: Any, where: str) -> Any:
    """``value`` read as ``hint`` (a JSON number as a float, an object as a dataclass); JobError if it is not one."""
    origin, args = typing.get_origin(hint), typing.get_args(hint)
    if hint is Any:
        return value
    if origin in (types.UnionType, typing.Union):
        if value is None and type(None) in args:
            return None
        options = [a for a in args if a is not type(None)]
        if len(options) == 1:  # an optional value that is there: read as its one type, that type's error
            return _value(options[0], value, where)
        for option in options:
            try:
                return _value(option, value, where)
            except JobError:
                pass
    elif hint is type(None):
        if value is None:
            return None
    elif dataclasses.is_dataclass(hint):
        return _read(hint, value, where)
    elif origin is list:
        if isinstance(value, list):
            return [_value(args[0], v, f"{where}[{i}]") for i, v in enumerate(value)]
    elif origin is dict:
        if isinstance(value, dict) and all(isinstance(k, str) for k in value):
            return {k: _value(args[1], v, f"{where}[{k!r}]") for k, v in value.items()}
    elif hint is float:
        if isinstance(value, int | float) and not isinstance(value, bool):
            return float(value)
    elif hint is int:
        if isinstance(value, int) and not isinstance(value, bool):
            return value
    elif isinstance(value, hint):  # str, bool
        return value
    raise JobError(f"{where} must be {_named(hint)}, not {value!r:.80}")


def _named(hint: Any) -> str:
    return hint.__name__ if isinstance(hint, type) and not typing.get_args(hint) else str(hint).replace("typing.", "")
