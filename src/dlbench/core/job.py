"""What a measuring process is asked to do: one typed job, written by the parent and read by the
worker (``python -m dlbench.worker JOB.json RESULT.json``), serialised with a version.

A job is a dataclass per kind: a cell's (:class:`CellJob`, run by its scenario's
:meth:`~dlbench.scenarios.base.Scenario.work`), the gate's (:class:`VerifyJob`), the machine's peak
(:class:`PeakJob`) and the survey's (:class:`SurveyJob`, whose payload the survey's own modules
read). Every field is written by the parent; the worker reads fields and never guesses a default.
The version lets a worker refuse a job it does not read (one from another dlbench), in one line,
rather than misread it.

The standard library and :mod:`dlbench.core.cell` only: a worker in a framework's own environment reads it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any, ClassVar

from dlbench.core.cell import DEFAULT_DEVICE, Cell

#: the version of the job's JSON; a change of fields or of their meaning raises it
JOB_VERSION = 3  # 2: CellJob.optimizer, VerifyJob.optimizers; 3: PeakJob.engine


class JobVersionError(ValueError):
    """A job written by another version of dlbench."""


@dataclass
class Job:
    """What every job has: its kind (the worker's dispatch) and the cores it is pinned to."""

    kind: ClassVar[str] = ""
    #: cores the process is pinned to before any framework is imported (None: all it has)
    threads: int | None

    def on_device(self) -> str:
        """The device the job computes on (a Ray task asks for a GPU by it)."""
        return DEFAULT_DEVICE

    def to_dict(self) -> dict[str, Any]:
        return {"version": JOB_VERSION, "kind": self.kind, **asdict(self)}


@dataclass
class CellJob(Job):
    """One process of a cell: what its scenario's ``work`` reads."""

    kind: ClassVar[str] = "scenario"
    cell: Cell
    seed: int
    data_dir: str | None
    #: the timer's protocol (:meth:`dlbench.planning.suite.ProtocolModel.timer_fields`)
    protocol: dict[str, Any]
    #: the scenario's own settings (:attr:`~dlbench.scenarios.base.Scenario.settings_model`, as data)
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

    def to_dict(self) -> dict[str, Any]:
        return {**super().to_dict(), "cell": self.cell.to_dict()}


@dataclass
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


@dataclass
class PeakJob(Job):
    """One engine's matmul peaks at ``threads`` (:mod:`dlbench.measure.peak`), alone in its process."""

    kind: ClassVar[str] = "peak"
    #: the engine (:data:`dlbench.measure.peak.ENGINES`)
    engine: str


@dataclass
class SurveyJob(Job):
    """A survey check (:mod:`dlbench.survey.jobs`): its payload is the survey's own."""

    kind: ClassVar[str] = "survey"
    payload: dict[str, Any]

    def to_dict(self) -> dict[str, Any]:
        return {"version": JOB_VERSION, "kind": self.kind, "threads": self.threads, "payload": self.payload}


KINDS: dict[str, type[Job]] = {k.kind: k for k in (CellJob, VerifyJob, PeakJob, SurveyJob)}


def encode(job: Job | dict[str, Any]) -> dict[str, Any]:
    """A job as the JSON the worker reads. A plain dict is a survey's job (the survey's probes build
    theirs as data)."""
    if isinstance(job, Job):
        return job.to_dict()
    return SurveyJob(job.get("threads"), job).to_dict()


def decode(data: dict[str, Any]) -> Job:
    """The job a worker was given; :class:`JobVersionError` for one of another version."""
    version = data.get("version")
    if version != JOB_VERSION:
        raise JobVersionError(f"a job of version {version} (this dlbench reads version {JOB_VERSION}): the parent "
                              "and the measuring process run different dlbench versions")
    kind = KINDS[data["kind"]]
    fields_ = {k: v for k, v in data.items() if k not in ("version", "kind")}
    if kind is CellJob:
        fields_["cell"] = Cell(**fields_["cell"])
    return kind(**fields_)
