"""Suites as data: the validated model of a suite file (its axes and each scenario's settings).

Kept apart from :mod:`dlbench.plan` (which loads suites and expands them into cells, asking the
scenario registry) so that the scenarios, which read a suite's settings, import no registry: the
suite's scenario names are checked against the registry where a suite is made
(:func:`dlbench.plan.suite_from_dict`).
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from dlbench.distributed.cluster import ClusterError, parse_latency, parse_rate
from dlbench.generation.settings import GenerationModel
from dlbench.measure.timer import Protocol
from dlbench.precision import PRECISIONS


class ProtocolModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    warmup: int = Field(10, ge=0)
    min_iters: int = Field(20, ge=1)
    min_time_s: float = Field(2.0, ge=0)
    repeats: int = Field(3, ge=1)
    max_time_s: float = Field(120.0, gt=0)
    timeout_s: float = Field(600.0, gt=0)
    #: calls profiled by the framework's own profiler after the timed ones, in the first process of each
    #: timed cell (0: no profile; dlbench.measure.profile)
    profile_calls: int = Field(0, ge=0, le=1000)

    def timer_fields(self) -> dict[str, Any]:
        """What a measuring process's timer takes (a job carries these; the timeout and the profile are
        the parent's settings)."""
        return self.model_dump(exclude={"timeout_s", "profile_calls"})

    def protocol(self) -> Protocol:
        return Protocol(warmup=self.warmup, min_iters=self.min_iters, min_time_s=self.min_time_s,
                        repeats=self.repeats, max_time_s=self.max_time_s)


class ConvergenceModel(BaseModel):
    """Settings of the convergence scenario."""

    model_config = ConfigDict(extra="forbid")
    epochs: int = Field(10, ge=1)
    target_accuracy: float = Field(0.95, gt=0, le=1)
    lr: float | None = Field(None, gt=0)
    log_steps: int = Field(50, ge=1)


class ServingModel(BaseModel):
    """Settings of the deployment scenarios (``latency``, ``loadgen-*``; see docs/serving.md). None
    keeps MLPerf LoadGen's own rule or dlbench's default, named beside each."""

    model_config = ConfigDict(extra="forbid")
    #: timed single calls per process of a latency cell (3 processes x 3,500 calls: a p99.9 has its 10,000)
    latency_calls: int = Field(3500, ge=1)
    #: server: the target rate of Poisson-arriving queries (None: half the rate one stream of calls reaches)
    qps: float | None = Field(None, gt=0)
    #: server: the bound on the 99th percentile latency, ms (None: LoadGen's default, 100 ms)
    p99_ms: float | None = Field(None, gt=0)
    #: server: search the highest QPS meeting the bound (LoadGen's FindPeakPerformance mode)
    find_peak: bool = False
    #: LoadGen's minimum duration and query count (None: LoadGen's rules); shorter ones mark the cell
    #: as not meeting LoadGen's rules
    min_duration_s: float | None = Field(None, gt=0)
    min_queries: int | None = Field(None, ge=1)


