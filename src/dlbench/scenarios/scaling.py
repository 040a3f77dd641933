"""The ``scaling`` scenario: train_step throughput of data-parallel training at W workers, weak or
strong scaling, all-reduce or a parameter server, with compute and communication time split.

Its cells carry the distributed axes (one cell per worker count and exchange); the parent's side,
its launchers and its network live in :mod:`dlbench.distributed.scaling`; its results table in
:mod:`dlbench.distributed.report` (the per-model summary leaves it out).
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import replace
from typing import Any

from dlbench.distributed import cluster as netns
from dlbench.distributed.scaling import Session
from dlbench.errors import UsageError
from dlbench.scenarios.base import CellOutcome, Context, Progress, Scenario, analyse_iterations


class Scaling(Scenario):
    name = "scaling"
    description = "data-parallel train_step at W workers: speedup, efficiency, compute/communication split"
    requires = "train_step"
    trains = True
    flop_factor = 3.0
    in_summary = False
    float32_only = ("data-parallel workers build float32 models: reduced-precision data parallelism (and its "
                    "gradient-averaging check) is not built in dlbench")
    updates = True
    sgd_only = ("data-parallel workers (DDP, shard_map, MultiWorkerMirroredStrategy, the parameter server) train "
                "with SGD momentum: AdamW data parallelism is not built in dlbench")

    def cells(self, cell, suite) -> list:
        """A cell per (exchange, worker count). Strong scaling needs the global batch to split evenly:
        other worker counts are left out."""
        d = suite.distributed
        return [replace(cell, workers=w, scaling=d.scaling, exchange=x, launcher=d.launcher, cluster=d.cluster)
                for x in d.exchange for w in d.workers
                if d.scaling == "weak" or (cell.batch % w == 0)]

    def check(self, cells, suite) -> None:
        """Link latency needs tc netem (where namespaces cannot be made at all, the run falls back to
        loopback and says so)."""
        if suite.distributed.latency and not netns.unavailable() and not netns.netem_available():
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


SCENARIOS = (Scaling(),)
