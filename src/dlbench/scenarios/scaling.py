"""The ``scaling`` scenario: train_step throughput of data-parallel training at W workers, weak or
strong scaling, all-reduce or a parameter server, with compute and communication time split.

Its cells carry the distributed axes (one cell per worker count and exchange); the parent's side,
its launchers and its network live in :mod:`dlbench.distributed.scaling`; its results table in
:mod:`dlbench.distributed.report` (the per-model summary leaves it out).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass, field, replace
from typing import Any, Literal

from dlbench.core.errors import UsageError
from dlbench.distributed import cluster as netns
from dlbench.distributed.scaling import Session
from dlbench.scenarios.base import (
    MAX_WORKERS,
    CellOutcome,
    Context,
    Flag,
    Progress,
    Scenario,
    Shown,
    analyse_iterations,
    check_range,
)

DEFAULT_BANDWIDTH = "1gbit"


@dataclass
class DistributedSettings:
    """Axes and settings of the ``scaling`` scenario (a suite file's ``distributed:``)."""

    __pydantic_config__ = {"extra": "forbid"}  # noqa: RUF012  (read by pydantic, the registry's validator)
    workers: list[int] = field(default_factory=lambda: [1])
    scaling: Literal["weak", "strong"] = "weak"
    exchange: list[Literal["allreduce", "ps-sync", "ps-async"]] = field(default_factory=lambda: ["allreduce"])
    ps_shards: int = 2
    launcher: Literal["subprocess", "torchrun", "ray"] = "subprocess"
    cluster: Literal["", "netns"] = ""
    #: link shaping when ``--cluster`` brings namespaces up itself (tc tbf rate; latency needs netem)
    bandwidth: str = DEFAULT_BANDWIDTH
    latency: str = ""
    #: torchrun across machines: this node's rank, the node count and the c10d rendezvous endpoint
    nnodes: int = 1
    node_rank: int = 0
    rdzv_endpoint: str = ""
    #: Ray cluster address for ``launcher: ray`` ("" starts a local one)
    ray_address: str = ""
    #: fan-out over Ray nodes that differ in CPU model, SIMD flags or GPUs (refused unless set; each cell warns)
    mixed_nodes: bool = False

    def __post_init__(self) -> None:
        """Bounds, then settings that only mean something beside another (each named with its
        ``dlbench run`` flag): checked here so a suite file, the Python API and the command line refuse
        the same combinations."""
        if not self.workers or any(w < 1 or w > MAX_WORKERS for w in self.workers):
            raise ValueError(f"workers must be integers in [1, {MAX_WORKERS}], got {self.workers}")
        if not self.exchange:
            raise ValueError("exchange: the list names nothing")
        check_range(self, "ps_shards", ge=1, le=MAX_WORKERS)
        check_range(self, "nnodes", ge=1, le=MAX_WORKERS)
        check_range(self, "node_rank", ge=0, le=MAX_WORKERS)
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
        if (self.latency or self.bandwidth != DEFAULT_BANDWIDTH) and not self.cluster:
            raise ValueError("bandwidth and latency (--bandwidth, --latency) shape the links of cluster (--cluster)")
        try:
            netns.parse_rate(self.bandwidth)
            if self.latency:
                netns.parse_latency(self.latency)
        except netns.ClusterError as exc:
            raise ValueError(str(exc)) from None


class Scaling(Scenario):
    name = "scaling"
    description = "data-parallel train_step at W workers: speedup, efficiency, compute/communication split"
    requires = ("train_step",)
    trains = True
    flop_factor = 3.0
    in_summary = False
    float32_only = ("data-parallel workers build float32 models: reduced-precision data parallelism (and its "
                    "gradient-averaging check) is not built in dlbench")
    updates = True
    sgd_only = ("data-parallel workers (DDP, shard_map, MultiWorkerMirroredStrategy, the parameter server) train "
                "with SGD momentum: AdamW data parallelism is not built in dlbench")
    settings_model = DistributedSettings
    settings_section = "distributed"
    flags = (
        Flag("--workers", "workers", "comma-separated worker counts, e.g. 1,2,4", int, many=True),
        Flag("--scaling", "scaling", "weak: --batch per worker; strong: --batch is global", choices=("weak", "strong")),
        Flag("--exchange", "exchange", "comma-separated: allreduce (default), ps-sync, ps-async (Ray parameter server)",
             many=True),
        Flag("--ps-shards", "ps_shards", "parameter-server shards (default 2)", int),
        Flag("--launcher", "launcher", "torchrun: this machine is one of --nnodes; ray: cells run as tasks on the Ray "
             "cluster at --address", choices=("subprocess", "torchrun", "ray")),
        Flag("--nnodes", "nnodes", "machines taking part (with --launcher torchrun)", int),
        Flag("--node-rank", "node_rank", "this machine's rank (with --launcher torchrun)", int),
        Flag("--rdzv-endpoint", "rdzv_endpoint", "HOST:PORT of the c10d rendezvous (node 0)"),
        Flag("--address", "ray_address", "Ray cluster address HOST:PORT (with --launcher ray)"),
        Flag("--mixed-nodes", "mixed_nodes", "with --launcher ray: spread cells over nodes even if they differ in CPU "
             "model, SIMD flags or GPUs (each such cell carries a warning; refused otherwise)", switch=True),
        Flag("--cluster", "cluster", "one worker per network namespace (the cluster that is up, or one made for the "
             "run)", switch="netns"),
        Flag("--bandwidth", "bandwidth", "link rate when --cluster makes the namespaces (default 1gbit)"),
        Flag("--latency", "latency", "link latency when --cluster makes the namespaces (needs tc netem)"),
    )

    def cells(self, cell, suite) -> list:
        """A cell per (exchange, worker count). Strong scaling needs the global batch to split evenly:
        other worker counts are left out."""
        d = self.settings_of(suite)
        return [replace(cell, workers=w, scaling=d.scaling, exchange=x, launcher=d.launcher, cluster=d.cluster)
                for x in d.exchange for w in d.workers
                if d.scaling == "weak" or (cell.batch % w == 0)]

    def check(self, cells, suite) -> None:
        """Link latency needs tc netem (where namespaces cannot be made at all, the run falls back to
        loopback and says so)."""
        if self.settings_of(suite).latency and not netns.unavailable() and not netns.netem_available():
            raise UsageError("latency (--latency) needs tc netem (sch_netem), which this kernel does not have")

    def session(self, suite, cells, ray: Any, progress: Progress) -> AbstractContextManager[Session]:
        return Session(suite, cells, ray, progress)

    def estimate(self, cell, suite, step_s: float, start_s: float, epoch_samples: int) -> float:
        """As a timed cell, with one process start per worker."""
        return super().estimate(cell, suite, step_s, start_s * cell.workers, epoch_samples)

    def measure(self, cell, ctx: Context) -> CellOutcome:
        return ctx.sessions[self.name].measure(cell)

    def analyse(self, res, samples, peak) -> None:
        # W workers use W x threads cores: no single process's peak to compare with
        analyse_iterations(res, samples, None, self.flop_factor)

    def show(self, res, db) -> Shown | None:
        """The scaling table (speedup and efficiency against W=1; the per-model summary leaves these
        cells out); ``--json`` has its rows under ``scaling``."""
        from dlbench.distributed.report import scaling_rows, scaling_table
        from dlbench.storage.store import Store

        store = Store(db, read_only=True)
        try:
            rows = scaling_rows(self.cells_of(res), store)
        finally:
            store.close()
        return Shown(scaling_table(rows), rows, "scaling") if rows else None


SCALING = Scaling()
SCENARIOS = (SCALING,)
