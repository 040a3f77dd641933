"""Suites and cells: what a run measures.

A suite (YAML, validated by pydantic) names axes; the plan is their cross product minus
exclusions. A :class:`Cell` is one point of it, a plain value that can be sent to a subprocess
and stored.
"""

from __future__ import annotations

import os
from dataclasses import asdict, dataclass, replace
from importlib import resources
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from dlbench.errors import UsageError
from dlbench.measure.timer import Protocol
from dlbench.scenarios import SCENARIOS


@dataclass(frozen=True, order=True)
class Cell:
    framework: str
    variant: str
    model: str
    scenario: str
    batch: int
    threads: int
    device: str = "cpu"
    data: str = "synthetic"  # or a data set name (dlbench.data): batches of real samples
    # distributed axes (scenario ``scaling``); the defaults leave every other cell's key unchanged
    workers: int = 1
    scaling: str = ""  # weak (batch per worker) or strong (batch = global batch)
    exchange: str = ""  # allreduce, ps-sync, ps-async
    launcher: str = "subprocess"  # subprocess (one node), torchrun (nodes joined by --rdzv-endpoint), ray
    cluster: str = ""  # "" (loopback) or "netns" (one worker per network namespace)

    @property
    def key(self) -> str:
        key = f"{self.framework}/{self.variant}/{self.model}/{self.scenario}/b{self.batch}/t{self.threads}/{self.device}"
        if self.data != "synthetic":
            key += f"/{self.data}"
        if self.scenario == "scaling" or self.workers != 1:
            key += f"/w{self.workers}/{self.scaling or 'weak'}/{self.exchange or 'allreduce'}"
        if self.launcher != "subprocess":
            key += f"/{self.launcher}"
        if self.cluster:
            key += f"/{self.cluster}"
        return key

    @property
    def per_worker_batch(self) -> int:
        """Weak scaling keeps the batch per worker; strong scaling splits the global batch."""
        return self.batch // self.workers if self.scaling == "strong" else self.batch

    @property
    def global_batch(self) -> int:
        return self.per_worker_batch * self.workers

    @property
    def group(self) -> tuple[str, str, str, str]:
        """What one verification covers."""
        return (self.framework, self.variant, self.model, self.device)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


class ProtocolModel(BaseModel):
    model_config = ConfigDict(extra="forbid")
    warmup: int = Field(10, ge=0)
    min_iters: int = Field(20, ge=1)
    min_time_s: float = Field(2.0, ge=0)
    repeats: int = Field(3, ge=1)
    max_time_s: float = Field(120.0, gt=0)
    timeout_s: float = Field(600.0, gt=0)

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

    @field_validator("workers")
    @classmethod
    def _workers(cls, v: list[int]) -> list[int]:
        if not v or any(w < 1 for w in v):
            raise ValueError(f"workers must be positive integers, got {v}")
        return v


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

    @field_validator("scenarios")
    @classmethod
    def _known_scenarios(cls, v: list[str]) -> list[str]:
        bad = [s for s in v if s not in SCENARIOS]
        if bad:
            raise ValueError(f"unknown scenario(s) {bad}; known: {list(SCENARIOS)}")
        return v

    @field_validator("threads")
    @classmethod
    def _threads(cls, v: list[int | str]) -> list[int | str]:
        for t in v:
            if isinstance(t, int) and t <= 0 or isinstance(t, str) and t not in ("all", "half"):
                raise ValueError(f"threads must be positive integers, 'all' or 'half', got {t!r}")
        return v

    @field_validator("batch_sizes")
    @classmethod
    def _batches(cls, v):
        lists = v.values() if isinstance(v, dict) else [v]
        for lst in lists:
            for b in lst:
                if isinstance(b, int) and b <= 0 or isinstance(b, str) and b != "default":
                    raise ValueError(f"batch sizes must be positive integers or 'default', got {b!r}")
        return v


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
    try:
        return Suite.model_validate(data)
    except ValidationError as exc:
        err = exc.errors()[0]
        loc = ".".join(str(p) for p in err["loc"])
        raise UsageError(f"{source}: invalid suite: {loc}: {err['msg']}") from None


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
           scenarios_of=None) -> list[Cell]:
    """The suite's cells. ``variants_of(framework, requested)``, ``default_batch_of(model, scenario, data)``
    and ``scenarios_of(framework, scenarios)`` (the scenarios a framework measures for those the suite
    names; default: the same) come from the registries (kept out of this module so it stays pure)."""
    threads = resolve_threads(suite.threads, cores)
    cells: list[Cell] = []
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
                                for cell in _with_workers(base, suite):
                                    if not _excluded(cell, suite.exclude):
                                        cells.append(cell)
    return cells


def _with_workers(cell: Cell, suite: Suite) -> list[Cell]:
    """A scaling cell per (exchange, worker count); other scenarios are single-worker cells.
    Strong scaling needs the global batch to split evenly: other worker counts are left out."""
    if cell.scenario != "scaling":
        return [cell]
    d = suite.distributed
    return [replace(cell, workers=w, scaling=d.scaling, exchange=x, launcher=d.launcher, cluster=d.cluster)
            for x in d.exchange for w in d.workers
            if d.scaling == "weak" or (cell.batch % w == 0)]
