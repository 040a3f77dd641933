"""The survey's work inside a worker process (``kind: survey``): framework imports happen here only."""

from __future__ import annotations

from typing import Any


def run(job: dict[str, Any]) -> dict[str, Any]:
    task = job["task"]
    if task == "probe":
        from dlbench.survey.probes import run_probe

        return run_probe(job)
    if task == "api":
        from dlbench.survey.api_coverage import introspect

        return introspect(job["framework"])
    if task == "zoo":
        from dlbench.survey.zoo import introspect

        return introspect(job["framework"])
    raise ValueError(f"unknown survey task {task!r}")
