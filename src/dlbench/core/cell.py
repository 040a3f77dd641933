"""A cell: one point of a suite's cross product, the unit that is measured and stored.

A plain value with no dependencies beyond the standard library (and :mod:`dlbench.core.precision`'s
default), so every measuring process (an environment framework's interpreter included) can read one,
and a stable :attr:`Cell.key`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Any

from dlbench.core.precision import DEFAULT as DEFAULT_PRECISION

#: the device of a cell (and a suite, a job) that names none
DEFAULT_DEVICE = "cpu"
#: the seed of a suite that names none (canonical weights, synthetic batches, shuffles)
DEFAULT_SEED = 0
#: the optimiser of a training cell (and a suite) that names none: SGD with momentum, the papers'
DEFAULT_OPTIMIZER = "sgd"


def key_kind(key: str) -> tuple[str, str]:
    """The framework and the thread count a cell key names (the first and the sixth of :meth:`Cell.key`'s
    fields, ``t1``), as the planner groups a run's cells of a kind (:func:`dlbench.measure.adaptive.run_floor`)."""
    fields = key.split("/")
    return fields[0], fields[5] if len(fields) > 5 else ""


@dataclass(frozen=True, order=True)
class Cell:
    framework: str
    variant: str
    model: str
    scenario: str
    batch: int
    threads: int
    device: str = DEFAULT_DEVICE
    data: str = "synthetic"  # or a data set name (dlbench.data): batches of real samples
    # distributed axes (scenario ``scaling``); the defaults leave every other cell's key unchanged
    workers: int = 1
    scaling: str = ""  # weak (batch per worker) or strong (batch = global batch)
    exchange: str = ""  # allreduce, ps-sync, ps-async
    launcher: str = "subprocess"  # subprocess (one node), torchrun (nodes joined by --rdzv-endpoint), ray
    cluster: str = ""  # "" (loopback) or "netns" (one worker per network namespace)
    precision: str = DEFAULT_PRECISION  # dlbench.core.precision: fp32, bf16, fp16, amp-bf16, amp-fp16, int8, tf32
    #: the optimiser of a cell whose scenario updates parameters (``Scenario.updates``): sgd or adamw;
    #: other cells keep the default
    optimizer: str = DEFAULT_OPTIMIZER

    @property
    def key(self) -> str:
        key = f"{self.framework}/{self.variant}/{self.model}/{self.scenario}/b{self.batch}/t{self.threads}/{self.device}"
        if self.precision != DEFAULT_PRECISION:  # float32 cells keep the keys they had before precision was an axis
            key += f"/{self.precision}"
        if self.optimizer != DEFAULT_OPTIMIZER:  # SGD cells keep the keys they had before the optimiser was a setting
            key += f"/{self.optimizer}"
        if self.data != "synthetic":
            key += f"/{self.data}"
        if self.scaling or self.workers != 1:  # a data-parallel cell (scaling scenario)
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
    def group(self) -> tuple[str, str, str, str, str]:
        """What one verification covers: the gate is per precision too."""
        return (self.framework, self.variant, self.model, self.device, self.precision)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
