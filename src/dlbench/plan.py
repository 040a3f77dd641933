"""Suites and cells: what a run measures.

A suite (YAML, validated by pydantic) names axes; the plan is their cross product minus
exclusions. A :class:`Cell` is one point of it, a plain value that can be sent to a subprocess
and stored.
"""

from __future__ import annotations

import os
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from dlbench.cell import Cell
from dlbench.distributed.cluster import ClusterError, parse_latency, parse_rate
from dlbench.errors import UsageError
from dlbench.measure.timer import Protocol
from dlbench.scenarios import registry


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

    @field_validator("frameworks", "models", "scenarios", "devices")
    @classmethod
    def _not_empty(cls, v: list[str] | str) -> list[str] | str:
        if not v:
            raise ValueError("the list names nothing")
        return v

    @field_validator("scenarios")
    @classmethod
    def _known_scenarios(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if s not in registry.SCENARIOS]
        if bad:
            raise ValueError(f"unknown scenario(s) {bad}; known: {registry.names()}")
        return v

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


BUILTIN = ("quick", "bahrampour2016", "shi2016", "liu2018")


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
        raise UsageError(f"{source}: malformed YAML{where}: {getattr(exc, 'problem', exc)}") from None
    if not isinstance(data, dict):
        raise UsageError(f"{source}: a suite must be a YAML mapping")
    return suite_from_dict(data, source)


def suite_from_dict(data: dict, source: str = "suite") -> Suite:
    """A validated suite; an invalid one is a :class:`UsageError` of one line (the first problem, and
    how many more there are)."""
    try:
        return Suite.model_validate(data)
    except ValidationError as exc:
        errors = exc.errors()
        err = errors[0]
        loc = ".".join(str(p) if str(p).isprintable() else repr(p) for p in err["loc"]) or "suite"
        msg = " ".join(str(err["msg"]).removeprefix("Value error, ").split())
        others = len({e["loc"][:1] for e in errors} - {err["loc"][:1]})  # a union's alternatives share a field
        more = f" (and problems in {others} more field{'s' if others > 1 else ''})" if others else ""
        raise UsageError(f"{source}: invalid suite: {loc}: {msg}{more}") from None


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
                    batches: list[int] = []
                    for b in raw:
                        size = default_batch_of(model, scenario, data) if b == "default" else int(b)
                        if size not in batches:
                            batches.append(size)
                    for batch in batches:
                        for t in threads:
                            for device in suite.devices:
                                base = Cell(fw, variant, model, scenario, batch, t, device, data)
                                for cell in (cells_of(base) if cells_of else [base]):
                                    if not _excluded(cell, suite.exclude) and cell.key not in seen:
                                        seen.add(cell.key)
                                        cells.append(cell)
    return cells
