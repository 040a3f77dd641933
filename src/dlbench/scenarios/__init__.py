"""What is measured. A timed scenario turns a built model and a placed batch into the closure the
timer calls; ``compile`` times first calls instead (see :mod:`dlbench.scenarios.compile`).

* ``forward``: a batch through the network to its output, inference mode.
* ``gradient``: forward + loss + backward, no update (Bahrampour et al.'s "gradient computation").
* ``train_step``: gradient + SGD momentum update (Shi et al.'s time per mini-batch).
* ``compile``: wall time of the first call of each closure in a fresh process, with the
  framework's caches cold and then warm (Bahrampour et al.'s Table 8).
* ``convergence``: E epochs of training on a real data set, evaluated by dlbench after each
  epoch (see :mod:`dlbench.scenarios.convergence`).
* ``scaling``: train_step throughput of synchronous data parallel training at W workers, weak or
  strong scaling, with compute and communication time split (see :mod:`dlbench.distributed`).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dlbench.frameworks.base import Backend, OptimizerSpec
from dlbench.models.spec import ModelSpec

TIMED = ("forward", "gradient", "train_step")
SCENARIOS = (*TIMED, "compile", "convergence", "scaling")

#: FLOPs of a scenario as a multiple of the forward pass (backward ~ 2x forward, the usual
#: convention; the SGD update's element-wise work is not counted)
FLOP_FACTOR = {"forward": 1.0, "gradient": 3.0, "train_step": 3.0, "scaling": 3.0}


def make_closure(scenario: str, backend: Backend, model: Any, placed: Any, spec: ModelSpec) -> Callable[[], Any]:
    if scenario == "forward":
        return backend.forward(model, placed)
    if scenario == "gradient":
        return backend.gradient(model, placed)
    if scenario == "train_step":
        return backend.train_step(model, placed, OptimizerSpec(lr=spec.learning_rate))
    raise ValueError(f"unknown scenario {scenario!r}")
