"""The survey's live checks: framework-specific code, one probe module per framework folder.

A probe module is imported only inside a fresh worker process (``python -m dlbench.worker``), so
the CLI never imports a framework. Each module may define any of these functions; a missing one
means that check has no live test for the framework and the feature matrix keeps the declared value:

* ``forward(job)``: LeNet forward on the CPU (and on a GPU when one is visible);
* ``onnx_export(job)``: export LeNet, run it in ONNX Runtime, compare with the framework's output;
* ``train(job)``: LeNet SGD steps for the checkpoint/restart check (phases below);
* ``allreduce(job)``: one rank of a 2-process all-reduce.

A framework's probe is its folder's ``probe.py`` (``dlbench/frameworks/NAME/probe.py``), named by
its declaration (``probe``); a plug-in's declaration names its own.
"""

from __future__ import annotations

import importlib.util
from typing import Any

from dlbench import frameworks

CHECKS = ("forward", "onnx_export", "train", "allreduce")


def has_check(framework: str, check: str) -> bool:
    """Whether the probe defines ``check``, read from its source without importing the framework."""
    module = frameworks.part_module(framework, "probe")
    spec = importlib.util.find_spec(module) if module is not None else None
    if spec is None or spec.origin is None:
        return False
    with open(spec.origin) as f:
        return f"\ndef {check}(" in f.read()


def run_probe(job: dict[str, Any]) -> dict[str, Any]:
    """Worker entry: import the framework's probe module and run one check."""
    module = frameworks.load_part(job["framework"], "probe")
    return getattr(module, job["check"])(job)