class DistributedModel(BaseModel):
    """Axes and settings of the ``scaling`` scenario (ignored by every other scenario)."""

    model_config = ConfigDict(extra="forbid")
    workers: list[int] = Field(default_factory=lambda: [1])
    scaling: Literal["weak", "strong"] = "weak"
    exchange: list[Literal["allreduce", "ps-sync", "ps-async"]] = Field(default_factory=lambda: ["allreduce"])
    ps_shards: int = Field(2, ge=1)
    launcher: Literal["subprocess", "torchrun", "ray"] = "subprocess"
    cluster: Literal["", "netns"] = ""
    #: link shaping when ``--cluster`` brings namespaces up itself (tc tbf rate; latency needs netem)
    bandwidth: str = "1gbit"
    latency: str = ""
    #: torchrun across machines: this node's rank, the node count and the c10d rendezvous endpoint
    nnodes: int = Field(1, ge=1)
    node_rank: int = Field(0, ge=0)
    rdzv_endpoint: str = ""
    #: Ray cluster address for ``launcher: ray`` ("" starts a local one)
    ray_address: str = ""
    #: fan-out over Ray nodes that differ in CPU model, SIMD flags or GPUs (refused unless set; each cell warns)
    mixed_nodes: bool = False

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: list[int]) -> list[int]:
        if not v or any(w < 1 for w in v):
            raise ValueError(f"workers must be positive integers, got {v}")
        return v

    @field_validator("exchange")
    @classmethod
    def _exchange(cls, v: list[str]) -> list[str]:
        if not v:
            raise ValueError("the list names nothing")
        return v

    @model_validator(mode="after")
    def _settings_fit_together(self) -> DistributedModel:
        """Settings that only mean something beside another (each named with its ``dlbench run`` flag):
        checked here so a suite file, the Python API and the command line refuse the same combinations."""
        torchrun = self.nnodes != 1 or self.node_rank != 0 or self.rdzv_endpoint
        if torchrun and self.launcher != "torchrun":
            raise ValueError("nnodes, node_rank and rdzv_endpoint (--nnodes, --node-rank, --rdzv-endpoint) "
                             "go with launcher torchrun")
        if not self.node_rank < self.nnodes:
            raise ValueError(f"node_rank (--node-rank) must be in [0, {self.nnodes}), got {self.node_rank}")
        if self.nnodes > 1 and not self.rdzv_endpoint:
            raise ValueError("launcher torchrun with nnodes > 1 needs rdzv_endpoint (--rdzv-endpoint HOST:PORT)")
        if self.rdzv_endpoint and ":" not in self.rdzv_endpoint:
            raise ValueError(f"rdzv_endpoint (--rdzv-endpoint) must be HOST:PORT, got {self.rdzv_endpoint!r}")
        if self.ray_address and self.launcher != "ray":
            raise ValueError("ray_address (--address) goes with launcher ray")
        if self.mixed_nodes and self.launcher != "ray":
            raise ValueError("mixed_nodes (--mixed-nodes) goes with launcher ray")
        if self.cluster and self.launcher != "subprocess":
            raise ValueError(f"cluster (--cluster) simulates nodes on this machine; it does not combine with "
                             f"launcher {self.launcher}")
        default_bandwidth = type(self).model_fields["bandwidth"].default
        if (self.latency or self.bandwidth != default_bandwidth) and not self.cluster:
            raise ValueError("bandwidth and latency (--bandwidth, --latency) shape the links of cluster (--cluster)")
        try:
            parse_rate(self.bandwidth)
            if self.latency:
                parse_latency(self.latency)
        except ClusterError as exc:
            raise ValueError(str(exc)) from None
        return self


class Suite(BaseModel):
    """A suite file. ``data`` maps a model (or ``default``) to a real data set whose samples fill the
    batches instead of synthetic ones (``data_dir`` says where its files are).
    ``frameworks: installed`` means every installed framework; ``variants`` maps a
    framework to its variants (``all``, or a list; default: the framework's first); ``batch_sizes``
    is a list or a mapping model -> list (``default`` = the model's default batch); ``threads``
    holds integers, ``all`` or ``half`` (clipped to the cores present, duplicates dropped)."""

    model_config = ConfigDict(extra="forbid")
    name: str = "custom"
    description: str = ""
    frameworks: list[str] | str = "installed"
    variants: dict[str, list[str] | str] = Field(default_factory=dict)
    models: list[str]
    scenarios: list[str] = Field(default_factory=lambda: ["forward", "gradient", "train_step"])
    batch_sizes: list[int | str] | dict[str, list[int | str]] = Field(default_factory=lambda: ["default"])
    threads: list[int | str] = Field(default_factory=lambda: [1, "all"])
    devices: list[str] = Field(default_factory=lambda: ["cpu"])
    #: numeric precisions (dlbench.precision); every cell is measured at each
    precisions: list[str] = Field(default_factory=lambda: ["fp32"])
    exclude: list[dict[str, Any]] = Field(default_factory=list)
    #: with ``frameworks: installed``, installed frameworks to leave out (named ones are always run)
    installed_except: list[str] = Field(default_factory=list)
    data: dict[str, str] = Field(default_factory=dict)  # model -> data set ("default" key: every model)
    data_dir: str | None = None
    protocol: ProtocolModel = Field(default_factory=ProtocolModel)
    convergence: ConvergenceModel = Field(default_factory=ConvergenceModel)
    seed: int = 0
    distributed: DistributedModel = Field(default_factory=lambda: DistributedModel())
    serving: ServingModel = Field(default_factory=ServingModel)
    generation: GenerationModel = Field(default_factory=GenerationModel)

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
