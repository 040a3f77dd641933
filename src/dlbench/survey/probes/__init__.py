"""Framework-specific code the survey's live checks run, one module per framework.

A probe module is imported only inside a fresh worker process (``python -m dlbench.worker``), so
the CLI never imports a framework. Each module may define any of these functions; a missing one
means that check has no live test for the framework and the feature matrix keeps the declared value:

* ``forward(job)``: LeNet forward on the CPU (and on a GPU when one is visible);
* ``onnx_export(job)``: export LeNet, run it in ONNX Runtime, compare with the framework's output;
* ``train(job)``: LeNet SGD steps for the checkpoint/restart check (phases below);
* ``allreduce(job)``: one rank of a 2-process all-reduce.

A backend on another branch, or a plugin, adds its probe with :func:`register_probe`.
"""

from __future__ import annotations

import importlib
import importlib.util
from typing import Any

PROBES: dict[str, str] = {
    "torch": "dlbench.survey.probes.torch",
    "jax": "dlbench.survey.probes.jax",
    "tensorflow": "dlbench.survey.probes.tensorflow",
    "keras": "dlbench.survey.probes.keras",
    "onnxruntime": "dlbench.survey.probes.onnxruntime",
}

CHECKS = ("forward", "onnx_export", "train", "allreduce")


def register_probe(framework: str, module: str) -> None:
    PROBES[framework] = module


def has_check(framework: str, check: str) -> bool:
    """Whether the probe defines ``check``, read from its source without importing the framework."""
    spec = importlib.util.find_spec(PROBES[framework]) if framework in PROBES else None
    if spec is None or spec.origin is None:
        return False
    with open(spec.origin) as f:
        return f"\ndef {check}(" in f.read()


def run_probe(job: dict[str, Any]) -> dict[str, Any]:
    """Worker entry: import the framework's probe module and run one check."""
    module = importlib.import_module(PROBES[job["framework"]])
    return getattr(module, job["check"])(job)
